use agent_errors::Agent;

// Stands in for a rig provider's model (`openai::CompletionModel`, say): `.model(..)` takes a
// `ChatModel`, and any other type is told the same thing, a rig model's way in among it.
struct CompletionModel;

fn main() {
    let _ = Agent::builder("support").model(CompletionModel);
}

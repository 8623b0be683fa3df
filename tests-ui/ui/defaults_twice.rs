agent_errors::defaults!(on_error(execution = retry(3)));
agent_errors::defaults!(on_error(execution = escalate));

fn main() {}

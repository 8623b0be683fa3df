fn main() {
    let _tools = agent_errors::tools![a::<u8>, b c];
}

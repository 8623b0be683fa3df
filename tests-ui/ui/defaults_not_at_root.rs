mod policies {
    agent_errors::defaults!(on_error(execution = retry(3)));
}

fn main() {}

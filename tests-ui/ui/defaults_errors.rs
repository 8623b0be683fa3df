agent_errors::defaults!(on_eror(execution = retry(3)));

fn main() {}

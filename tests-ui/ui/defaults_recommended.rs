agent_errors::defaults!(recommended(strict));

fn main() {}

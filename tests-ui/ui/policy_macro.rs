fn main() {
    let _ = agent_errors::policy!(execution = [escalate, degrade], auth = retry(2));
}

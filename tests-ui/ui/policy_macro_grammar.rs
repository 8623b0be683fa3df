fn main() {
    let _ = agent_errors::policy!(execution = retry(max = "1h"), timeout = [retry(2) escalate]);
    let _ = agent_errors::policy!(on_error(execution = retry(2)));
}

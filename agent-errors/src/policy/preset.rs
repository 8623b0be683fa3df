//! The recommended preset: one line that recovers what can be recovered without ever applying
//! an effect twice. What each rule does and why it is safe is said on [`Policy::recommended`].

use super::{Action, Ladder, OnTrip, Policy, PolicyKey, RunBreakerRule, RunFailureRate};
use crate::ErrorKind;

/// Calls at most, the first included, for a failure that may pass: the field's usual three.
const ATTEMPTS: u32 = 3;

/// The per-run breaker's rule under the preset: a (tool, kind) whose failures are at least 3
/// and at least 60% of the tool's last 10 calls in the run takes the tool off the table.
pub(crate) const RUN_BREAKER: RunBreakerRule = RunBreakerRule::new(OnTrip::RemoveTool)
    .per_kind()
    .failure_rate(RunFailureRate::new(60, 10, 3));

impl Policy {
    /// The recommended preset: what `defaults!(recommended)`, `policy!(recommended)`,
    /// [`AgentBuilder::recommended`](crate::AgentBuilder::recommended) and
    /// [`RegistryBuilder::recommended`](crate::build::RegistryBuilder::recommended) put just
    /// below the entries of the layer that asks for it, shown by `explain` as the layer
    /// "recommended preset". Entries written in that layer or above win key by key; a `retry`
    /// written there that could apply an effect twice is warned about when the agent is built.
    ///
    /// The rules, and why each is safe:
    ///
    /// - **`transient`, `timeout`, `quota`, `server_error` = `[retry(3, when_safe), escalate]`.**
    ///   Three calls at most, with exponential backoff, 25% jitter and the server's
    ///   `Retry-After` when it sends one, and only where a second call cannot apply the effect
    ///   twice: the tool is idempotent, or hands the call's idempotency key to its service and
    ///   says so ([`ToolDef::keyed`](crate::ToolDef::keyed); a `#[tool]` with a
    ///   `Ctx<IdempotencyKey>` parameter says so by itself), or the failure shows the request
    ///   was not carried out (connection refused, a host name that did not resolve, a rate
    ///   limit: the service refused the request before doing it). A timeout, dropped
    ///   connection or 5xx of any other tool may have taken effect: it is answered as an
    ///   unknown outcome (the `outcome_unknown` key), never by a blind second call. Retries
    ///   used up, the model is told what failed instead of the run ending.
    /// - **`invalid_args` = `[fix(builtin), escalate]`.** Arguments that do not parse or fit
    ///   the schema are first repaired by the built-in repair
    ///   ([`repair_arguments`](crate::repair::repair_arguments): a fence or prose around the
    ///   object, trailing commas, single quotes, bare keys, Python literals, an object sent as
    ///   a string, a number or boolean in quotes, a key off by case, `_` or `-`), which refuses rather than guesses and whose
    ///   arguments pass the gate like the model's; what it cannot repair is shown to the model
    ///   with what is wrong. The tool never ran on the broken arguments, so nothing can happen
    ///   twice.
    /// - **`not_found`, `validation`, `bug`, `unknown` = `escalate`; `execution` = `escalate`.**
    ///   The model is shown the failure, short, sanitized and redacted like every text it
    ///   reads; a failure nothing recognised is not retried, since nothing says a second call
    ///   would pass or would not repeat an effect.
    /// - **`outcome_unknown` = `escalate`.** The model is told the call may have taken effect
    ///   and what it can do (check with a read-only tool, ask a person); nothing is called
    ///   again by itself.
    /// - **`auth` = `throw`.** Credentials refused end the run, as by default: no other call
    ///   will fare better, and the model cannot fix them.
    /// - **Every tool's successful output is checked for an error envelope**
    ///   ([`OutputCheck::envelopes`](crate::call::OutputCheck::envelopes)): a lone `error`
    ///   member, `"ok": false`, GraphQL's `data: null` with `errors`. What the envelope says is
    ///   classified like any failure's text (a rate limit is `quota`, "temporarily unavailable"
    ///   is `transient`, "not found" is `not_found`, a refusal of the request is `validation`),
    ///   so a domain refusal reaches the model instead of being retried; an output that only
    ///   mentions an error passes. A tool's own check is kept.
    /// - **The per-run breaker counts failures per (tool, kind) by failure rate**: a tool is
    ///   taken off the table, the model told why, once one kind of failure is at least 3 of
    ///   and at least 60% of its last 10 calls in the run; the run goes on with the other
    ///   tools, and ends when the model calls a removed tool until it trips again.
    /// - **The service breaker of an agent built with the preset opens on a failure rate**
    ///   (half of the last 100 calls failed, judged from the 20th; 30 s before a probe) unless
    ///   the agent is given its own, so one call that meets a few faults in a row does not
    ///   open a circuit for everyone; a call its open circuit refuses is shown to the model
    ///   with when to try again, not the end of the run.
    /// - **On an agent, a model call that fails with a failure that may pass** (overloaded,
    ///   rate-limited, a 5xx, timed out) is retried, four calls in all, with backoff from
    ///   500 ms, jitter and the server's `Retry-After`, unless `on_llm_error` is given: a model
    ///   call applies no effect, so a second one cannot repeat anything.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::policy::{Policy, PolicyKey};
    ///
    /// let preset = Policy::recommended();
    /// assert!(preset.uses_recommended());
    /// assert!(preset.get(PolicyKey::Execution).is_none()); // its entries live in their own layer
    /// let timeout = Policy::recommended_entries();
    /// let ladder = timeout.get(PolicyKey::Kind(agent_errors::ErrorKind::Timeout)).unwrap();
    /// assert_eq!(ladder.to_string(), "[retry(3, when_safe), escalate]");
    /// ```
    pub fn recommended() -> Policy {
        Policy {
            preset: true,
            ..Policy::default()
        }
    }

    /// The preset's own entries and per-run breaker rule, as the layer "recommended preset"
    /// holds them (see [`Policy::recommended`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::policy::{Policy, PolicyKey};
    ///
    /// let entries = Policy::recommended_entries();
    /// let auth = entries.get(PolicyKey::Kind(ErrorKind::Auth)).unwrap();
    /// assert_eq!(auth.to_string(), "throw");
    /// assert!(!entries.uses_recommended());
    /// ```
    pub fn recommended_entries() -> Policy {
        let retried = || {
            Ladder::new([
                Action::retry_when_safe(ATTEMPTS).expect("3 is not zero"),
                Action::Escalate,
            ])
        };
        let shown = [
            ErrorKind::NotFound,
            ErrorKind::Validation,
            ErrorKind::Bug,
            ErrorKind::Unknown,
            ErrorKind::OutcomeUnknown,
        ];
        let retryable = [
            ErrorKind::Transient,
            ErrorKind::Timeout,
            ErrorKind::Quota,
            ErrorKind::ServerError,
        ];
        let policy = Policy::new()
            .on(
                PolicyKey::InvalidArgs,
                Ladder::new([
                    Action::fix_builtin(1).expect("1 is not zero"),
                    Action::Escalate,
                ]),
            )
            .on(PolicyKey::Execution, Action::Escalate)
            .on(PolicyKey::Kind(ErrorKind::Auth), Action::Throw);
        let policy = retryable.into_iter().fold(policy, |policy, kind| {
            policy.on(PolicyKey::Kind(kind), retried())
        });
        shown
            .into_iter()
            .fold(policy, |policy, kind| {
                policy.on(PolicyKey::Kind(kind), Action::Escalate)
            })
            .run_breaker(RUN_BREAKER)
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    fn attempts() -> NonZeroU32 {
        NonZeroU32::new(ATTEMPTS).expect("3 is not zero")
    }

    #[test]
    fn every_key_is_set_and_retries_only_when_safe() {
        let entries = Policy::recommended_entries();
        for key in PolicyKey::all() {
            let ladder = entries.get(key).expect("the preset sets every key");
            for action in ladder.actions() {
                if let Action::Retry(retry) = action {
                    assert!(retry.when_safe, "{key}");
                    assert_eq!(retry.max_attempts, attempts());
                    assert!(key.can_retry());
                }
            }
        }
        assert_eq!(entries.run_breaker_rule(), Some(RUN_BREAKER));
    }
}

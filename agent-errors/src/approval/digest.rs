//! What names a question: the digest of a pending approval, and the place it is asked in (a
//! run, a Restate awakeable), so an answer to one question answers no other.

use sha2::{Digest as _, Sha256};

use super::{PendingApproval, WaitReason};

impl PendingApproval {
    /// The question as the run named `run_id` asks it. A run binds the digest of each question
    /// it asks to its id, so an answer given in one run answers nothing in another: a signed
    /// answer copied to another run waiting on the same call, tool and arguments is refused
    /// there. For testing an approver of your own against what a run asks.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{PendingApproval, WaitReason};
    ///
    /// let asked = || PendingApproval::new("call_1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// let (rent, other) = (asked().in_run("rent"), asked().in_run("rent-again"));
    /// assert_ne!(rent.digest, other.digest);
    /// assert_eq!(rent.digest, asked().in_run("rent").digest);
    /// ```
    #[must_use]
    pub fn in_run(self, run_id: &str) -> PendingApproval {
        self.asked_at(run_id)
    }

    /// The same question asked at `place` (a run's id, a Restate awakeable's id): its digest
    /// covers the place too, so an answer to it answers nowhere else.
    pub(crate) fn asked_at(&self, place: &str) -> PendingApproval {
        PendingApproval {
            digest: hashed(&[&self.digest, place]),
            ..self.clone()
        }
    }
}

/// SHA-256 of the tool, the arguments and the reason, each length-prefixed so no two questions
/// share a text.
pub(super) fn digest(tool: &str, arguments: &str, reason: &WaitReason) -> String {
    let reason = serde_json::to_string(reason).unwrap_or_default();
    hashed(&[tool, arguments, &reason])
}

/// SHA-256 (hex) of `parts`, each length-prefixed.
fn hashed(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

//! A person's answer as a value that travels: bound to its question by the question's digest,
//! optionally expiring at a wall-clock time, and optionally signed with a key of the user's so a
//! client that carries it cannot change it.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::{Decision, PendingApproval};

/// The most bytes an answer's text ([`Answer::from_token`]) may have: longer text is refused
/// before it is read. Room for the token of a person's edit of the longest arguments a question
/// shows whole ([`MAX_SHOWN_CHARS`](super::MAX_SHOWN_CHARS) characters of up to four bytes
/// each, as JSON, in base64url).
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{Answer, AnswerError, MAX_ANSWER_BYTES};
///
/// let long = "x".repeat(MAX_ANSWER_BYTES + 1);
/// assert!(matches!(Answer::from_token(&long), Err(AnswerError::TooLong { .. })));
/// ```
pub const MAX_ANSWER_BYTES: usize = (4 * super::MAX_SHOWN_CHARS + 4 * 1024) / 3 * 4 + 4;

/// The fewest bytes an [`AnswerKey`] takes: HMAC-SHA256's own output size.
const MIN_KEY_BYTES: usize = 32;

/// Separates this library's answer signatures from any other use of the same key.
const SIGNING_CONTEXT: &[u8] = b"agent-errors answer v1";

/// A person's answer to one [`PendingApproval`], as a value to hand a run
/// ([`RunOptions::answered`](crate::RunOptions::answered)) or to send through a client
/// (as the opaque, URL-safe text of [`to_token`](Self::to_token)).
///
/// It names its question by the question's [`digest`](PendingApproval::digest), so it answers
/// only that question, once. It may [expire](Self::expires_at): a call reached after its
/// answer expired does not run, and the model is told the approval expired (not that it was
/// denied), so it can ask again or tell the user. It may be [signed](Self::signed) with an
/// [`AnswerKey`]: an agent given that key
/// ([`AgentBuilder::answer_key`](crate::AgentBuilder::answer_key)) takes only answers signed
/// with it, so an answer that travels through a client the user does not trust cannot be
/// forged, changed, or made to last longer.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use agent_errors::approval::{Answer, AnswerKey, Decision, PendingApproval, WaitReason};
///
/// let key = AnswerKey::new(b"a secret of at least thirty-two bytes!")?;
/// let pending = PendingApproval::new("call-1", "transfer", r#"{"amount": 1}"#, WaitReason::ApprovalRequired);
/// // The approval side: the person's decision, good for an hour, signed.
/// let token = Answer::to(&pending, Decision::Approve)
///     .expires_at(SystemTime::now() + Duration::from_secs(3600))
///     .signed(&key)
///     .to_token();
/// // The run side: what came back from the client, read within bounds.
/// let answer = Answer::from_token(&token)?;
/// assert_eq!(answer.decision(), &Decision::Approve);
/// assert!(key.verifies(&answer));
/// # Ok::<(), agent_errors::approval::AnswerError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    call_id: String,
    digest: String,
    decision: Decision,
    /// Milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
    /// HMAC-SHA256 (hex) of everything above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signature: Option<String>,
}

impl Answer {
    /// `decision` for `pending`: bound to its digest, with no expiry and no signature.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, Decision, PendingApproval, WaitReason};
    ///
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// let answer = Answer::to(&pending, Decision::Deny("not today".into()));
    /// assert_eq!(answer.digest(), pending.digest);
    /// ```
    pub fn to(pending: &PendingApproval, decision: Decision) -> Answer {
        Answer {
            call_id: pending.call_id.clone(),
            digest: pending.digest.clone(),
            decision,
            expires_at_ms: None,
            signature: None,
        }
    }

    /// An answer by call id alone (no digest): for the question a run saved when it stopped.
    pub(crate) fn by_call_id(call_id: String, decision: Decision) -> Answer {
        Answer {
            call_id,
            digest: String::new(),
            decision,
            expires_at_ms: None,
            signature: None,
        }
    }

    /// The answer holds until `at`, a wall-clock time (it must hold across a restart, in any
    /// process): a call the run reaches later does not run, and the model is told the approval
    /// expired. Sign after setting it: the signature covers the expiry.
    ///
    /// A run reads the wall clock once when it starts and moves it on by Tokio's clock, so a
    /// test under `tokio::time::pause()` moves an answer toward its expiry by advancing time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use agent_errors::approval::{Answer, Decision, PendingApproval, WaitReason};
    ///
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// let at = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
    /// let answer = Answer::to(&pending, Decision::Approve).expires_at(at);
    /// assert_eq!(answer.expiry(), Some(at));
    /// ```
    #[must_use]
    pub fn expires_at(mut self, at: SystemTime) -> Answer {
        let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        self.expires_at_ms = Some(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Signs the answer with `key`: its call id, digest, decision and expiry. An agent given
    /// the key takes the answer only while all four are as signed.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, AnswerKey, Decision, PendingApproval, WaitReason};
    ///
    /// let key = AnswerKey::new([7u8; 32])?;
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// let answer = Answer::to(&pending, Decision::Approve).signed(&key);
    /// assert!(key.verifies(&answer));
    /// # Ok::<(), agent_errors::approval::AnswerError>(())
    /// ```
    #[must_use]
    pub fn signed(mut self, key: &AnswerKey) -> Answer {
        let tag = key.mac(&self).finalize().into_bytes();
        self.signature = Some(tag.iter().map(|b| format!("{b:02x}")).collect());
        self
    }

    /// The answer as an opaque token to send through a client: URL-safe text (base64url of
    /// its JSON, `A-Z a-z 0-9 - _` only) that goes in a link, a query string, a form field or
    /// a header as it is; [`from_token`](Self::from_token) reads it back.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, Decision, PendingApproval, WaitReason};
    ///
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// let answer = Answer::to(&pending, Decision::Approve);
    /// let token = answer.to_token();
    /// assert!(token.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    /// let link = format!("https://approvals.example/answer/{token}");
    /// assert_eq!(Answer::from_token(link.rsplit('/').next().unwrap())?, answer);
    /// # Ok::<(), agent_errors::approval::AnswerError>(())
    /// ```
    pub fn to_token(&self) -> String {
        super::token::encode(serde_json::to_string(self).unwrap_or_default().as_bytes())
    }

    /// Reads an answer from text a client sent: at most [`MAX_ANSWER_BYTES`], refused before
    /// it is decoded when longer, and then a token of [`to_token`](Self::to_token) (or, as
    /// earlier versions wrote it, an answer's JSON) and nothing else; surrounding whitespace
    /// is ignored. Reading does not check it: a run checks the digest, the expiry and (when it
    /// has a key) the signature when it uses the answer.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, AnswerError};
    ///
    /// assert!(matches!(Answer::from_token("not a token!"), Err(AnswerError::NotAToken { at: 3 })));
    /// assert!(matches!(Answer::from_token(r#"{"decision": "Approve"}"#), Err(AnswerError::Malformed(_))));
    /// ```
    pub fn from_token(text: &str) -> Result<Answer, AnswerError> {
        if text.len() > MAX_ANSWER_BYTES {
            return Err(AnswerError::TooLong {
                bytes: text.len(),
                max: MAX_ANSWER_BYTES,
            });
        }
        let text = text.trim();
        let malformed = |e| AnswerError::Malformed(Box::new(e));
        if text.starts_with('{') {
            return serde_json::from_str(text).map_err(malformed);
        }
        let json = super::token::decode(text).map_err(|at| AnswerError::NotAToken { at })?;
        serde_json::from_slice(&json).map_err(malformed)
    }

    /// The person's decision.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, Decision, PendingApproval, WaitReason};
    ///
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// assert_eq!(Answer::to(&pending, Decision::Approve).decision(), &Decision::Approve);
    /// ```
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The digest of the question it answers ([`PendingApproval::digest`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, Decision, PendingApproval, WaitReason};
    ///
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// assert_eq!(Answer::to(&pending, Decision::Approve).digest(), pending.digest);
    /// ```
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The call id of the question it answers.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, Decision, PendingApproval, WaitReason};
    ///
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// assert_eq!(Answer::to(&pending, Decision::Approve).call_id(), "call-1");
    /// ```
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// When it expires, if it does (to the millisecond).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, Decision, PendingApproval, WaitReason};
    ///
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// assert_eq!(Answer::to(&pending, Decision::Approve).expiry(), None);
    /// ```
    pub fn expiry(&self) -> Option<SystemTime> {
        let ms = self.expires_at_ms?;
        UNIX_EPOCH.checked_add(Duration::from_millis(ms))
    }

    /// Whether it has expired at `now`.
    pub(crate) fn expired(&self, now: SystemTime) -> bool {
        self.expiry().is_some_and(|at| now >= at)
    }
}

/// A key of the user's that signs answers and checks them: HMAC-SHA256, at least 32 bytes
/// (generate it randomly; keep it where the run and the approval side, not the client, read
/// it). Its `Debug` shows nothing of it.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{AnswerError, AnswerKey};
///
/// assert!(AnswerKey::new([1u8; 32]).is_ok());
/// assert!(matches!(AnswerKey::new(b"short"), Err(AnswerError::ShortKey { bytes: 5 })));
/// assert_eq!(format!("{:?}", AnswerKey::new([1u8; 32])?), "AnswerKey(..)");
/// # Ok::<(), AnswerError>(())
/// ```
#[derive(Clone)]
pub struct AnswerKey(Arc<[u8]>);

impl AnswerKey {
    /// A key of `secret`'s bytes; refused when shorter than 32 bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::AnswerKey;
    ///
    /// let key = AnswerKey::new(std::env::var("ANSWER_KEY").unwrap_or_else(|_| "x".repeat(32)))?;
    /// # let _ = key;
    /// # Ok::<(), agent_errors::approval::AnswerError>(())
    /// ```
    pub fn new(secret: impl AsRef<[u8]>) -> Result<AnswerKey, AnswerError> {
        let secret = secret.as_ref();
        if secret.len() < MIN_KEY_BYTES {
            return Err(AnswerError::ShortKey {
                bytes: secret.len(),
            });
        }
        Ok(AnswerKey(Arc::from(secret)))
    }

    /// Whether `answer` carries a signature this key made over its call id, digest, decision
    /// and expiry as they are now (compared in constant time).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, AnswerKey, Decision, PendingApproval, WaitReason};
    ///
    /// let (key, other) = (AnswerKey::new([1u8; 32])?, AnswerKey::new([2u8; 32])?);
    /// let pending = PendingApproval::new("call-1", "wipe", "{}", WaitReason::ApprovalRequired);
    /// let answer = Answer::to(&pending, Decision::Approve);
    /// assert!(!key.verifies(&answer), "unsigned");
    /// assert!(!key.verifies(&answer.clone().signed(&other)), "another key's");
    /// assert!(key.verifies(&answer.signed(&key)));
    /// # Ok::<(), agent_errors::approval::AnswerError>(())
    /// ```
    pub fn verifies(&self, answer: &Answer) -> bool {
        let Some(tag) = answer.signature.as_deref().and_then(from_hex) else {
            return false;
        };
        self.mac(answer).verify_slice(&tag).is_ok()
    }

    /// The MAC over what a signature covers, each part length-prefixed so no two answers
    /// share a text.
    fn mac(&self, answer: &Answer) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        let decision = serde_json::to_string(&answer.decision).unwrap_or_default();
        let expiry = answer
            .expires_at_ms
            .map_or_else(Vec::new, |ms| ms.to_be_bytes().to_vec());
        let parts: [&[u8]; 5] = [
            SIGNING_CONTEXT,
            answer.call_id.as_bytes(),
            answer.digest.as_bytes(),
            decision.as_bytes(),
            &expiry,
        ];
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }
}

impl fmt::Debug for AnswerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnswerKey(..)")
    }
}

/// The bytes of a SHA-256-sized hex text; `None` for anything else.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// Why an answer or a key was refused.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{Answer, AnswerError};
///
/// match Answer::from_token("{not json") {
///     Err(AnswerError::Malformed(_)) => {}
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// The answer's text is longer than [`MAX_ANSWER_BYTES`]: it was not read.
    #[error("the answer is {bytes} bytes long, more than the {max} an answer may have")]
    TooLong {
        /// Its length.
        bytes: usize,
        /// The most an answer may have.
        max: usize,
    },
    /// The token (or the JSON it holds) is not an answer's.
    #[error("the text is not an answer (a token of `Answer::to_token`)")]
    Malformed(#[source] Box<serde_json::Error>),
    /// The text is not a token of [`Answer::to_token`]: it holds a character that is not
    /// base64url at byte `at` (or cannot end where it does, `at` its length).
    #[error("the text is not an answer token (`Answer::to_token`): not base64url at byte {at}")]
    NotAToken {
        /// Where the text stops being a token.
        at: usize,
    },
    /// The key is shorter than 32 bytes.
    #[error("an answer key needs at least 32 bytes; this one has {bytes}")]
    ShortKey {
        /// Its length.
        bytes: usize,
    },
}

/// What a run makes of an answer given for a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Bound to the question, signed when it must be, in time: the decision to use.
    Use(Decision),
    /// Bound and signed, but past its expiry.
    Expired,
    /// Not for this question, or not signed with the run's key: refused, with why.
    Refused(&'static str),
}

/// What `answer` is worth for the question `(call_id, digest)`, for a run with `key`, at `now`.
pub(crate) fn judge(
    answer: &Answer,
    (call_id, digest): (&str, &str),
    key: Option<&AnswerKey>,
    now: SystemTime,
) -> Verdict {
    if answer.call_id != call_id || answer.digest != digest {
        return Verdict::Refused(OTHER_QUESTION);
    }
    if key.is_some_and(|key| !key.verifies(answer)) {
        return Verdict::Refused(NOT_SIGNED);
    }
    if answer.expired(now) {
        return Verdict::Expired;
    }
    Verdict::Use(answer.decision.clone())
}

/// Why an answer for another question is refused.
pub(crate) const OTHER_QUESTION: &str =
    "was for another question (other tool, arguments or reason)";

/// Why an answer an agent with a key cannot verify is refused.
pub(crate) const NOT_SIGNED: &str = "is not signed with the agent's answer key";

/// The answers a run took through [`ApprovalContext::accept`](super::ApprovalContext::accept):
/// each is taken once, so a copy delivered again (for a later question with the same call id,
/// tool and arguments) is refused, in this run or in any other of the process.
#[derive(Debug, Default)]
pub(crate) struct Taken(std::sync::Mutex<Vec<Answer>>);

impl Taken {
    /// Takes `answer` for its one use: false when it was taken already.
    pub(crate) fn first_use(&self, answer: &Answer) -> bool {
        let mut taken = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // An answer bound to no question (by call id alone, for a run that saved its question)
        // is each run's own to judge: only a bound one is held to one use in the process.
        let bound = !answer.digest().is_empty();
        if taken.contains(answer)
            || bound && !super::ledger::first_use_in_process(&answer.to_token())
        {
            return false;
        }
        taken.push(answer.clone());
        true
    }
}

/// Why an answer taken before is refused.
pub(crate) const USED: &str = "was used already (an answer is taken once)";

/// A run's wall clock: read once when the run starts, then moved on by Tokio's clock, so an
/// answer's expiry holds across processes and a paused test clock moves toward it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerClock {
    wall: SystemTime,
    at: tokio::time::Instant,
}

impl AnswerClock {
    pub(crate) fn start() -> Self {
        AnswerClock {
            wall: SystemTime::now(),
            at: tokio::time::Instant::now(),
        }
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.wall + self.at.elapsed()
    }
}

impl Default for AnswerClock {
    fn default() -> Self {
        AnswerClock::start()
    }
}

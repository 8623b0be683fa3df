//! The seam a run on a durable-execution engine goes through: every model request and every
//! tool attempt is a step of the engine's journal, and every wait (a retry's backoff, a
//! `Retry-After`) is the engine's durable sleep. A run without a journal calls and sleeps
//! directly and pays nothing for this.
//!
//! A step's outcome is journaled as a value, failures included: the engine never retries a step
//! itself, the recovery policies decide, and on replay a finished step hands back its journaled
//! outcome so the run takes the same decisions (and spends the same retries) without running it
//! again.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::chat::ChatResponse;
use crate::classify::{Classification, ErrorKind, Evidence, HttpError};
use crate::error::{BoxError, BoxFuture};
use crate::tool::ToolOutput;

/// An engine's journal, as a run sees it.
pub(crate) trait Journal: Send + Sync + 'static {
    /// Runs `work` as the run's next step named `name` and journals its value, or, when the
    /// journal already holds this step (a replay), hands back the journaled value without
    /// running `work`. `None` when the journal could not keep the step: the run then stops.
    fn step<'a>(
        &'a self,
        name: &'a str,
        work: BoxFuture<'a, serde_json::Value>,
    ) -> BoxFuture<'a, Option<serde_json::Value>>;

    /// Waits `delay` on the engine's clock: a durable sleep that holds no process.
    fn sleep(&self, delay: Duration) -> BoxFuture<'static, ()>;
}

/// A run's journal, as its options and context carry it.
#[derive(Clone)]
pub(crate) struct RunJournal(pub(crate) Arc<dyn Journal>);

impl fmt::Debug for RunJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunJournal")
    }
}

impl RunJournal {
    /// Runs `work` as a step whose value is `T`; `None` when the journal could not keep it or
    /// holds a value this build cannot read.
    pub(crate) async fn step<T, F>(&self, name: &str, work: F) -> Option<T>
    where
        T: Serialize + for<'de> Deserialize<'de>,
        F: Future<Output = T> + Send,
    {
        let work =
            Box::pin(
                async move { serde_json::to_value(work.await).unwrap_or(serde_json::Value::Null) },
            );
        let value = self.0.step(name, work).await?;
        match serde_json::from_value(value) {
            Ok(value) => Some(value),
            Err(error) => {
                tracing::error!(step = name, %error, "a journaled step's value cannot be read");
                None
            }
        }
    }

    /// How the run's retry loops wait: the engine's durable sleep.
    pub(crate) fn sleeper(&self) -> crate::retry::Sleep {
        let journal = Arc::clone(&self.0);
        crate::retry::Sleep::with(move |delay| journal.sleep(delay))
    }
}

/// A tool attempt's outcome as the journal keeps it: the output, or the failure's words and
/// everything its classification said (the error itself cannot be journaled).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum JournaledAttempt {
    Output(ToolOutput),
    Failed(JournaledFailure),
    /// The per-run breaker had tripped after this many failures: the tool was not called.
    Tripped(u32),
}

/// A failure as the journal keeps it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct JournaledFailure {
    kind: ErrorKind,
    /// The failure's words, redacted: the journal is stored outside the process.
    message: String,
    retry_after_ms: Option<u64>,
    should_retry: Option<bool>,
    status: Option<u16>,
}

impl JournaledFailure {
    pub(crate) fn new(message: &str, class: &Classification) -> JournaledFailure {
        JournaledFailure {
            kind: class.kind,
            message: crate::redact::redact(message).into_owned(),
            retry_after_ms: class.retry_after.map(millis),
            should_retry: class.should_retry,
            status: class.status,
        }
    }

    /// The failure's words, and the classification they had.
    pub(crate) fn into_parts(self) -> (ErrorKind, String, Classification) {
        let mut class = Classification::new(self.kind, Evidence::Type("Journaled"));
        class.retry_after = self.retry_after_ms.map(Duration::from_millis);
        class.should_retry = self.should_retry;
        class.status = self.status;
        (self.kind, self.message, class)
    }
}

/// A model request's outcome as the journal keeps it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum JournaledModelCall {
    Answered(ChatResponse),
    /// The request failed: an HTTP failure keeps its status and `Retry-After`, so the retry
    /// decisions read it as they read the live error.
    Failed {
        message: String,
        status: Option<u16>,
        retry_after_secs: Option<u64>,
    },
    /// `ChatModel::chat` panicked, with this message.
    Panicked(String),
}

impl JournaledModelCall {
    pub(crate) fn failed(error: &BoxError) -> JournaledModelCall {
        let http = crate::classify::find_in_chain::<HttpError>(error.as_ref());
        let retry_after_secs = crate::classify::server_delay(error.as_ref(), Duration::MAX)
            .map(|delay| delay.as_secs_f64().ceil() as u64);
        JournaledModelCall::Failed {
            message: crate::redact::redact(&error.to_string()).into_owned(),
            status: http.map(HttpError::status),
            retry_after_secs,
        }
    }

    /// The failed request's error as the retry decisions read it.
    pub(crate) fn error(
        message: String,
        status: Option<u16>,
        retry_after: Option<u64>,
    ) -> BoxError {
        match status {
            Some(status) => {
                let error = HttpError::new(status, message);
                match retry_after {
                    Some(secs) => Box::new(error.with_header("retry-after", secs.to_string())),
                    None => Box::new(error),
                }
            }
            None => message.into(),
        }
    }
}

fn millis(delay: Duration) -> u64 {
    u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
}

//! What the HTTP providers share: the recovery loop around one model call (transport retries,
//! the context-overflow shrink, the credential refresh), the API key slot, and the stream
//! limits, the builder settings, the error status and the capped body reader. Each provider
//! brings its wire format and its error type.

mod body;
mod settings;
mod status;

pub(crate) use body::{DEFAULT_MAX_RESPONSE_BYTES, broke_off, excerpt, read_capped};
pub(crate) use settings::{Settings, SettingsError};
pub use status::StatusError;
pub(crate) use status::{MAX_ERROR_BODY_BYTES, lossy_prefix};

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::chat::CallSource;
use crate::classify::server_delay;
use crate::error::BoxError;
use crate::llm::retryability::{RetryRules, Verdict};
use crate::retry::{Retrier, RetrySchedule, Sleep, Step};
use crate::stream::guard::Limits;

/// A credential-refresh hook: returns a fresh API key.
pub(crate) type RefreshHook =
    Arc<dyn Fn() -> BoxFuture<'static, Result<String, BoxError>> + Send + Sync>;

/// How long a stream may take to send its first event, by default.
pub(crate) const DEFAULT_FIRST_EVENT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stream may go silent between events, by default.
pub(crate) const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A provider's failed attempt, as the recovery loop needs to see it.
pub(crate) trait AttemptError: Error + Send + Sync + 'static {
    /// What the model-call rules say about it.
    fn verdict(&self, rules: &RetryRules, source: &CallSource) -> Verdict;
    /// The HTTP status, for logs.
    fn status(&self) -> Option<u16>;
}

/// The recovery configuration one provider model carries.
pub(crate) struct Transport {
    pub(crate) rules: RetryRules,
    pub(crate) schedule: RetrySchedule,
    pub(crate) max_retry_after: Duration,
    pub(crate) refresh: Option<RefreshHook>,
    pub(crate) sleep: Sleep,
    pub(crate) api_key: Mutex<Option<String>>,
    pub(crate) limits: Limits,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("rules", &self.rules)
            .field("schedule", &self.schedule)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What one failed attempt leads to.
enum Next {
    Sleep(Duration),
    ShrinkTo(u32),
    Refresh(RefreshHook),
    GiveUp,
}

pub(crate) fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

pub(crate) fn default_transport_schedule() -> RetrySchedule {
    RetrySchedule::attempts(3)
        .expect("3 attempts is not zero")
        .with_initial(Duration::from_millis(250))
        .with_jitter(0.0)
}

impl Transport {
    /// The current API key.
    pub(crate) fn key(&self) -> Option<String> {
        self.key_slot().clone()
    }

    fn key_slot(&self) -> MutexGuard<'_, Option<String>> {
        // Only whole `Option<String>` values are ever stored, so a poisoned lock holds a valid one.
        self.api_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `attempt` (given the `max_tokens` to send) until it succeeds or recovery gives up;
    /// then the last attempt's error, as it was.
    pub(crate) async fn recover<T, E, F, Fut>(
        &self,
        model: &str,
        source: &CallSource,
        max_tokens: Option<u32>,
        mut attempt: F,
    ) -> Result<T, E>
    where
        E: AttemptError,
        F: FnMut(Option<u32>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut max_tokens = max_tokens;
        let mut retrier = Retrier::new(&self.schedule);
        let (mut shrunk, mut refreshed) = (false, false);
        loop {
            let error = match attempt(max_tokens).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let next = match error.verdict(&self.rules, source) {
                Verdict::Retry => {
                    let server = server_delay(&error, self.max_retry_after);
                    match retrier.after_failure(true, server) {
                        Step::Wait(delay) => Next::Sleep(delay),
                        Step::Stop(_) => Next::GiveUp,
                    }
                }
                Verdict::RetryWithMaxTokens(n) if !shrunk => {
                    shrunk = true;
                    Next::ShrinkTo(n)
                }
                Verdict::RefreshCredentials if !refreshed => {
                    refreshed = true;
                    self.refresh.clone().map_or(Next::GiveUp, Next::Refresh)
                }
                _ => Next::GiveUp,
            };
            match next {
                Next::Sleep(delay) => {
                    tracing::debug!(
                        model, status = error.status(), retry = retrier.failures(),
                        delay_ms = delay.as_millis() as u64, error = %error, "retrying model call"
                    );
                    self.sleep.sleep(delay).await;
                }
                Next::ShrinkTo(n) => {
                    tracing::debug!(
                        model,
                        max_tokens = n,
                        "context overflow: retrying with a smaller max_tokens"
                    );
                    max_tokens = Some(n);
                }
                Next::Refresh(hook) => match hook().await {
                    Ok(key) => {
                        register_key(&key);
                        *self.key_slot() = non_empty(Some(key));
                    }
                    Err(refresh_error) => {
                        let refresh_error =
                            crate::redact::redact(&refresh_error.to_string()).into_owned();
                        tracing::warn!(model, error = %refresh_error, "credential refresh failed");
                        return Err(error);
                    }
                },
                Next::GiveUp => return Err(error),
            }
        }
    }
}

/// Tells the redactor about an API key, so that no error text, event or log can show it, even
/// where no rule would recognise its shape. A key too short to register safely is left to the
/// rules.
pub(crate) fn register_key(key: &str) {
    let _ = crate::redact::register_secret(key.trim());
}

/// The extra headers as a map; `Err` names the first pair that is not a valid header.
pub(crate) fn header_map(pairs: &[(String, String)]) -> Result<reqwest::header::HeaderMap, String> {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in pairs {
        let parsed = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .ok()
            .zip(reqwest::header::HeaderValue::from_str(value).ok());
        let (name, value) = parsed.ok_or_else(|| name.clone())?;
        map.append(name, value);
    }
    Ok(map)
}

/// The base URL with `path` appended to its path, a trailing slash on the base ignored and its
/// query kept as it is (a gateway's `?api-version=...`, which pasting the path after the text
/// would have turned into part of the query); `None` when the base is not an http(s) URL.
pub(crate) fn endpoint(base: &str, path: &str) -> Option<reqwest::Url> {
    let mut url = reqwest::Url::parse(base.trim())
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))?;
    let joined = format!("{}{path}", url.path().trim_end_matches('/'));
    url.set_path(&joined);
    Some(url)
}

#[cfg(test)]
mod tests {
    use super::endpoint;

    #[test]
    fn the_path_goes_after_the_base_path_and_before_its_query() {
        let url = |base: &str| endpoint(base, "/v1/messages").map(String::from);
        assert_eq!(
            url("https://h.example/").as_deref(),
            Some("https://h.example/v1/messages")
        );
        assert_eq!(
            url(" https://h.example/gw/ ").as_deref(),
            Some("https://h.example/gw/v1/messages")
        );
        assert_eq!(
            url("https://h.example/gw?api-version=2024-10-21").as_deref(),
            Some("https://h.example/gw/v1/messages?api-version=2024-10-21")
        );
        assert_eq!(url("ftp://h.example"), None);
        assert_eq!(url("not a url"), None);
    }
}

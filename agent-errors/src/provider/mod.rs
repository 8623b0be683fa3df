//! What the built-in providers (`openai`, `anthropic`) share in public: [`StatusError`], the
//! error status a provider's server answered with.
//
// Inside the crate this module also holds the recovery loop around one model call (transport
// retries, the context-overflow shrink, the credential refresh), the API key slot, the stream
// limits, the builder settings and the capped body reader. Each provider brings its wire format
// and its error type.

mod body;
mod settings;
mod status;

pub(crate) use body::{DEFAULT_MAX_RESPONSE_BYTES, broke_off, excerpt, read_capped};
pub(crate) use settings::{Settings, SettingsError, settings_setters};
pub use status::StatusError;
pub(crate) use status::{MAX_ERROR_BODY_BYTES, lossy_prefix};

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::chat::{CallSource, ChatRequest};
use crate::classify::server_delay;
use crate::error::BoxError;
use crate::escapes::Visible;
use crate::events::{Event, ModelLayer, count_outcome, emit_to};
use crate::llm::retryability::{RetryRules, Verdict};
use crate::retry::{self, Policy, Retrier, RetrySchedule, Sleep, Step, Stop};
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
    /// then the last attempt's error, as it was. Every retry spends the request's run allowance
    /// (when it has one) as well as this transport's schedule.
    pub(crate) async fn recover<T, E, F, Fut>(
        &self,
        model: &str,
        request: &ChatRequest,
        max_tokens: Option<u32>,
        attempt: F,
    ) -> Result<T, E>
    where
        E: AttemptError,
        F: FnMut(Option<u32>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut policy = TransportRetry {
            transport: self,
            model,
            request,
            max_tokens,
            attempt,
            retrier: Retrier::new(&self.schedule),
            shrunk: false,
            refreshed: false,
            failed: 0,
        };
        retry::call(&mut policy).await
    }
}

/// The transport's recovery as a policy of the retry loop: the request it changes is the
/// `max_tokens` sent (shrunk once after a context overflow) and the key (refreshed once after a
/// 401); anything else retryable waits out the schedule.
struct TransportRetry<'t, F, D> {
    transport: &'t Transport,
    model: &'t str,
    request: &'t ChatRequest,
    max_tokens: Option<u32>,
    attempt: F,
    retrier: Retrier<D>,
    shrunk: bool,
    refreshed: bool,
    /// Attempts that failed so far.
    failed: u32,
}

impl<F, Fut, T, E, D> Policy for TransportRetry<'_, F, D>
where
    E: AttemptError,
    F: FnMut(Option<u32>) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    D: Iterator<Item = Duration>,
{
    type Output = T;
    type Error = E;

    fn finished(&mut self, last: &E, recovered: bool) {
        let kind = crate::classify::classify(last).kind;
        count_outcome(ModelLayer::Transport, recovered, kind);
    }

    async fn call(&mut self) -> Result<T, E> {
        (self.attempt)(self.max_tokens).await
    }

    async fn retry(&mut self, error: &E) -> Step {
        let transport = self.transport;
        let model = self.model;
        self.failed += 1;
        let verdict = error.verdict(&transport.rules, &self.request.source);
        let step = match verdict {
            Verdict::Retry => {
                let server = server_delay(error, transport.max_retry_after);
                self.retrier.after_failure(true, server)
            }
            Verdict::RetryWithMaxTokens(_) if !self.shrunk => Step::Again,
            Verdict::RefreshCredentials if !self.refreshed && transport.refresh.is_some() => {
                Step::Again
            }
            _ => Step::Stop(Stop::Never),
        };
        if matches!(step, Step::Stop(_)) {
            return step;
        }
        if !self.request.may_ask_again() {
            tracing::debug!(
                model,
                "the run's retry allowance or its caps refuse another request: not retrying"
            );
            return Step::Stop(Stop::Exhausted);
        }
        self.announce(error, &step);
        match verdict {
            Verdict::RetryWithMaxTokens(n) => {
                tracing::debug!(
                    model,
                    max_tokens = n,
                    "context overflow: retrying with a smaller max_tokens"
                );
                self.shrunk = true;
                self.max_tokens = Some(n);
            }
            Verdict::RefreshCredentials => {
                self.refreshed = true;
                if !self.refresh().await {
                    return Step::Stop(Stop::Never);
                }
            }
            _ => {
                if let Step::Wait(delay) = step {
                    tracing::debug!(
                        model, status = error.status(), retry = self.retrier.failures(),
                        delay_ms = delay.as_millis() as u64, error = %Visible::of(error), "retrying model call"
                    );
                }
            }
        }
        step
    }

    fn sleeper(&self) -> Sleep {
        self.transport.sleep.clone()
    }
}

impl<F, D> TransportRetry<'_, F, D> {
    /// The `llm_retry` event of the attempt that failed with `error` and is made again.
    fn announce(&self, error: &(dyn Error + 'static), step: &Step) {
        let delay = match step {
            Step::Wait(delay) => *delay,
            _ => Duration::ZERO,
        };
        let event = Event::LlmRetry {
            layer: ModelLayer::Transport,
            attempt: self.failed,
            delay,
            kind: crate::classify::classify(error).kind,
        };
        emit_to(event, [self.request.events.log(), None]);
    }

    /// Asks the hook for a fresh key and uses it; false when the hook failed.
    async fn refresh(&self) -> bool {
        let Some(hook) = self.transport.refresh.clone() else {
            return false;
        };
        match hook().await {
            Ok(key) => {
                register_key(&key);
                *self.transport.key_slot() = non_empty(Some(key));
                true
            }
            Err(refresh_error) => {
                let refresh_error = crate::redact::redact(&refresh_error.to_string()).into_owned();
                tracing::warn!(model = self.model, error = %Visible::of(&refresh_error), "credential refresh failed");
                false
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

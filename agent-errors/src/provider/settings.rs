//! What every HTTP provider's builder configures the same way: the request timeout, the
//! recovery rules and schedule, the credential-refresh hook, the stream limits, the HTTP client
//! and the extra headers. Each builder adds its own endpoint, key and wire options.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use super::{
    DEFAULT_FIRST_EVENT_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT, RefreshHook, Transport,
    default_transport_schedule, header_map, non_empty, register_key,
};
use crate::llm::MAX_RETRY_AFTER;
use crate::llm::retryability::RetryRules;
use crate::retry::{RetrySchedule, Sleep};
use crate::stream::guard::Limits;

/// How long a whole streamed answer may take by default, counted from its headers: about what
/// the longest answers take (128k output tokens at 70 tokens a second), while a server that
/// drips an event just inside the idle limit cannot hold the call for ever.
pub(crate) const DEFAULT_STREAM_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// The settings both providers' builders share.
pub(crate) struct Settings {
    pub(crate) timeout: Duration,
    pub(crate) rules: RetryRules,
    pub(crate) schedule: RetrySchedule,
    pub(crate) max_retry_after: Duration,
    pub(crate) refresh: Option<RefreshHook>,
    pub(crate) sleep: Sleep,
    pub(crate) client: Option<reqwest::Client>,
    pub(crate) limits: Limits,
    pub(crate) headers: Vec<(String, String)>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("timeout", &self.timeout)
            .field("rules", &self.rules)
            .field("transport", &self.schedule)
            .field("max_retry_after", &self.max_retry_after)
            .field("credential_refresh", &self.refresh.is_some())
            .field("limits", &self.limits)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// The defaults, with this request timeout.
    pub(crate) fn new(timeout: Duration) -> Self {
        Settings {
            timeout,
            rules: RetryRules::default(),
            schedule: default_transport_schedule(),
            max_retry_after: MAX_RETRY_AFTER,
            refresh: None,
            sleep: Sleep::default(),
            client: None,
            limits: Limits {
                first_event: DEFAULT_FIRST_EVENT_TIMEOUT,
                idle: DEFAULT_STREAM_IDLE_TIMEOUT,
                deadline: Some(DEFAULT_STREAM_DEADLINE),
            },
            headers: Vec::new(),
        }
    }

    /// The client, the extra headers and the transport (holding `api_key`, which is registered
    /// with the redactor), or why they cannot be made.
    pub(crate) fn finish(self, api_key: Option<String>) -> Result<Parts, SettingsError> {
        let api_key = non_empty(api_key);
        if let Some(key) = &api_key {
            register_key(key);
        }
        let headers = header_map(&self.headers).map_err(SettingsError::InvalidHeader)?;
        let client = match self.client {
            Some(client) => client,
            None => reqwest::Client::builder()
                .build()
                .map_err(SettingsError::Client)?,
        };
        Ok(Parts {
            client,
            headers,
            timeout: self.timeout,
            transport: Transport {
                rules: self.rules,
                schedule: self.schedule,
                max_retry_after: self.max_retry_after,
                refresh: self.refresh,
                sleep: self.sleep,
                api_key: Mutex::new(api_key),
                limits: self.limits,
            },
        })
    }
}

/// What a provider model is built from.
pub(crate) struct Parts {
    pub(crate) client: reqwest::Client,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) timeout: Duration,
    pub(crate) transport: Transport,
}

/// Why the shared settings could not be turned into a client.
pub(crate) enum SettingsError {
    /// The name of an extra header that is not a valid header.
    InvalidHeader(String),
    /// The HTTP client could not be built.
    Client(reqwest::Error),
}

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

/// The setters of the shared [`Settings`], written once for every provider's builder (a builder
/// holds them in a `settings` field). The docs that differ per provider are passed in: the
/// capacity errors `foreground` retries, what counts as a stream's first event and as silence,
/// `stream_deadline`'s example, and `header`'s.
macro_rules! settings_setters {
    (
        foreground: { $(#[$foreground:meta])* },
        first_event_timeout: { $(#[$first_event:meta])* },
        stream_idle_timeout: { $(#[$idle:meta])* },
        stream_deadline: { $(#[$deadline:meta])* },
        header: { $(#[$header:meta])* } $(,)?
    ) => {
        /// How long one request may take. A request that times out is not retried.
        #[must_use]
        pub fn timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.settings.timeout = timeout;
            self
        }

        $(#[$foreground])*
        #[must_use]
        pub fn foreground(
            mut self,
            sources: impl IntoIterator<Item = $crate::llm::CallSource>,
        ) -> Self {
            self.settings.rules = self.settings.rules.with_foreground(sources);
            self
        }

        /// The least `max_tokens` a context-overflow retry may ask for (default 3000).
        #[must_use]
        pub fn max_tokens_floor(mut self, floor: u32) -> Self {
            self.settings.rules = self.settings.rules.with_max_tokens_floor(floor);
            self
        }

        /// The transport retry schedule: its attempt count and delays (default 3 attempts,
        /// 250 ms then 500 ms, no jitter). `RetrySchedule::attempts(1)` turns transport retry
        /// off.
        #[must_use]
        pub fn transport_retry(mut self, schedule: $crate::retry::RetrySchedule) -> Self {
            self.settings.schedule = schedule;
            self
        }

        /// The longest server-requested `Retry-After` honoured as is (default 60 s); longer
        /// ones are cut to it.
        #[must_use]
        pub fn max_retry_after(mut self, cap: ::std::time::Duration) -> Self {
            self.settings.max_retry_after = cap;
            self
        }

        /// Called on a 401: returns a fresh API key (or an error), and the request is sent once
        /// more with it; the new key is registered with the redactor and kept for later calls.
        /// When the hook fails, the 401 is returned and the hook's error is logged.
        #[must_use]
        pub fn credential_refresh<F, Fut>(mut self, hook: F) -> Self
        where
            F: Fn() -> Fut + Send + Sync + 'static,
            Fut: ::std::future::Future<Output = Result<String, $crate::BoxError>> + Send + 'static,
        {
            self.settings.refresh = Some(::std::sync::Arc::new(move || Box::pin(hook())));
            self
        }

        /// How retry delays are waited out (default `tokio::time::sleep`, which paused test
        /// time drives). For tests against a real socket, where time cannot be paused (tokio
        /// would fire the request timeout whenever the runtime waits on I/O), a closure can
        /// record the delays and return at once.
        #[must_use]
        pub fn sleeper<F, Fut>(mut self, sleep: F) -> Self
        where
            F: Fn(::std::time::Duration) -> Fut + Send + Sync + 'static,
            Fut: ::std::future::Future<Output = ()> + Send + 'static,
        {
            self.settings.sleep = $crate::retry::Sleep::with(sleep);
            self
        }

        /// A reqwest client to use instead of a fresh one (proxies, custom roots). The timeout
        /// is still applied to every request.
        #[must_use]
        pub fn http_client(mut self, client: reqwest::Client) -> Self {
            self.settings.client = Some(client);
            self
        }

        $(#[$first_event])*
        #[must_use]
        pub fn first_event_timeout(mut self, limit: ::std::time::Duration) -> Self {
            self.settings.limits.first_event = limit;
            self
        }

        $(#[$idle])*
        #[must_use]
        pub fn stream_idle_timeout(mut self, idle: ::std::time::Duration) -> Self {
            self.settings.limits.idle = idle;
            self
        }

        $(#[$deadline])*
        #[must_use]
        pub fn stream_deadline(
            mut self,
            deadline: impl Into<Option<::std::time::Duration>>,
        ) -> Self {
            self.settings.limits.deadline = deadline.into();
            self
        }

        $(#[$header])*
        #[must_use]
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.settings.headers.push((name.into(), value.into()));
            self
        }
    };
}
pub(crate) use settings_setters;

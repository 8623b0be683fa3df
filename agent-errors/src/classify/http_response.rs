//! An [`HttpError`] from a `reqwest` response in one call, keeping what classification reads.

use super::HttpError;

/// The most of a response body an [`HttpError`] keeps: enough for a provider's error message,
/// not enough for a page of HTML to fill a model's context.
pub const MAX_ERROR_BODY_BYTES: usize = 4096;

/// The headers that say when (and whether) to retry.
const KEPT_HEADERS: [&str; 3] = ["retry-after", "retry-after-ms", "x-should-retry"];

impl HttpError {
    /// The error a failed response describes: its status, its body (at most
    /// [`MAX_ERROR_BODY_BYTES`], lossily decoded; the status's reason when empty) and its
    /// `retry-after`, `retry-after-ms` and `x-should-retry` headers, so a 429 with
    /// `Retry-After: 7` is retried after 7 s.
    ///
    /// ```no_run
    /// use agent_errors::HttpError;
    ///
    /// async fn fetch(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    ///     let response = client
    ///         .get(url)
    ///         .send()
    ///         .await
    ///         .map_err(|e| HttpError::new(0, e.to_string()))?;
    ///     if !response.status().is_success() {
    ///         return Err(HttpError::from_response(response).await);
    ///     }
    ///     response.text().await.map_err(|e| HttpError::new(0, e.to_string()))
    /// }
    /// ```
    pub async fn from_response(mut response: reqwest::Response) -> HttpError {
        let status = response.status();
        let headers: Vec<(String, String)> = KEPT_HEADERS
            .iter()
            .filter_map(|name| {
                let value = response.headers().get(*name)?.to_str().ok()?;
                Some(((*name).to_owned(), value.to_owned()))
            })
            .collect();
        let mut body = Vec::new();
        // A body that fails half-way still says something: keep what arrived.
        while body.len() < MAX_ERROR_BODY_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        body.truncate(MAX_ERROR_BODY_BYTES);
        let text = String::from_utf8_lossy(&body);
        let message = match text.trim() {
            "" => status
                .canonical_reason()
                .unwrap_or("no reason given")
                .to_owned(),
            trimmed => trimmed.to_owned(),
        };
        headers.into_iter().fold(
            HttpError::new(status.as_u16(), message),
            |error, (name, value)| error.with_header(name, value),
        )
    }
}

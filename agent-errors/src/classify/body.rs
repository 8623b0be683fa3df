//! Facts read from an error's body: a context overflow and its numbers, an exhausted quota, an
//! overloaded service. They add to the status table; they never replace it.

use std::error::Error;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use super::{HttpError, chain, find_in_chain};

/// The numbers a context-overflow error reports.
///
/// # Examples
///
/// ```
/// use agent_errors::classify::ContextOverflow;
///
/// let message = "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000";
/// if let Some(overflow) = ContextOverflow::parse(message) {
///     // Ask again for what fits, or trim the conversation when too little is left.
///     assert_eq!(overflow.available(), 11941);
///     assert_eq!(overflow.max_tokens_for_retry(1024), Some(11941));
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOverflow {
    /// The model's context window, in tokens.
    pub max_context: u32,
    /// Tokens the request's input took (messages and tool definitions).
    pub input_tokens: u32,
    /// The completion budget the request asked for, when the error says.
    pub requested_completion: Option<u32>,
}

macro_rules! pattern {
    ($re:literal) => {{
        static RE: LazyLock<Regex> =
            LazyLock::new(|| Regex::new($re).expect("the pattern is a valid literal regex"));
        &*RE
    }};
}

fn number(caps: &regex::Captures<'_>, group: usize) -> Option<u32> {
    caps.get(group)?.as_str().parse().ok()
}

impl ContextOverflow {
    /// Reads the token counts from a context-overflow error body or message, in the wordings of
    /// OpenAI, vLLM, llama.cpp and Anthropic. `None` when the text is not a context
    /// overflow or does not give both the window and the input size.
    ///
    /// ```
    /// use agent_errors::classify::ContextOverflow;
    ///
    /// let body = "This model's maximum context length is 8192 tokens. However, you requested \
    ///             9000 tokens (5000 in the messages, 4000 in the completion).";
    /// let overflow = ContextOverflow::parse(body).unwrap();
    /// assert_eq!((overflow.max_context, overflow.input_tokens), (8192, 5000));
    /// assert_eq!(overflow.max_tokens_for_retry(3000), Some(3192));
    /// ```
    pub fn parse(text: &str) -> Option<ContextOverflow> {
        // "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000"
        if let Some(c) =
            pattern!(r"(?i)exceed context limit: (\d+) \+ (\d+) > (\d+)").captures(text)
        {
            return Some(ContextOverflow {
                max_context: number(&c, 3)?,
                input_tokens: number(&c, 1)?,
                requested_completion: number(&c, 2),
            });
        }
        // Anthropic, when the input alone is over the window: "prompt is too long: 208656 tokens >
        // 200000 maximum". No room is left, so no smaller reply budget can help.
        if let Some(c) =
            pattern!(r"(?i)prompt is too long: (\d+) tokens? > (\d+) maximum").captures(text)
        {
            return Some(ContextOverflow {
                max_context: number(&c, 2)?,
                input_tokens: number(&c, 1)?,
                requested_completion: None,
            });
        }
        let max_context = [
            pattern!(r"(?i)maximum context length is (\d+)"),
            pattern!(r"(?i)available context size \((\d+) tokens?\)"),
            pattern!(r#""n_ctx"\s*:\s*(\d+)"#),
        ]
        .iter()
        .find_map(|re| re.captures(text).and_then(|c| number(&c, 1)))?;

        // "(5000 in the messages, 100 in the functions, and 3900 in the completion)"
        if let Some(c) = pattern!(
            r"(?i)\((\d+) in the messages,(?: (\d+) in the functions,)?(?: and)? (\d+) in the completion\)"
        )
        .captures(text)
        {
            let functions = number(&c, 2).unwrap_or(0);
            return Some(ContextOverflow {
                max_context,
                input_tokens: number(&c, 1)?.saturating_add(functions),
                requested_completion: number(&c, 3),
            });
        }
        let input_tokens = [
            pattern!(r"(?i)your request has (\d+) input tokens"),
            pattern!(r"(?i)your messages resulted in (\d+) tokens"),
            pattern!(r"(?i)request \((\d+) tokens?\) exceeds"),
            pattern!(r#""n_prompt_tokens"\s*:\s*(\d+)"#),
        ]
        .iter()
        .find_map(|re| re.captures(text).and_then(|c| number(&c, 1)))?;
        // vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 4000."
        let requested_completion = pattern!(r"(?i)is too large: (\d+)")
            .captures(text)
            .and_then(|c| number(&c, 1));
        Some(ContextOverflow {
            max_context,
            input_tokens,
            requested_completion,
        })
    }

    /// Tokens left for the answer: the window minus the input.
    pub fn available(&self) -> u32 {
        self.max_context.saturating_sub(self.input_tokens)
    }

    /// The `max_tokens` to retry with: all the room left, when that is at least `floor` and
    /// smaller than what was asked for (asking again for as much cannot succeed).
    pub fn max_tokens_for_retry(&self, floor: u32) -> Option<u32> {
        let available = self.available();
        let shrinks = self
            .requested_completion
            .is_none_or(|asked| available < asked);
        (available >= floor && shrinks && available > 0).then_some(available)
    }
}

/// The status a provider's error type stands for, when an error arrives without one (an error
/// event inside a stream that began with 200): Anthropic's `overloaded_error` is a 529,
/// `rate_limit_error` a 429, and so on. Unknown types are a 500, a server error.
#[cfg(feature = "_provider")]
pub(crate) fn status_of_error_type(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// Whether a status and body report an overloaded service: 529, or a 429/5xx that says
/// "overloaded".
pub(crate) fn is_overloaded(status: u16, body: &str) -> bool {
    status == 529
        || ((status == 429 || (500..600).contains(&status))
            && body.to_ascii_lowercase().contains("overloaded"))
}

/// Whether a failed call was an overload: an [`HttpError`] in the chain with status 529, or a 429
/// or 5xx whose message says "overloaded"; with the `rig` feature, a rig `ProviderError` whose
/// status or machine code says so (`overloaded_error`); when the chain has neither, any level
/// whose text says "overloaded".
///
/// # Examples
///
/// ```
/// use agent_errors::HttpError;
/// use agent_errors::classify::is_overload_error;
///
/// assert!(is_overload_error(&HttpError::new(529, "busy")));
/// assert!(!is_overload_error(&HttpError::new(400, "overloaded parameter")));
/// ```
pub fn is_overload_error(error: &(dyn Error + 'static)) -> bool {
    if let Some(http) = find_in_chain::<HttpError>(error) {
        return is_overloaded(http.status(), http.message());
    }
    #[cfg(feature = "rig")]
    if let Some(rig) = find_in_chain::<rig_core::error::ProviderError>(error) {
        return super::rig::http_view(rig)
            .is_some_and(|http| is_overloaded(http.status(), http.message()));
    }
    chain(error).any(|level| {
        level
            .to_string()
            .to_ascii_lowercase()
            .contains("overloaded")
    })
}

/// How long the server asked us to wait, read from the first [`HttpError`] in the chain
/// (`retry-after-ms`, else `retry-after`), cut to `cap`.
pub(crate) fn server_delay(error: &(dyn Error + 'static), cap: Duration) -> Option<Duration> {
    if let Some(http) = find_in_chain::<HttpError>(error) {
        return http.classification(cap).retry_after;
    }
    #[cfg(feature = "rig")]
    if let Some(rig) = find_in_chain::<rig_core::error::ProviderError>(error) {
        return super::rig::http_view(rig)?.classification(cap).retry_after;
    }
    None
}

/// Whether the server (`x-should-retry: false`) or the status table (402, 501) rules out calling
/// again unchanged.
#[cfg(feature = "_provider")]
pub(crate) fn server_refuses(http: &HttpError) -> bool {
    http.classification(Duration::ZERO).should_retry == Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_overflow_with_functions_counts_them_as_input() {
        let text = "This model's maximum context length is 16385 tokens. However, you requested \
                    17000 tokens (12000 in the messages, 1000 in the functions, and 4000 in the \
                    completion). Please reduce the length of the messages, functions, or completion.";
        let o = ContextOverflow::parse(text).unwrap();
        assert_eq!(o.max_context, 16385);
        assert_eq!(o.input_tokens, 13000);
        assert_eq!(o.requested_completion, Some(4000));
        assert_eq!(o.max_tokens_for_retry(3000), Some(3385));
    }

    #[test]
    fn vllm_overflow_reads_input_and_asked_completion() {
        let text = "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's \
                    maximum context length is 16384 tokens and your request has 2778 input tokens \
                    (8000 > 16384 - 2778).";
        let o = ContextOverflow::parse(text).unwrap();
        assert_eq!(
            o,
            ContextOverflow {
                max_context: 16384,
                input_tokens: 2778,
                requested_completion: Some(8000)
            }
        );
        assert_eq!(
            o.max_tokens_for_retry(3000),
            None,
            "13606 is not smaller than 8000"
        );
    }

    #[test]
    fn llama_cpp_overflow_reads_message_or_fields() {
        let body = r#"{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context size (4096 tokens)","type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}"#;
        let o = ContextOverflow::parse(body).unwrap();
        assert_eq!((o.max_context, o.input_tokens), (4096, 4476));
        assert_eq!(o.available(), 0);
        assert_eq!(
            o.max_tokens_for_retry(0),
            None,
            "no room at all is never retried"
        );

        let fields = r#"{"error":{"type":"exceed_context_size_error","n_ctx":32768,"n_prompt_tokens":20000}}"#;
        let o = ContextOverflow::parse(fields).unwrap();
        assert_eq!(o.max_tokens_for_retry(3000), Some(12768));
    }

    #[test]
    fn anthropic_style_overflow_and_input_only_wording() {
        let o = ContextOverflow::parse(
            "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000, decrease input length",
        )
        .unwrap();
        assert_eq!(o.max_tokens_for_retry(3000), Some(11941));

        let o = ContextOverflow::parse(
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
        )
        .unwrap();
        assert_eq!(o.available(), 0);
    }

    #[test]
    fn anthropic_prompt_too_long_leaves_no_room() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208656 tokens > 200000 maximum"}}"#;
        let o = ContextOverflow::parse(body).unwrap();
        assert_eq!((o.max_context, o.input_tokens), (200000, 208656));
        assert_eq!(o.max_tokens_for_retry(0), None);
    }

    #[test]
    fn text_without_both_numbers_is_not_an_overflow() {
        assert_eq!(ContextOverflow::parse("context_length_exceeded"), None);
        assert_eq!(
            ContextOverflow::parse("maximum context length is 8192 tokens"),
            None
        );
        assert_eq!(
            ContextOverflow::parse("invalid value for 'temperature'"),
            None
        );
        assert_eq!(
            ContextOverflow::parse(
                "maximum context length is 99999999999999 tokens (1 in the messages, 2 in the completion)"
            ),
            None,
            "numbers that do not fit are not guessed at"
        );
    }

    #[test]
    fn floor_refuses_short_answers() {
        let o = ContextOverflow {
            max_context: 8192,
            input_tokens: 6000,
            requested_completion: Some(4000),
        };
        assert_eq!(o.max_tokens_for_retry(3000), None);
        assert_eq!(o.max_tokens_for_retry(2000), Some(2192));
    }

    #[test]
    fn overload_is_found_down_the_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("model call failed")]
        struct Wrapper(#[source] HttpError);

        assert!(is_overload_error(&Wrapper(HttpError::new(529, "busy"))));
        assert!(!is_overload_error(&Wrapper(HttpError::new(
            400,
            "overloaded parameter"
        ))));
        let plain: crate::BoxError = "the model is overloaded, try later".into();
        assert!(is_overload_error(&*plain));
    }

    #[test]
    fn retry_after_prefers_milliseconds_and_is_capped() {
        let cap = Duration::from_secs(60);
        let e = HttpError::new(429, "slow down").with_header("Retry-After", "2");
        assert_eq!(server_delay(&e, cap), Some(Duration::from_secs(2)));
        let e = e.with_header("retry-after-ms", "1500");
        assert_eq!(server_delay(&e, cap), Some(Duration::from_millis(1500)));
        let e = HttpError::new(429, "x").with_header("retry-after", "86400");
        assert_eq!(server_delay(&e, cap), Some(cap));
        assert_eq!(
            server_delay(&e, Duration::MAX),
            Some(Duration::from_secs(86400))
        );
        let e = HttpError::new(429, "x").with_header("retry-after", "soon");
        assert_eq!(server_delay(&e, cap), None);
    }
}

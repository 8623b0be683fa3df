//! What a request and its answer are likely to have cost in tokens, for a provider that did not
//! say: the usual rule of thumb of one token per 4 characters of text, rounded up.

use super::{ChatRequest, ChatResponse, Message};
use crate::usage::Usage;

/// Characters per token in the estimate.
const CHARS_PER_TOKEN: usize = 4;

impl ChatRequest {
    /// An estimate of the usage of this request and `response`: the text sent (messages, tool
    /// calls and results, the tools on offer) and the text answered, at 4 characters a token.
    pub(crate) fn estimated_usage(&self, response: Option<&ChatResponse>) -> Usage {
        let sent: usize = self.messages.iter().map(message_chars).sum::<usize>()
            + (self.tools.iter())
                .map(|tool| {
                    tool.name.len() + tool.description.len() + tool.parameters.to_string().len()
                })
                .sum::<usize>();
        let answered = response.map_or(0, |response| {
            response.text.as_ref().map_or(0, String::len)
                + (response.tool_calls.iter())
                    .map(|call| call.name.len() + call.arguments.len())
                    .sum::<usize>()
        });
        Usage::new(tokens(sent), tokens(answered))
    }
}

fn message_chars(message: &Message) -> usize {
    match message {
        Message::System { content } | Message::User { content } => content.len(),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            content.as_ref().map_or(0, String::len)
                + (tool_calls.iter())
                    .map(|call| call.name.len() + call.arguments.len())
                    .sum::<usize>()
        }
        Message::Tool(result) => result.name.len() + result.content.len(),
    }
}

fn tokens(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(CHARS_PER_TOKEN)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use crate::chat::{ChatRequest, ChatResponse, Message};
    use crate::usage::Usage;

    #[test]
    fn four_characters_a_token_rounded_up() {
        let request = ChatRequest::new(vec![Message::user("12345678")], Vec::new());
        let answer = ChatResponse::text("12345");
        assert_eq!(request.estimated_usage(Some(&answer)), Usage::new(2, 2));
        assert_eq!(request.estimated_usage(None), Usage::new(2, 0));
    }
}

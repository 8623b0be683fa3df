//! Which of a server's tools an agent is given: allow and deny lists of names or name prefixes,
//! and predicates over the tool the server listed.

use std::fmt;
use std::sync::Arc;

use rmcp::model::Tool;

/// A tool name, or every name that starts with a prefix (written `prefix*`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    Prefix(String),
}

impl Pattern {
    fn parse(pattern: String) -> Self {
        match pattern.strip_suffix('*') {
            Some(prefix) => Pattern::Prefix(prefix.to_owned()),
            None => Pattern::Exact(pattern),
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Exact(exact) => name == exact,
            Pattern::Prefix(prefix) => name.starts_with(prefix.as_str()),
        }
    }
}

type Predicate = Arc<dyn Fn(&Tool) -> bool + Send + Sync>;

/// The rules a tool must pass to be offered: every allow list it is on (when there is one),
/// no deny list, every predicate.
#[derive(Clone, Default)]
pub(crate) struct ToolFilter {
    allow: Vec<Vec<Pattern>>,
    deny: Vec<Pattern>,
    predicates: Vec<Predicate>,
}

impl fmt::Debug for ToolFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolFilter")
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .field("predicates", &self.predicates.len())
            .finish()
    }
}

fn patterns(names: impl IntoIterator<Item = impl Into<String>>) -> Vec<Pattern> {
    names
        .into_iter()
        .map(|name| Pattern::parse(name.into()))
        .collect()
}

impl ToolFilter {
    pub(crate) fn allow(&mut self, names: impl IntoIterator<Item = impl Into<String>>) {
        self.allow.push(patterns(names));
    }

    pub(crate) fn deny(&mut self, names: impl IntoIterator<Item = impl Into<String>>) {
        self.deny.extend(patterns(names));
    }

    pub(crate) fn predicate(&mut self, keep: impl Fn(&Tool) -> bool + Send + Sync + 'static) {
        self.predicates.push(Arc::new(keep));
    }

    /// Whether `tool` is offered.
    pub(crate) fn keeps(&self, tool: &Tool) -> bool {
        let name = tool.name.as_ref();
        self.allow
            .iter()
            .all(|list| list.iter().any(|p| p.matches(name)))
            && !self.deny.iter().any(|p| p.matches(name))
            && self.predicates.iter().all(|keep| keep(tool))
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{JsonObject, ToolAnnotations};

    use super::*;

    fn tool(name: &'static str) -> Tool {
        Tool::new(name, "A tool.", JsonObject::new())
    }

    #[test]
    fn names_and_prefixes_allow_and_deny() {
        let mut filter = ToolFilter::default();
        assert!(filter.keeps(&tool("get-env")));
        filter.allow(["echo", "get-*"]);
        filter.deny(["get-env"]);
        assert!(filter.keeps(&tool("echo")));
        assert!(filter.keeps(&tool("get-sum")));
        assert!(!filter.keeps(&tool("get-env")));
        assert!(!filter.keeps(&tool("echo2")));
        // A second allow list narrows the first.
        filter.allow(["echo"]);
        assert!(!filter.keeps(&tool("get-sum")));
    }

    #[test]
    fn a_predicate_sees_what_the_server_said_about_the_tool() {
        let mut filter = ToolFilter::default();
        filter.predicate(|t| {
            t.annotations
                .as_ref()
                .is_none_or(|a| a.destructive_hint != Some(true))
        });
        let destructive = tool("drop").annotate(ToolAnnotations::new().destructive(true));
        assert!(!filter.keeps(&destructive));
        assert!(filter.keeps(&tool("read")));
    }
}

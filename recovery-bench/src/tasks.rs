//! The task suite: agent work of 1 to 6 tool calls, each with the answer it must reach.

use serde_json::{Value, json};

/// One tool call a task needs.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// The tool the model calls.
    pub(crate) tool: &'static str,
    /// The arguments, as a careful model writes them.
    pub(crate) args: Value,
    /// Text in the arguments that tells this step apart from the task's others.
    pub(crate) marker: String,
    /// A tool the model (or a policy) may call instead when `tool` keeps failing.
    pub(crate) alternative: Option<&'static str>,
}

impl Step {
    fn new(tool: &'static str, args: Value, marker: impl Into<String>) -> Self {
        Step {
            tool,
            args,
            marker: marker.into(),
            alternative: None,
        }
    }

    fn or_else(mut self, alternative: &'static str) -> Self {
        self.alternative = Some(alternative);
        self
    }

    /// Whether a call of `tool` with `raw_args` is this step (broken arguments included).
    pub(crate) fn is_called_by(&self, tool: &str, raw_args: &str) -> bool {
        (tool == self.tool || Some(tool) == self.alternative) && raw_args.contains(&self.marker)
    }

    /// What the tool answers when nothing goes wrong.
    pub(crate) fn output(&self) -> String {
        output_of(self.tool, &self.args)
    }
}

/// A task: the user's request, the calls it takes and the service that never answers.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) name: &'static str,
    pub(crate) prompt: &'static str,
    pub(crate) steps: Vec<Step>,
    /// A tool whose service is down for this task whatever the fault mix: its only path is the
    /// step's alternative.
    pub(crate) always_down: Option<&'static str>,
}

impl Task {
    /// The answer a run must end with to count as a success.
    pub(crate) fn expected_answer(&self) -> String {
        let outputs: Vec<String> = self.steps.iter().map(Step::output).collect();
        compose_answer(&outputs)
    }
}

/// The final answer built from each step's value, in step order.
pub(crate) fn compose_answer(values: &[String]) -> String {
    format!("ANSWER: {}", values.join(" | "))
}

/// The tools whose calls change the outside world: a second call is a second effect.
pub(crate) const WRITES: [&str; 2] = ["create_ticket", "send_email"];

/// What a tool answers for these arguments (the arguments are the careful model's).
pub(crate) fn output_of(tool: &str, args: &Value) -> String {
    let text = |key: &str| args[key].as_str().unwrap_or_default().to_owned();
    let number = |key: &str| args[key].as_i64().unwrap_or_default();
    match tool {
        "fetch_page" => format!("page {} says the launch moved to May", text("url")),
        "search" | "cached_search" => format!("top hit for {}", text("query")),
        "lookup_customer" => format!("customer {} is Ada Lovelace", number("id")),
        "get_order" => format!("order {} shipped", number("order_id")),
        "add" => (number("x") + number("y")).to_string(),
        "create_ticket" => format!("ticket opened for customer {}", number("customer_id")),
        "send_email" => format!("email sent to {}", text("to")),
        _ => String::new(),
    }
}

/// The suite, in a fixed order.
pub(crate) fn suite() -> Vec<Task> {
    vec![
        Task {
            name: "summarise a page",
            prompt: "Summarise https://news.example/launch.",
            steps: vec![fetch("https://news.example/launch")],
            always_down: None,
        },
        Task {
            name: "compare two pages",
            prompt: "Compare the two launch posts.",
            steps: vec![
                fetch("https://news.example/post-a"),
                fetch("https://news.example/post-b"),
            ],
            always_down: None,
        },
        Task {
            name: "look up, then open a ticket",
            prompt: "Customer 4101 says order 7702 is late: check and open a ticket.",
            steps: vec![customer(4101), order(7702), ticket(4101, "late order 7702")],
            always_down: None,
        },
        Task {
            name: "calculator with argument mistakes",
            prompt: "What is (1201 + 34) + (2302 + 5) + (3403 + 17)?",
            steps: vec![add(1201, 34), add(2302, 5), add(3403, 17)],
            always_down: None,
        },
        Task {
            name: "search through the fallback only",
            prompt: "Find the release notes of version 9.",
            steps: vec![search("release notes v9")],
            always_down: Some("search"),
        },
        Task {
            name: "research and email",
            prompt: "Research the outage and email the findings to ops.",
            steps: vec![
                search("outage report march"),
                fetch("https://status.example/incident-1"),
                fetch("https://status.example/incident-2"),
                email("ops@example.com", "outage findings"),
            ],
            always_down: None,
        },
        Task {
            name: "refund review, six calls",
            prompt: "Review customer 5202's two orders, total them, open a ticket, tell them.",
            steps: vec![
                customer(5202),
                order(8803),
                order(8804),
                add(4504, 61),
                ticket(5202, "refund review 8803 8804"),
                email("ada@example.com", "refund review opened"),
            ],
            always_down: None,
        },
        Task {
            name: "order status by email",
            prompt: "Tell grace@example.com where order 9905 is.",
            steps: vec![order(9905), email("grace@example.com", "order 9905 status")],
            always_down: None,
        },
        Task {
            name: "search, then read",
            prompt: "Find the pricing page and read it.",
            steps: vec![
                search("pricing page 2026"),
                fetch("https://shop.example/pricing"),
            ],
            always_down: None,
        },
    ]
}

fn fetch(url: &str) -> Step {
    Step::new("fetch_page", json!({ "url": url }), url)
}

fn search(query: &str) -> Step {
    Step::new("search", json!({ "query": query }), query).or_else("cached_search")
}

fn customer(id: u64) -> Step {
    Step::new("lookup_customer", json!({ "id": id }), id.to_string())
}

fn order(id: u64) -> Step {
    Step::new("get_order", json!({ "order_id": id }), id.to_string())
}

fn add(x: i64, y: i64) -> Step {
    Step::new("add", json!({ "x": x, "y": y }), x.to_string())
}

fn ticket(customer_id: u64, summary: &str) -> Step {
    Step::new(
        "create_ticket",
        json!({ "customer_id": customer_id, "summary": summary }),
        summary,
    )
}

fn email(to: &str, body: &str) -> Step {
    Step::new("send_email", json!({ "to": to, "body": body }), to)
}

/// The arguments a careless model sends for a step: a number written as a string where the
/// tool wants a number, else JSON with a trailing comma.
pub(crate) fn broken_args(args: &Value) -> String {
    let Some(object) = args.as_object() else {
        return format!("{args},");
    };
    if let Some((key, value)) = object.iter().find(|(_, v)| v.is_i64()) {
        let mut broken = object.clone();
        broken.insert(key.clone(), Value::String(value.to_string()));
        return Value::Object(broken).to_string();
    }
    let text = args.to_string();
    format!("{},}}", &text[..text.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_has_eight_tasks_or_more_of_one_to_six_calls_with_distinct_markers() {
        let suite = suite();
        assert!(suite.len() >= 8);
        for task in &suite {
            assert!((1..=6).contains(&task.steps.len()), "{}", task.name);
            for (i, step) in task.steps.iter().enumerate() {
                let raw = step.args.to_string();
                let matching: Vec<usize> = (0..task.steps.len())
                    .filter(|&j| task.steps[j].is_called_by(step.tool, &raw))
                    .collect();
                assert_eq!(matching, [i], "{}: step {i} is ambiguous", task.name);
                let broken = broken_args(&step.args);
                assert!(step.is_called_by(step.tool, &broken));
                assert!(serde_json::from_str::<Value>(&broken).ok() != Some(step.args.clone()));
            }
        }
    }
}

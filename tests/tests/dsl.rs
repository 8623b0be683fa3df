//! The declaration macros as a user meets them: `#[tool]`, `#[fixer]`, `policy!`, `defaults!`,
//! `tools!` and `fixers!`.

use std::borrow::Cow;
use std::num::NonZeroU32;
use std::time::Duration;

use agent_errors::prelude::*;
use agent_errors::{
    BoxError, ErrorKind, ToolError,
    build::FixerDef,
    policy::{Action, FixAction, Ladder, Policy, PolicyKey, RetryAction},
};
use serde_json::{Value, json};

agent_errors::defaults!(on_error(
    invalid_args = fix(agent = "json_fixer"),
    execution = [retry(3), escalate],
));

/// The `ToolDef` that `tools![...]` builds for the one tool named.
macro_rules! tool_def {
    ($($path:tt)+) => {
        tools![$($path)+].remove(0)
    };
}

fn retry(n: u32) -> Action {
    Action::retry(n).expect("tests use non-zero counts")
}

fn fix(agent: &'static str, retries: u32) -> Action {
    Action::fix(agent, retries).expect("tests use non-zero counts")
}

async fn call(tool: &ToolDef, raw: &str) -> Result<String, BoxError> {
    let running = agent_errors::testing::handler_of(tool)
        .call(raw)
        .map_err(BoxError::from)?;
    running.await
}

/// Searches the catalogue.
///
///   Returns at most `limit` titles.
#[tool]
async fn search(query: String, limit: Option<u32>) -> Result<Vec<String>, CatalogueError> {
    if query.is_empty() {
        return Err(CatalogueError::EmptyQuery);
    }
    let limit = limit.unwrap_or(2) as usize;
    Ok(["dune", "dune messiah", "children of dune"]
        .iter()
        .filter(|title| title.contains(query.as_str()))
        .take(limit)
        .map(|title| title.to_string())
        .collect())
}

#[derive(Debug, thiserror::Error, PartialEq)]
enum CatalogueError {
    #[error("the query is empty")]
    EmptyQuery,
}

/// This doc comment loses to the attribute.
#[tool(name = "add_numbers", description = "Adds two integers.")]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

#[doc = concat!("Says hello", " to someone.")]
#[tool]
fn greet(r#for: String) -> String {
    format!("hello, {}", r#for)
}

/// Does nothing, successfully.
#[tool(optional)]
async fn noop() {}

/// Reads a file that never exists.
#[tool]
async fn read(path: String) -> std::io::Result<String> {
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("{path}: no such file"),
    ))
}

#[tokio::test]
async fn the_name_comes_from_the_fn_or_the_attribute() {
    assert_eq!(tool_def!(search).name(), "search");
    assert_eq!(tool_def!(add).name(), "add_numbers");
    assert_eq!(tool_def!(greet).name(), "greet");
}

#[tokio::test]
async fn the_description_comes_from_the_doc_comment_or_the_attribute() {
    assert_eq!(
        tool_def!(search).description(),
        "Searches the catalogue.\n\nReturns at most `limit` titles."
    );
    assert_eq!(tool_def!(add).description(), "Adds two integers.");
    assert_eq!(tool_def!(greet).description(), "Says hello to someone.");
}

#[tokio::test]
async fn the_schema_lists_the_parameters_with_their_types() {
    let tool = tool_def!(search);
    let schema = tool.parameters();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["title"], "search");
    assert_eq!(schema["properties"]["query"]["type"], "string");
    assert_eq!(
        schema["properties"]["limit"]["type"],
        json!(["integer", "null"])
    );
    assert_eq!(schema["required"], json!(["query"]));
    assert_eq!(schema["additionalProperties"], false);

    let noop = tool_def!(noop);
    assert_eq!(noop.parameters()["type"], "object");
    assert_eq!(noop.parameters()["additionalProperties"], false);

    let add = tool_def!(add);
    assert_eq!(add.parameters()["required"], json!(["a", "b"]));
    assert_eq!(add.parameters()["properties"]["a"]["type"], "integer");
}

#[tokio::test]
async fn a_raw_identifier_parameter_is_named_without_its_prefix() {
    let tool = tool_def!(greet);
    assert_eq!(tool.parameters()["required"], json!(["for"]));
    assert_eq!(
        call(&tool, r#"{"for": "ada"}"#).await.unwrap(),
        "hello, ada"
    );
}

#[tokio::test]
async fn the_functions_stay_callable_as_written() {
    assert_eq!(
        search("messiah".into(), None).await,
        Ok(vec!["dune messiah".to_string()])
    );
    assert_eq!(
        search(String::new(), None).await,
        Err(CatalogueError::EmptyQuery)
    );
    assert_eq!(add(2, 3), 5);
    noop().await;
}

#[tokio::test]
async fn the_handler_parses_arguments_and_serializes_the_result() {
    let tool = tool_def!(search);
    let out = call(&tool, r#"{"query": "dune", "limit": 3}"#)
        .await
        .unwrap();
    let titles: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(titles, json!(["dune", "dune messiah", "children of dune"]));
    let out = call(&tool, r#"{"query": "dune"}"#).await.unwrap();
    assert_eq!(out, r#"["dune","dune messiah"]"#);
}

#[tokio::test]
async fn a_plain_return_type_is_an_infallible_result() {
    let tool = tool_def!(add);
    assert_eq!(call(&tool, r#"{"a": 40, "b": 2}"#).await.unwrap(), "42");
    let noop = tool_def!(noop);
    assert_eq!(call(&noop, "{}").await.unwrap(), "null");
}

#[tokio::test]
async fn the_tools_own_error_stays_reachable() {
    let tool = tool_def!(search);
    let error = call(&tool, r#"{"query": ""}"#).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<CatalogueError>(),
        Some(&CatalogueError::EmptyQuery)
    );

    let read = tool_def!(read);
    let error = call(&read, r#"{"path": "/x"}"#).await.unwrap_err();
    let io = error
        .downcast_ref::<std::io::Error>()
        .expect("an io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}

#[tokio::test]
async fn bad_arguments_fail_before_the_tool_runs() {
    let tool = tool_def!(search);
    let parse = |raw: &str| {
        agent_errors::testing::handler_of(&tool)
            .call(raw)
            .map(|_| ())
            .unwrap_err()
    };
    assert!(matches!(
        parse("{query: dune}"),
        ToolError::InvalidArgs { .. }
    ));
    assert!(matches!(
        parse(r#"{"query": 7}"#),
        ToolError::Deserialization { .. }
    ));
    assert!(matches!(
        parse(r#"{"limit": 2}"#),
        ToolError::Deserialization { .. }
    ));
    let unknown = parse(r#"{"query": "dune", "lmit": 2}"#);
    assert!(matches!(unknown, ToolError::Deserialization { .. }));
    assert!(unknown.to_string().contains("lmit"), "{unknown}");
}

#[tokio::test]
async fn optional_is_off_unless_asked_for() {
    assert!(tool_def!(noop).is_optional());
    assert!(!tool_def!(search).is_optional());
}

/// Waits for a slow service.
#[tool(timeout = "1.5s", on_error(timeout = retry(2)))]
async fn slow_lookup(key: String) -> String {
    key
}

#[test]
fn timeout_bounds_every_call_and_is_unset_unless_asked_for() {
    assert_eq!(
        tool_def!(slow_lookup).timeout(),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(tool_def!(search).timeout(), None);
}

/// Fetches a page.
#[tool(optional, on_error(
    invalid_args = fix(agent = "url_fixer", retries = 2),
    execution = [
        retry(max_attempts = 4, initial = "250ms", max = "10s"),
        fallback(tool = "cached_fetch"),
        degrade,
    ],
    quota = [retry(max_attempts = 2, initial = "1.5s"), escalate],
    server_error = retry(5),
    auth = throw,
    not_found = escalate,
    validation = fix(agent = "arg_fixer"),
    bug = throw,
    unknown = escalate,
    transient = retry(2),
    timeout = [retry(3), fallback(tool = "cached_fetch"), throw],
))]
async fn fetch(url: String) -> Result<String, BoxError> {
    Ok(url)
}

#[tokio::test]
async fn on_error_builds_the_policy_it_describes() {
    let retry_with = |n, initial: Option<Duration>, max: Option<Duration>| {
        Action::Retry(RetryAction {
            max_attempts: NonZeroU32::new(n).unwrap(),
            initial,
            max,
            when_safe: false,
        })
    };
    let expected = Policy::new()
        .on(
            PolicyKey::InvalidArgs,
            Action::Fix(FixAction {
                agent: Cow::Borrowed("url_fixer"),
                retries: NonZeroU32::new(2).unwrap(),
            }),
        )
        .on(
            PolicyKey::Execution,
            Ladder::new([
                retry_with(
                    4,
                    Some(Duration::from_millis(250)),
                    Some(Duration::from_secs(10)),
                ),
                Action::fallback("cached_fetch"),
                Action::Degrade,
            ]),
        )
        .on(
            PolicyKey::Kind(ErrorKind::Quota),
            [
                retry_with(2, Some(Duration::from_millis(1500)), None),
                Action::Escalate,
            ],
        )
        .on(PolicyKey::Kind(ErrorKind::ServerError), retry(5))
        .on(PolicyKey::Kind(ErrorKind::Auth), Action::Throw)
        .on(PolicyKey::Kind(ErrorKind::NotFound), Action::Escalate)
        .on(PolicyKey::Kind(ErrorKind::Validation), fix("arg_fixer", 1))
        .on(PolicyKey::Kind(ErrorKind::Bug), Action::Throw)
        .on(PolicyKey::Kind(ErrorKind::Unknown), Action::Escalate)
        .on(PolicyKey::Kind(ErrorKind::Transient), retry(2))
        .on(
            PolicyKey::Kind(ErrorKind::Timeout),
            [retry(3), Action::fallback("cached_fetch"), Action::Throw],
        );
    let tool = tool_def!(fetch);
    assert_eq!(tool.policy(), &expected);
    assert!(tool.is_optional());
}

#[tokio::test]
async fn a_tool_without_on_error_has_an_empty_policy_of_its_own() {
    assert!(tool_def!(search).policy().is_empty());
}

#[tokio::test]
async fn policy_builds_a_policy_in_the_order_written() {
    let policy = agent_errors::policy!(
        execution = [retry(5), escalate],
        auth = throw,
        invalid_args = fix(agent = "json_fixer", retries = 3),
    );
    let expected = Policy::new()
        .on(PolicyKey::Execution, [retry(5), Action::Escalate])
        .on(PolicyKey::Kind(ErrorKind::Auth), Action::Throw)
        .on(PolicyKey::InvalidArgs, fix("json_fixer", 3));
    assert_eq!(policy, expected);
    assert_eq!(agent_errors::policy!(), Policy::new());
    assert_eq!(
        agent_errors::policy!(timeout = degrade),
        Policy::new().on(PolicyKey::Kind(ErrorKind::Timeout), Action::Degrade),
        "degrade is checked by the registry, which knows the tool"
    );
}

mod nested {
    use agent_errors::prelude::*;

    /// Counts the keys of a JSON object.
    #[tool(on_error(execution = escalate))]
    pub async fn count_keys(json: String) -> Result<usize, BoxError> {
        let value: serde_json::Value = serde_json::from_str(&json)?;
        Ok(value.as_object().map_or(0, |o| o.len()))
    }

    pub mod deeper {
        use agent_errors::prelude::*;

        /// Echoes its input.
        #[tool]
        pub fn echo(text: String) -> String {
            text
        }
    }
}

#[tokio::test]
async fn every_tool_of_the_crate_inherits_its_defaults() {
    let expected = Policy::new()
        .on(PolicyKey::InvalidArgs, fix("json_fixer", 1))
        .on(PolicyKey::Execution, [retry(3), Action::Escalate]);
    let count_keys = tool_def!(nested::count_keys);
    assert_eq!(count_keys.crate_defaults(), Some(&expected));
    assert_eq!(
        count_keys.policy(),
        &Policy::new().on(PolicyKey::Execution, Action::Escalate),
        "the tool's own policy is kept apart from the defaults"
    );
    let echo = tool_def!(nested::deeper::echo);
    assert_eq!(echo.crate_defaults(), Some(&expected));
    assert_eq!(tool_def!(search).crate_defaults(), Some(&expected));
}

#[tokio::test]
async fn tools_collects_entries_by_path_in_order() {
    let tools = agent_errors::tools![search, nested::count_keys, nested::deeper::echo, add,];
    let names: Vec<&str> = tools.iter().map(ToolDef::name).collect();
    assert_eq!(names, ["search", "count_keys", "echo", "add_numbers"]);
    assert_eq!(
        call(&tools[1], r#"{"json": "{\"a\": 1}"}"#).await.unwrap(),
        "1"
    );
    assert!(agent_errors::tools![].is_empty());
}

/// Turns single quotes into double quotes.
#[fixer]
fn json_fixer(request: FixRequest) -> Result<Fix, FixerError> {
    if request.raw_args.contains('\'') {
        Ok(Fix::args(request.raw_args.replace('\'', "\"")))
    } else {
        Err(FixerError::escalate("nothing to repair", Severity::Medium))
    }
}

mod fixers_mod {
    use agent_errors::prelude::*;

    /// Answers with a fixed result after the second try.
    #[agent_errors::fixer(name = "patient")]
    pub async fn wait_then_answer(request: FixRequest) -> Result<Fix, FixerError> {
        tokio::task::yield_now().await;
        if request.attempt < 2 {
            return Err(FixerError::other("not yet"));
        }
        Fix::result(serde_json::json!({ "tool": request.tool, "attempt": request.attempt }))
    }
}

#[tokio::test]
async fn fixers_are_callable_through_their_definitions() {
    let fixers = agent_errors::fixers![json_fixer, fixers_mod::wait_then_answer];
    let names: Vec<&str> = fixers.iter().map(FixerDef::name).collect();
    assert_eq!(names, ["json_fixer", "patient"]);

    let repaired = fixers[0]
        .fix(FixRequest::new("count_keys", "{'a': 1}", "expected `\"`"))
        .await
        .unwrap();
    assert_eq!(repaired, Fix::args(r#"{"a": 1}"#));
    let refused = fixers[0]
        .fix(FixRequest::new("count_keys", "{}", "no"))
        .await
        .unwrap_err();
    assert!(matches!(
        refused,
        FixerError::Escalate {
            severity: Severity::Medium,
            ..
        }
    ));

    let not_yet = fixers[1]
        .fix(FixRequest::new("fetch", "{}", "timed out"))
        .await;
    assert!(matches!(not_yet, Err(FixerError::Other(_))));
    let answered = fixers[1]
        .fix(FixRequest::new("fetch", "{}", "timed out").with_attempt(2))
        .await
        .unwrap();
    assert_eq!(
        answered,
        Fix::Result(json!({ "tool": "fetch", "attempt": 2 }))
    );
}

#[tokio::test]
async fn a_fixer_stays_callable_as_written() {
    let fix = json_fixer(FixRequest::new("t", "['x']", "bad quotes")).unwrap();
    assert_eq!(fix, Fix::args(r#"["x"]"#));
    let answer =
        fixers_mod::wait_then_answer(FixRequest::new("t", "{}", "e").with_attempt(3)).await;
    assert!(answer.is_ok());
}

/// Holds a value across an await, so its future must be `Send` to become a tool.
#[tool]
async fn slow_echo(text: String) -> String {
    let held = text.clone();
    tokio::task::yield_now().await;
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_can_run_on_another_thread() {
    let tool = tool_def!(slow_echo);
    let running = agent_errors::testing::handler_of(&tool)
        .call(r#"{"text": "hi"}"#)
        .unwrap();
    let out = tokio::spawn(running).await.unwrap().unwrap();
    assert_eq!(out, "hi");
}

/// Parses a number.
#[tool]
fn parse_number(text: String) -> Result<u32, std::num::ParseIntError> {
    text.trim().parse()
}

#[tokio::test]
async fn a_sync_tool_returning_result_reports_its_error() {
    let tool = tool_def!(parse_number);
    assert_eq!(call(&tool, r#"{"text": " 12 "}"#).await.unwrap(), "12");
    let error = call(&tool, r#"{"text": "twelve"}"#).await.unwrap_err();
    assert!(error.downcast_ref::<std::num::ParseIntError>().is_some());
}

/// Forecasts the weather.
#[tool]
async fn forecast(
    /// The city to forecast, e.g. "Paris".
    city: String,
    days: u32,
) -> String {
    format!("{city}: {days} days")
}

#[tokio::test]
async fn doc_comments_on_parameters_describe_their_fields_and_the_fn_still_compiles() {
    let def = tool_def!(forecast);
    let properties = &def.parameters()["properties"];
    assert_eq!(
        properties["city"]["description"],
        "The city to forecast, e.g. \"Paris\"."
    );
    assert!(properties["days"].get("description").is_none());
    assert_eq!(forecast("Oslo".into(), 2).await, "Oslo: 2 days");
}

/// Today's weather.
#[tool(breaker = "weather-api")]
async fn weather_today(city: String) -> String {
    city
}

/// Tomorrow's weather.
#[tool(breaker = "weather-api")]
async fn weather_tomorrow(city: String) -> String {
    city
}

#[test]
fn tools_naming_one_upstream_share_its_breaker_key() {
    let tools = tools![weather_today, weather_tomorrow, count_keys_plain];
    assert_eq!(tools[0].breaker_key(), "weather-api");
    assert_eq!(tools[1].breaker_key(), "weather-api");
    // Without a key, a tool's breaker is its own.
    assert_eq!(tools[2].breaker_key(), tools[2].name());
}

/// Counts nothing in particular.
#[tool]
async fn count_keys_plain(json: String) -> usize {
    json.len()
}

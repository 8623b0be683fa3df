//! The configuration file: upstream servers, and the policies in the DSL's own words.
//!
//! The file is TOML. It is read as a tree whose every key and value knows where it stands in
//! the file, and walked once: every mistake found on the way is kept, so a file with three
//! mistakes is refused with three messages, each at its line and column.
//!
//! ```toml
//! preset = "recommended"             # optional: the library's recommended preset under every tool
//!
//! [session]                          # one MCP client session is one run
//! max_tool_calls = 200
//!
//! [servers.files]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]
//! on_error = { transient = "retry(3)", invalid_args = ["fix(builtin)", "escalate"] }
//!
//! [servers.files.tools.write_file]
//! approval = true
//!
//! [servers.payments]                 # applies a call once per idempotency key in `_meta`
//! url = "http://127.0.0.1:8080/mcp"
//! keyed = true
//! on_error = { timeout = ["retry(3, when_safe)", "escalate"] }
//! ```

use std::ops::Range;
use std::time::Duration;

use agent_errors::ErrorKind;
use agent_errors::policy::{Action, Ladder, OnTrip, Policy, PolicyKey, RunBreakerRule};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::policy_text::{self, DURATION_FORMAT, RungProblem};
use crate::problems::{Problem, Problems};
use crate::suggest::did_you_mean;

/// The largest configuration file read.
pub(crate) const MAX_FILE_BYTES: usize = 1 << 20;

/// What the whole file says.
#[derive(Debug, Default)]
pub(crate) struct Config {
    /// `preset = "recommended"`: the library's recommended preset just below `[defaults]`'s
    /// `on_error`, for every tool.
    pub(crate) preset: bool,
    /// `[defaults]`: settings and the crate-wide `on_error` layer of every tool.
    pub(crate) defaults: ToolSettings,
    pub(crate) session: SessionSettings,
    pub(crate) service_breaker: BreakerSettings,
    pub(crate) servers: Vec<ServerConfig>,
}

/// `[session]`: what holds for one client's session, which is one run.
#[derive(Debug, Default, Clone)]
pub(crate) struct SessionSettings {
    pub(crate) max_tool_calls: Option<u32>,
    /// Consecutive failures of one tool that trip the per-run breaker (default 5).
    pub(crate) breaker_threshold: Option<u32>,
}

/// `[service_breaker]`: one breaker per upstream server, shared by every session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BreakerSettings {
    Consecutive {
        threshold: u32,
        cooldown: Duration,
    },
    FailureRate {
        percent: u8,
        window: u32,
        min_calls: u32,
        cooldown: Duration,
    },
}

impl Default for BreakerSettings {
    /// A failure rate over a window, with a minimum number of calls: one unlucky call, or a
    /// short run of them, does not open a server's circuit for every session.
    fn default() -> Self {
        BreakerSettings::FailureRate {
            percent: 50,
            window: 20,
            min_calls: 10,
            cooldown: Duration::from_secs(30),
        }
    }
}

/// How the proxy reaches an upstream server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
    },
    Http {
        url: String,
    },
}

/// `[servers.NAME]`.
#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    pub(crate) name: String,
    pub(crate) transport: Transport,
    pub(crate) prefix: Option<String>,
    pub(crate) allow: Option<Vec<String>>,
    pub(crate) deny: Vec<String>,
    pub(crate) request_timeout: Option<Duration>,
    /// `keyed = true`: the server applies a call once per idempotency key in `_meta`, so a
    /// retry of its tools cannot apply an effect twice.
    pub(crate) keyed: bool,
    /// Settings, and the `on_error` layer, of every tool of this server.
    pub(crate) settings: ToolSettings,
    /// `[servers.NAME.tools.TOOL]`, by the tool's upstream name.
    pub(crate) tools: Vec<ToolConfig>,
}

/// `[servers.NAME.tools.TOOL]`.
#[derive(Debug, Clone)]
pub(crate) struct ToolConfig {
    pub(crate) name: String,
    pub(crate) at: Range<usize>,
    pub(crate) settings: ToolSettings,
}

/// What a table may say about the tools it covers; unset entries fall to the table below.
#[derive(Debug, Default, Clone)]
pub(crate) struct ToolSettings {
    pub(crate) idempotent: Option<bool>,
    pub(crate) approval: Option<bool>,
    pub(crate) optional: Option<bool>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) output_check: Option<OutputCheckSpec>,
    pub(crate) max_calls: Option<u32>,
    pub(crate) on_error: Option<Policy>,
    /// Where each `fallback(tool = ..)` of `on_error` names its tool: checked once the
    /// upstream tools are known.
    pub(crate) fallbacks: Vec<(String, Range<usize>)>,
}

/// `output_check = "error_member"`, `"ok_false(transient)"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutputCheckSpec {
    pub(crate) check: OutputCheckName,
    pub(crate) kind: ErrorKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputCheckName {
    ErrorMember,
    OkFalse,
}

const TOP_KEYS: [&str; 5] = [
    "preset",
    "defaults",
    "session",
    "service_breaker",
    "servers",
];
const SESSION_KEYS: [&str; 2] = ["max_tool_calls", "breaker_threshold"];
const BREAKER_KEYS: [&str; 5] = [
    "consecutive",
    "failure_rate",
    "window",
    "min_calls",
    "cooldown",
];
const SETTING_KEYS: [&str; 8] = [
    "idempotent",
    "approval",
    "optional",
    "timeout",
    "output_check",
    "max_calls",
    "on_error",
    "run_breaker",
];
const SERVER_KEYS: [&str; 11] = [
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "prefix",
    "allow",
    "deny",
    "request_timeout",
    "keyed",
    "tools",
];

type Value<'i> = Spanned<DeValue<'i>>;

/// Reads a configuration file's text: the config, or every mistake in it.
pub(crate) fn parse(text: &str) -> Result<Config, Problems<'_>> {
    let mut problems = Problems::new(text);
    if text.len() > MAX_FILE_BYTES {
        problems.push(Problem::new(
            0..0,
            format!("the file is larger than {MAX_FILE_BYTES} bytes"),
        ));
        return Err(problems);
    }
    let (document, errors) = DeTable::parse_recoverable(text);
    for error in errors {
        let at = error.span().unwrap_or(0..0);
        problems.push(Problem::new(
            at,
            format!("not valid TOML: {}", error.message()),
        ));
    }
    let mut reader = Reader { problems };
    let config = reader.config(document.get_ref());
    reader.problems.into_result(config)
}

struct Reader<'t> {
    problems: Problems<'t>,
}

impl Reader<'_> {
    fn push(&mut self, at: Range<usize>, message: impl Into<String>) {
        self.problems.push(Problem::new(at, message.into()));
    }

    /// Every key of `table` that is not one of `known`, reported with the closest known one.
    fn unknown_keys(&mut self, table: &DeTable<'_>, known: &[&str], place: &str) {
        for key in table.keys() {
            let name = key.get_ref().as_ref();
            if !known.contains(&name) {
                let hint = did_you_mean(name, known.iter().copied())
                    .map_or_else(String::new, |s| format!("; did you mean `{s}`?"));
                self.push(key.span(), format!("unknown key `{name}` in {place}{hint}"));
            }
        }
    }

    fn config(&mut self, top: &DeTable<'_>) -> Config {
        self.unknown_keys(top, &TOP_KEYS, "the file");
        let mut config = Config::default();
        if let Some(preset) = self.string(top, "preset") {
            match preset.get_ref().as_str() {
                "recommended" => config.preset = true,
                "none" => {}
                other => self.push(
                    preset.span(),
                    format!("unknown preset `{other}`: `recommended` or `none`"),
                ),
            }
        }
        if let Some(defaults) = self.table(top, "defaults") {
            self.unknown_keys(defaults, &SETTING_KEYS, "[defaults]");
            config.defaults = self.settings(defaults);
        }
        if let Some(session) = self.table(top, "session") {
            config.session = self.session(session);
        }
        if let Some(breaker) = self.table(top, "service_breaker") {
            config.service_breaker = self.breaker(breaker, top.get("service_breaker"));
        }
        match self.table(top, "servers") {
            Some(servers) => config.servers = self.servers(servers),
            None if !top.contains_key("servers") => {
                self.push(
                    0..0,
                    "no upstream server: add a `[servers.NAME]` table with a `command` or a `url`",
                );
            }
            None => {}
        }
        config
    }

    fn session(&mut self, table: &DeTable<'_>) -> SessionSettings {
        self.unknown_keys(table, &SESSION_KEYS, "[session]");
        SessionSettings {
            max_tool_calls: self.count(table, "max_tool_calls"),
            breaker_threshold: self.count(table, "breaker_threshold"),
        }
    }

    fn breaker(&mut self, table: &DeTable<'_>, whole: Option<&Value<'_>>) -> BreakerSettings {
        self.unknown_keys(table, &BREAKER_KEYS, "[service_breaker]");
        let at = whole.map_or(0..0, Spanned::span);
        let cooldown = self
            .duration(table, "cooldown")
            .unwrap_or(Duration::from_secs(30));
        let consecutive = self.count(table, "consecutive");
        let rate = self.count(table, "failure_rate");
        match (consecutive, rate) {
            (Some(threshold), None) => BreakerSettings::Consecutive {
                threshold,
                cooldown,
            },
            (Some(_), Some(_)) => {
                self.push(
                    at,
                    "[service_breaker] takes `consecutive` or `failure_rate`, not both",
                );
                BreakerSettings::default()
            }
            (None, rate) => {
                let BreakerSettings::FailureRate {
                    percent,
                    window,
                    min_calls,
                    ..
                } = BreakerSettings::default()
                else {
                    unreachable!("the default is a failure rate")
                };
                let percent = match rate.map(u8::try_from) {
                    Some(Ok(p)) if (1..=100).contains(&p) => p,
                    None => percent,
                    Some(_) => {
                        let value = table.get("failure_rate").map_or(at.clone(), Spanned::span);
                        self.push(value, "`failure_rate` is a percentage, 1 to 100");
                        percent
                    }
                };
                let window = self.count(table, "window").unwrap_or(window);
                let min_calls = self
                    .count(table, "min_calls")
                    .unwrap_or(min_calls.min(window));
                if min_calls > window || window == 0 || min_calls == 0 {
                    self.push(
                        at,
                        format!("`min_calls` ({min_calls}) must be 1 to `window` ({window})"),
                    );
                }
                BreakerSettings::FailureRate {
                    percent,
                    window,
                    min_calls,
                    cooldown,
                }
            }
        }
    }

    fn servers(&mut self, table: &DeTable<'_>) -> Vec<ServerConfig> {
        let mut servers = Vec::new();
        for (name, value) in table {
            let place = format!("[servers.{}]", name.get_ref());
            let DeValue::Table(server) = value.get_ref() else {
                self.push(value.span(), format!("{place} must be a table"));
                continue;
            };
            if let Some(server) = self.server(name, server, &place) {
                servers.push(server);
            }
        }
        if servers.is_empty() && self.problems.is_empty() {
            self.push(
                0..0,
                "no upstream server: add a `[servers.NAME]` table with a `command` or a `url`",
            );
        }
        servers
    }

    fn server(
        &mut self,
        name: &Spanned<std::borrow::Cow<'_, str>>,
        table: &DeTable<'_>,
        place: &str,
    ) -> Option<ServerConfig> {
        let known: Vec<&str> = SERVER_KEYS.iter().chain(&SETTING_KEYS).copied().collect();
        self.unknown_keys(table, &known, place);
        let transport = self.transport(table, name.span(), place);
        let settings = self.settings(table);
        let tools = self.tools(table, place);
        Some(ServerConfig {
            name: name.get_ref().to_string(),
            transport: transport?,
            prefix: self.string(table, "prefix").map(Spanned::into_inner),
            allow: self.strings(table, "allow"),
            deny: self.strings(table, "deny").unwrap_or_default(),
            request_timeout: self.duration(table, "request_timeout"),
            keyed: self.boolean(table, "keyed").unwrap_or(false),
            settings,
            tools,
        })
    }

    fn transport(
        &mut self,
        table: &DeTable<'_>,
        at: Range<usize>,
        place: &str,
    ) -> Option<Transport> {
        let command = self.string(table, "command");
        let url = self.string(table, "url");
        match (command, url) {
            (Some(command), None) => Some(Transport::Stdio {
                command: command.into_inner(),
                args: self.strings(table, "args").unwrap_or_default(),
                env: self.env(table),
                cwd: self.string(table, "cwd").map(Spanned::into_inner),
            }),
            (None, Some(url)) => {
                for key in ["args", "env", "cwd"] {
                    if let Some((key, _)) = table.get_key_value(key) {
                        self.push(key.span(), format!("`{key}` is for a server started with `command`, not one reached at a `url`", key = key.get_ref()));
                    }
                }
                Some(Transport::Http {
                    url: url.into_inner(),
                })
            }
            (Some(_), Some(url)) => {
                self.push(
                    url.span(),
                    format!("{place} has a `command` and a `url`: give one"),
                );
                None
            }
            (None, None) => {
                self.push(at, format!("{place} needs a `command` (a server this proxy starts) or a `url` (streamable HTTP)"));
                None
            }
        }
    }

    fn env(&mut self, table: &DeTable<'_>) -> Vec<(String, String)> {
        let Some(env) = self.table(table, "env") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in env {
            match value.get_ref().as_str() {
                Some(text) => out.push((key.get_ref().to_string(), text.to_owned())),
                None => self.push(
                    value.span(),
                    format!("`env.{}` must be a string", key.get_ref()),
                ),
            }
        }
        out
    }

    fn tools(&mut self, server: &DeTable<'_>, place: &str) -> Vec<ToolConfig> {
        let Some(tools) = self.table(server, "tools") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, value) in tools {
            let tool_place = format!("{}.tools.{}]", place.trim_end_matches(']'), name.get_ref());
            let DeValue::Table(table) = value.get_ref() else {
                self.push(value.span(), format!("{tool_place} must be a table"));
                continue;
            };
            self.unknown_keys(table, &SETTING_KEYS, &tool_place);
            out.push(ToolConfig {
                name: name.get_ref().to_string(),
                at: name.span(),
                settings: self.settings(table),
            });
        }
        out
    }

    fn settings(&mut self, table: &DeTable<'_>) -> ToolSettings {
        let mut settings = ToolSettings {
            idempotent: self.boolean(table, "idempotent"),
            approval: self.boolean(table, "approval"),
            optional: self.boolean(table, "optional"),
            timeout: self.duration(table, "timeout"),
            output_check: self.output_check(table),
            max_calls: self.count(table, "max_calls"),
            ..ToolSettings::default()
        };
        let rule = self.run_breaker(table);
        if let Some(on_error) = self.table_value(table, "on_error") {
            let mut fallbacks = Vec::new();
            let policy = self.policy(on_error, &mut fallbacks);
            settings.on_error = Some(policy);
            settings.fallbacks = fallbacks;
        }
        if let Some(rule) = rule {
            let policy = settings.on_error.take().unwrap_or_default();
            settings.on_error = Some(policy.run_breaker(rule));
        }
        settings
    }

    fn run_breaker(&mut self, table: &DeTable<'_>) -> Option<RunBreakerRule> {
        let text = self.string(table, "run_breaker")?;
        let rule = match text.get_ref().as_str() {
            "stop_run" => RunBreakerRule::new(OnTrip::StopRun),
            "remove_tool" => RunBreakerRule::new(OnTrip::RemoveTool),
            "stop_run(per_kind)" => RunBreakerRule::new(OnTrip::StopRun).per_kind(),
            "remove_tool(per_kind)" => RunBreakerRule::new(OnTrip::RemoveTool).per_kind(),
            other => {
                self.push(text.span(), format!("unknown run breaker rule `{other}`: `stop_run`, `remove_tool`, or either with `(per_kind)`"));
                return None;
            }
        };
        Some(rule)
    }

    fn output_check(&mut self, table: &DeTable<'_>) -> Option<OutputCheckSpec> {
        let text = self.string(table, "output_check")?;
        let (name, kind) = match text.get_ref().split_once('(') {
            Some((name, rest)) => (name.trim(), rest.strip_suffix(')').map(str::trim)),
            None => (text.get_ref().trim(), Some("transient")),
        };
        let check = match name {
            "error_member" => Some(OutputCheckName::ErrorMember),
            "ok_false" => Some(OutputCheckName::OkFalse),
            _ => None,
        };
        let kind = kind.and_then(|k| ErrorKind::ALL.into_iter().find(|kind| kind.as_str() == k));
        match (check, kind) {
            (Some(check), Some(kind)) => Some(OutputCheckSpec { check, kind }),
            _ => {
                self.push(text.span(), "`output_check` is `error_member` or `ok_false`, with the kind its failures get in parentheses if not `transient`: `error_member(validation)`");
                None
            }
        }
    }

    /// `on_error = { key = "rung" or ["rung", ...], ... }`.
    fn policy(&mut self, table: &Value<'_>, fallbacks: &mut Vec<(String, Range<usize>)>) -> Policy {
        let DeValue::Table(entries) = table.get_ref() else {
            self.push(
                table.span(),
                "`on_error` is a table: `on_error = { transient = \"retry(3)\" }`",
            );
            return Policy::new();
        };
        let mut policy = Policy::new();
        for (key, value) in entries {
            let Some(policy_key) = self.policy_key(key) else {
                continue;
            };
            let ladder = self.ladder(policy_key, value, fallbacks);
            policy = policy.on(policy_key, ladder);
        }
        policy
    }

    fn policy_key(&mut self, key: &Spanned<std::borrow::Cow<'_, str>>) -> Option<PolicyKey> {
        let name = key.get_ref().as_ref();
        if let Some(found) = PolicyKey::all().find(|k| k.as_str() == name) {
            return Some(found);
        }
        let names: Vec<&str> = PolicyKey::all().map(PolicyKey::as_str).collect();
        let hint = did_you_mean(name, names.iter().copied()).map_or_else(
            || format!("; the keys are {}", names.join(", ")),
            |s| format!("; did you mean `{s}`?"),
        );
        self.push(
            key.span(),
            format!("unknown key `{name}` in `on_error`{hint}"),
        );
        None
    }

    fn ladder(
        &mut self,
        key: PolicyKey,
        value: &Value<'_>,
        fallbacks: &mut Vec<(String, Range<usize>)>,
    ) -> Ladder {
        let rungs: Vec<&Value<'_>> = match value.get_ref() {
            DeValue::String(_) => vec![value],
            DeValue::Array(items) => items.iter().collect(),
            _ => {
                self.push(value.span(), format!("`{key}` takes a rung or a list of rungs: `\"retry(3)\"` or `[\"retry(3)\", \"escalate\"]`"));
                return Ladder::default();
            }
        };
        let mut actions: Vec<Action> = Vec::new();
        for rung in rungs {
            let Some(text) = rung.get_ref().as_str() else {
                self.push(rung.span(), "a rung is a string: `\"retry(3)\"`");
                continue;
            };
            let action = match policy_text::parse_rung(text) {
                Ok(action) => action,
                Err(wrong) => {
                    let at = self.inside(rung.span(), text, &wrong);
                    self.push(at, wrong.message);
                    continue;
                }
            };
            self.check_rung(key, &action, actions.last(), rung.span());
            if let Action::Fallback { tool } = &action {
                fallbacks.push((tool.to_string(), rung.span()));
            }
            actions.push(action);
        }
        Ladder::new(actions)
    }

    /// The rules the macros hold a ladder to, for a rung read from a file.
    fn check_rung(
        &mut self,
        key: PolicyKey,
        action: &Action,
        before: Option<&Action>,
        at: Range<usize>,
    ) {
        if let Some(terminal) = before.filter(|a| a.is_terminal()) {
            self.push(
                at.clone(),
                format!("nothing may follow `{terminal}`: it ends the ladder"),
            );
        }
        let retries = match key {
            PolicyKey::InvalidArgs => false,
            PolicyKey::Execution => true,
            PolicyKey::Kind(kind) => kind.is_retryable(),
        };
        if matches!(action, Action::Retry(_)) && !retries {
            self.push(at, format!("`retry` under `{key}` never runs: those failures cannot succeed on retry, so they are never retried (use `escalate` to show the model, or `throw`)"));
        }
    }

    /// Where a rung's mistake stands in the file: exactly, when the string is written as it
    /// reads (no escapes); the whole string otherwise.
    fn inside(&self, literal: Range<usize>, text: &str, wrong: &RungProblem) -> Range<usize> {
        let raw = self
            .problems
            .text()
            .get(literal.start + 1..literal.end.saturating_sub(1));
        if raw == Some(text) {
            literal.start + 1 + wrong.at.start..literal.start + 1 + wrong.at.end
        } else {
            literal
        }
    }

    fn table_value<'a, 'i>(&mut self, table: &'a DeTable<'i>, key: &str) -> Option<&'a Value<'i>> {
        table.get(key)
    }

    fn table<'a, 'i>(&mut self, table: &'a DeTable<'i>, key: &str) -> Option<&'a DeTable<'i>> {
        let value = table.get(key)?;
        match value.get_ref() {
            DeValue::Table(inner) => Some(inner),
            other => {
                self.push(
                    value.span(),
                    format!("`{key}` must be a table, not a {}", other.type_str()),
                );
                None
            }
        }
    }

    fn string(&mut self, table: &DeTable<'_>, key: &str) -> Option<Spanned<String>> {
        let value = table.get(key)?;
        match value.get_ref().as_str() {
            Some(text) => Some(Spanned::new(value.span(), text.to_owned())),
            None => {
                self.push(
                    value.span(),
                    format!(
                        "`{key}` must be a string, not a {}",
                        value.get_ref().type_str()
                    ),
                );
                None
            }
        }
    }

    fn strings(&mut self, table: &DeTable<'_>, key: &str) -> Option<Vec<String>> {
        let value = table.get(key)?;
        let Some(items) = value.get_ref().as_array() else {
            self.push(value.span(), format!("`{key}` must be a list of strings"));
            return None;
        };
        let mut out = Vec::new();
        for item in items {
            match item.get_ref().as_str() {
                Some(text) => out.push(text.to_owned()),
                None => self.push(item.span(), format!("`{key}` must be a list of strings")),
            }
        }
        Some(out)
    }

    fn boolean(&mut self, table: &DeTable<'_>, key: &str) -> Option<bool> {
        let value = table.get(key)?;
        let found = value.get_ref().as_bool();
        if found.is_none() {
            self.push(value.span(), format!("`{key}` must be `true` or `false`"));
        }
        found
    }

    fn count(&mut self, table: &DeTable<'_>, key: &str) -> Option<u32> {
        let value = table.get(key)?;
        let parsed = value
            .get_ref()
            .as_integer()
            .filter(|i| i.radix() == 10)
            .and_then(|i| i.as_str().replace('_', "").parse::<u32>().ok())
            .filter(|&n| n > 0);
        if parsed.is_none() {
            self.push(
                value.span(),
                format!("`{key}` must be a whole number from 1 to {}", u32::MAX),
            );
        }
        parsed
    }

    fn duration(&mut self, table: &DeTable<'_>, key: &str) -> Option<Duration> {
        let text = self.string(table, key)?;
        let parsed = policy_text::parse_duration(text.get_ref()).filter(|d| !d.is_zero());
        if parsed.is_none() {
            self.push(
                text.span(),
                format!(
                    "bad duration `{}` for `{key}`: {DURATION_FORMAT}, more than zero",
                    text.get_ref()
                ),
            );
        }
        parsed
    }
}

/// Settings for one tool: its own table over its server's over `[defaults]`.
pub(crate) fn layered(
    tool: Option<&ToolSettings>,
    server: &ToolSettings,
    defaults: &ToolSettings,
) -> ToolSettings {
    let pick = |get: &dyn Fn(&ToolSettings) -> Option<bool>| {
        tool.and_then(get)
            .or_else(|| get(server))
            .or_else(|| get(defaults))
    };
    let first = |a: Option<&ToolSettings>| a.cloned().unwrap_or_default();
    let own = first(tool);
    ToolSettings {
        idempotent: pick(&|s| s.idempotent),
        approval: pick(&|s| s.approval),
        optional: pick(&|s| s.optional),
        timeout: own.timeout.or(server.timeout).or(defaults.timeout),
        output_check: own
            .output_check
            .or(server.output_check)
            .or(defaults.output_check),
        max_calls: own.max_calls.or(server.max_calls).or(defaults.max_calls),
        on_error: own.on_error,
        fallbacks: own.fallbacks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        match parse(text) {
            Ok(_) => Vec::new(),
            Err(problems) => problems
                .render("proxy.toml")
                .lines()
                .map(str::to_owned)
                .collect(),
        }
    }

    #[test]
    fn a_small_file_reads_into_servers_settings_and_policies() {
        let config = parse(
            r#"
preset = "recommended"
[session]
max_tool_calls = 50
[servers.files]
command = "npx"
args = ["-y", "server"]
on_error = { transient = "retry(3)", execution = ["retry(2)", "escalate"] }
[servers.files.tools.write_file]
approval = true
idempotent = false
[servers.search]
url = "http://127.0.0.1:9/mcp"
prefix = "web"
keyed = true
on_error = { timeout = ["retry(3, when_safe)", "escalate"] }
"#,
        )
        .unwrap();
        assert!(config.preset);
        assert_eq!(config.session.max_tool_calls, Some(50));
        let files = &config.servers[0];
        assert_eq!(files.name, "files");
        let policy = files.settings.on_error.as_ref().unwrap();
        assert_eq!(
            policy.get(PolicyKey::Execution).unwrap().to_string(),
            "[retry(2), escalate]"
        );
        assert_eq!(files.tools[0].settings.approval, Some(true));
        assert_eq!(
            config.servers[1].transport,
            Transport::Http {
                url: "http://127.0.0.1:9/mcp".into()
            }
        );
        assert!(!files.keyed && config.servers[1].keyed);
        let search = config.servers[1].settings.on_error.as_ref().unwrap();
        assert_eq!(
            search
                .get(PolicyKey::Kind(ErrorKind::Timeout))
                .unwrap()
                .to_string(),
            "[retry(3, when_safe), escalate]"
        );
    }

    #[test]
    fn keyed_is_a_servers_and_says_true_or_false() {
        let found = problems("[servers.a]\ncommand = \"x\"\nkeyed = \"yes\"\n");
        assert_eq!(
            found[0],
            "proxy.toml:3:9: `keyed` must be `true` or `false`"
        );
        let found = problems("[servers.a]\ncommand = \"x\"\n[servers.a.tools.t]\nkeyed = true\n");
        assert!(
            found[0].contains("unknown key `keyed` in [servers.a.tools.t]"),
            "{found:?}"
        );
    }

    #[test]
    fn every_mistake_is_listed_at_once_with_its_place_and_a_suggestion() {
        let found = problems(
            "[servers.files]\ncommand = \"npx\"\non_error = { transiant = \"retry(3)\", timeout = \"rerty(2)\" }\nidempotnt = true\n",
        );
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].starts_with(
                "proxy.toml:3:14: unknown key `transiant` in `on_error`; did you mean `transient`?"
            ),
            "{found:#?}"
        );
        assert!(
            found[1].starts_with("proxy.toml:3:49: unknown action `rerty`; did you mean `retry`?"),
            "{found:#?}"
        );
        assert!(found[2].starts_with("proxy.toml:4:1: unknown key `idempotnt` in [servers.files]; did you mean `idempotent`?"), "{found:#?}");
    }

    #[test]
    fn ladders_are_held_to_the_macros_rules() {
        let found = problems(
            "[servers.a]\ncommand = \"x\"\non_error = { auth = \"retry(2)\", execution = [\"escalate\", \"retry(2)\"] }\n",
        );
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found
                .iter()
                .any(|p| p.contains("`retry` under `auth` never runs"))
        );
        assert!(
            found
                .iter()
                .any(|p| p.contains("nothing may follow `escalate`"))
        );
    }

    #[test]
    fn a_server_needs_one_way_in_and_the_file_a_server() {
        assert!(problems("[servers.a]\nprefix = \"x\"\n")[0].contains("needs a `command`"));
        assert!(problems("[servers.a]\ncommand = \"x\"\nurl = \"y\"\n")[0].contains("give one"));
        assert!(problems("")[0].contains("no upstream server"));
        assert!(problems("[servers\n")[0].contains("not valid TOML"));
    }

    #[test]
    fn the_service_breaker_defaults_to_a_failure_rate_with_a_minimum_of_calls() {
        let config = parse("[servers.a]\ncommand = \"x\"\n").unwrap();
        assert!(matches!(
            config.service_breaker,
            BreakerSettings::FailureRate { min_calls: 10, .. }
        ));
        let found =
            problems("[service_breaker]\nfailure_rate = 150\n[servers.a]\ncommand = \"x\"\n");
        assert!(found[0].contains("percentage"), "{found:#?}");
    }
}

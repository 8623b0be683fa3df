//! The upstream servers: connected, their tools put under the file's policies, and one registry
//! that holds them all.
//!
//! Layers, per key, as in the library: a `[servers.S.tools.T]` table is the tool's own layer,
//! its `[servers.S]` table the agent layer, `[defaults]` the crate layer, then the library's
//! recommended preset when `preset = "recommended"` asks for it, then the fail-closed built-in.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use agent_errors::breaker::ServiceBreaker;
use agent_errors::build::ConfigError;
use agent_errors::call::OutputCheck;
use agent_errors::mcp::{McpClient, McpError, McpServer};
use agent_errors::policy::Policy;
use agent_errors::{Registry, ToolDef};

use crate::config::{
    BreakerSettings, Config, OutputCheckName, ServerConfig, ToolSettings, Transport, layered,
};
use crate::problems::{Problem, Problems};
use crate::suggest::did_you_mean;

/// Why the proxy could not start once the file was read.
#[derive(Debug)]
pub(crate) enum StartError {
    /// An upstream server could not be reached.
    Connect { server: String, error: McpError },
    /// The file names tools the servers do not have: rendered, one line each.
    Problems(String),
    /// The registry refused the tools as configured.
    Build(ConfigError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Connect { server, error } => {
                write!(f, "could not start the upstream server `{server}`: {error}")
            }
            StartError::Problems(lines) => f.write_str(lines.trim_end()),
            StartError::Build(error) => write!(f, "{error}"),
        }
    }
}

/// What a proxied tool is, for `--explain` and the logs.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) server: String,
    pub(crate) upstream_name: String,
}

/// Every upstream, connected.
#[derive(Debug)]
pub(crate) struct Upstreams {
    pub(crate) registry: Registry,
    pub(crate) clients: Vec<McpClient>,
    pub(crate) breaker: Arc<ServiceBreaker>,
    pub(crate) origins: BTreeMap<String, Origin>,
    /// Per-session caps on one tool's calls, by proxied name.
    pub(crate) max_calls: Vec<(String, u32)>,
}

impl Upstreams {
    /// Stops every server this proxy started.
    pub(crate) async fn shutdown(&self) {
        for client in &self.clients {
            client.shutdown().await;
        }
    }
}

/// Connects every server of `config` (whose file's text is `text`, for the places of
/// mistakes) and builds the registry of all their tools.
pub(crate) async fn connect(config: &Config, text: &str) -> Result<Upstreams, StartError> {
    let mut connected = Vec::new();
    for server in &config.servers {
        let client = start(server, server.prefix.clone()).await?;
        connected.push((server, client));
    }
    // Two servers offering one name: each of them without a prefix of its own is given its
    // name as one, so both tools are offered (`files_read`, `notes_read`).
    let clashing = clashes(&connected);
    for (server, client) in &mut connected {
        if server.prefix.is_none() && clashing.contains(server.name.as_str()) {
            client.shutdown().await;
            *client = start(server, Some(format!("{}_", server.name))).await?;
        }
    }
    let crate_layer = crate_layer(config);
    let mut problems = Problems::new(text);
    let mut builder = Registry::builder();
    let mut origins = BTreeMap::new();
    let mut max_calls = Vec::new();
    for (server, client) in &connected {
        let prefix = prefix_of(server, &clashing);
        check_tool_tables(server, client, &prefix, &mut problems);
        if let Some(policy) = &server.settings.on_error {
            for tool in client.tools() {
                builder = builder.on_tool_error(tool.name(), policy.clone());
            }
        }
        for tool in client.tools() {
            let upstream_name = tool
                .name()
                .strip_prefix(prefix.as_str())
                .unwrap_or(tool.name())
                .to_owned();
            let own = server
                .tools
                .iter()
                .find(|t| t.name == upstream_name)
                .map(|t| &t.settings);
            let settings = layered(own, &server.settings, &config.defaults);
            if let Some(n) = settings.max_calls {
                max_calls.push((tool.name().to_owned(), n));
            }
            origins.insert(
                tool.name().to_owned(),
                Origin {
                    server: server.name.clone(),
                    upstream_name,
                },
            );
            builder = builder.tool(configure(tool, &settings, crate_layer.clone()));
        }
    }
    let known: Vec<String> = origins.keys().cloned().collect();
    check_fallbacks(config, &known, &mut problems);
    if !problems.is_empty() {
        return Err(StartError::Problems(problems.render("the configuration")));
    }
    let registry = builder.build().map_err(StartError::Build)?;
    Ok(Upstreams {
        registry,
        clients: connected.into_iter().map(|(_, client)| client).collect(),
        breaker: Arc::new(breaker(&config.service_breaker)),
        origins,
        max_calls,
    })
}

async fn start(server: &ServerConfig, prefix: Option<String>) -> Result<McpClient, StartError> {
    let mut mcp = match &server.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut mcp = McpServer::stdio(server.name.clone(), command.clone()).args(args.clone());
            for (key, value) in env {
                mcp = mcp.env(key.clone(), value.clone());
            }
            if let Some(cwd) = cwd {
                mcp = mcp.current_dir(cwd.clone());
            }
            mcp
        }
        Transport::Http { url } => McpServer::http(server.name.clone(), url.clone()),
    };
    // One circuit per upstream server: a server that is down opens once for all its tools.
    mcp = mcp.with_breaker_key(server.name.clone());
    if let Some(prefix) = prefix {
        mcp = mcp.with_prefix(prefix);
    }
    if let Some(allow) = &server.allow {
        mcp = mcp.allow_tools(allow.clone());
    }
    if !server.deny.is_empty() {
        mcp = mcp.deny_tools(server.deny.clone());
    }
    if let Some(timeout) = server.request_timeout {
        mcp = mcp.with_request_timeout(timeout);
    }
    // The server applies a call once per key in `_meta`: a retry of a call, which carries the
    // same key, cannot apply its effect twice.
    mcp = mcp.with_keyed(server.keyed);
    mcp.connect().await.map_err(|error| StartError::Connect {
        server: server.name.clone(),
        error,
    })
}

/// The names of the servers one of whose tools another server offers too.
fn clashes(connected: &[(&ServerConfig, McpClient)]) -> BTreeSet<String> {
    let mut owners: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (server, client) in connected {
        for tool in client.tools() {
            owners
                .entry(tool.name().to_owned())
                .or_default()
                .push(&server.name);
        }
    }
    owners
        .into_values()
        .filter(|servers| servers.len() > 1)
        .flatten()
        .map(str::to_owned)
        .collect()
}

fn prefix_of(server: &ServerConfig, clashing: &BTreeSet<String>) -> String {
    match &server.prefix {
        Some(prefix) => prefix.clone(),
        None if clashing.contains(&server.name) => format!("{}_", server.name),
        None => String::new(),
    }
}

/// The crate-wide layer: `[defaults]`'s `on_error`, asking for the library's recommended preset
/// just below it when the file says `preset = "recommended"` (the registry then checks every
/// tool's output for error envelopes, and `--explain` names the preset's entries as its own).
fn crate_layer(config: &Config) -> Option<Policy> {
    let defaults = config.defaults.on_error.clone();
    if config.preset {
        return Some(defaults.unwrap_or_default().with_recommended());
    }
    defaults
}

fn configure(tool: ToolDef, settings: &ToolSettings, crate_layer: Option<Policy>) -> ToolDef {
    let mut tool = tool.with_crate_defaults(crate_layer);
    if let Some(policy) = &settings.on_error {
        tool = tool.with_policy(policy.clone());
    }
    if let Some(idempotent) = settings.idempotent {
        tool = tool.idempotent(idempotent);
    }
    if let Some(approval) = settings.approval {
        tool = tool.requires_approval(approval);
    }
    if let Some(optional) = settings.optional {
        tool = tool.optional(optional);
    }
    if let Some(timeout) = settings.timeout {
        tool = tool.with_timeout(timeout);
    }
    if let Some(spec) = settings.output_check {
        tool = tool.with_output_check(match spec.check {
            OutputCheckName::ErrorMember => OutputCheck::error_member(spec.kind),
            OutputCheckName::OkFalse => OutputCheck::ok_false(spec.kind),
        });
    }
    tool
}

/// A `[servers.S.tools.T]` table for a tool `S` does not offer is a mistake, not a no-op.
fn check_tool_tables(
    server: &ServerConfig,
    client: &McpClient,
    prefix: &str,
    problems: &mut Problems<'_>,
) {
    let offered: Vec<String> = client
        .tools()
        .iter()
        .map(|t| t.name().strip_prefix(prefix).unwrap_or(t.name()).to_owned())
        .collect();
    for table in &server.tools {
        if !offered.contains(&table.name) {
            let hint = did_you_mean(&table.name, offered.iter().map(String::as_str))
                .map_or_else(String::new, |s| format!("; did you mean `{s}`?"));
            problems.push(Problem::new(
                table.at.clone(),
                format!(
                    "the server `{}` offers no tool `{}`{hint}",
                    server.name, table.name
                ),
            ));
        }
    }
}

/// Every `fallback(tool = ..)` names a tool the proxy offers.
fn check_fallbacks(config: &Config, known: &[String], problems: &mut Problems<'_>) {
    let tables = std::iter::once(&config.defaults).chain(
        config
            .servers
            .iter()
            .flat_map(|s| std::iter::once(&s.settings).chain(s.tools.iter().map(|t| &t.settings))),
    );
    for settings in tables {
        for (tool, at) in &settings.fallbacks {
            if !known.contains(tool) {
                let hint = did_you_mean(tool, known.iter().map(String::as_str))
                    .map_or_else(String::new, |s| format!("; did you mean `{s}`?"));
                problems.push(Problem::new(
                    at.clone(),
                    format!("`fallback` names `{tool}`, which no server offers{hint}"),
                ));
            }
        }
    }
}

fn breaker(settings: &BreakerSettings) -> ServiceBreaker {
    let built = match *settings {
        BreakerSettings::Consecutive {
            threshold,
            cooldown,
        } => ServiceBreaker::new(threshold, cooldown),
        BreakerSettings::FailureRate {
            percent,
            window,
            min_calls,
            cooldown,
        } => ServiceBreaker::failure_rate(percent, window, min_calls, cooldown),
    };
    // The file's reader checked every number these refuse.
    built.unwrap_or_default()
}

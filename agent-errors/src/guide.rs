//! The guide: how to use agent-errors, one chapter per task.
//!
//! The repository's README shows the library in five minutes; the chapters below hold the rest.
//! Each is a Markdown file in `agent-errors/guide/`, included here so docs.rs shows it and
//! `cargo test` compiles and runs every code block in it, as it does the API docs' examples. A
//! chapter whose examples need a feature is tested with that feature on (`cargo test
//! --workspace --all-features` turns every one on); without it the chapter's page says which.
//!
//! Start with the first three, then read the chapter of the task at hand:
//!
//! | chapter | read it to |
//! | --- | --- |
//! | [`first_agent`] | set a project up, give tools state and per-run values, hold a conversation, or keep an agent loop of your own |
//! | [`policies`] | write `on_error(...)` policies, see how they resolve, and know what happens when a tool or model call fails |
//! | [`rig_users`] | keep rig's providers, tools and agent loop, and get these policies in them (feature `rig`) |
//! | [`durable_runs`] | make a run outlive its process: checkpoint stores, resume, idempotency keys |
//! | [`person_in_the_loop`] | make a call wait for a person's approval, across a restart, with signed answers |
//! | [`many_agents`] | run a fleet: breakers keyed by upstream, retry budgets, shared state on Redis |
//! | [`observing`] | read the spans, metrics and live event stream a run emits |
//! | [`mcp`] | use MCP servers' tools under these policies, or serve yours (feature `mcp`) |
//! | [`testing_policies`] | test your policies offline, on a scripted model and a paused clock |
//! | [`production`] | check an agent before it ships, and see what the recovery buys |
//! | [`structured_answers`] | get a typed answer, re-asked with its problems when it does not fit |
//! | [`usage_limits`] | cap a run's requests, tokens, cost and tool calls; keep old failures short |
//! | [`streaming`] | stream answers, and know what each stream fault becomes |
//! | [`providers`] | call OpenAI-compatible servers and the Anthropic API |
//! | [`safety`] | know what is redacted, sanitized, bounded and caught on the error path |
//! | [`durable_runs_on_restate`] | run agents as Restate handlers (feature `restate`) |
//! | [`this_repository`] | run this repository's tests, and find your way in its layout |

/// One chapter: a module whose docs are the chapter's file. A chapter whose examples need a
/// feature has its text, and so the tests of its code blocks, with that feature; without it the
/// page says which feature to turn on.
macro_rules! chapter {
    ($name:ident, $file:literal) => {
        #[doc = include_str!(concat!("../guide/", $file))]
        pub mod $name {}
    };
    ($name:ident, $file:literal, feature = $feature:literal) => {
        #[cfg_attr(feature = $feature, doc = include_str!(concat!("../guide/", $file)))]
        #[cfg_attr(
            not(feature = $feature),
            doc = concat!(
                "This chapter's examples need the `",
                $feature,
                "` feature: build the docs with it (docs.rs does) to read it here, or read `agent-errors/guide/",
                $file,
                "`."
            )
        )]
        pub mod $name {}
    };
}

chapter!(first_agent, "01-first-agent.md");
chapter!(policies, "02-policies.md");
chapter!(rig_users, "03-rig.md", feature = "rig");
chapter!(durable_runs, "04-durable-runs.md");
chapter!(person_in_the_loop, "05-person-in-the-loop.md");
chapter!(many_agents, "06-many-agents.md");
chapter!(observing, "07-observing.md");
chapter!(mcp, "08-mcp.md", feature = "mcp");
chapter!(testing_policies, "09-testing.md");
chapter!(production, "10-production.md");
chapter!(structured_answers, "11-structured-answers.md");
chapter!(usage_limits, "12-usage-limits.md");
chapter!(streaming, "13-streaming.md");
chapter!(providers, "14-providers.md");
chapter!(safety, "15-safety.md");
chapter!(
    durable_runs_on_restate,
    "16-restate.md",
    feature = "restate"
);
chapter!(this_repository, "17-this-repository.md");

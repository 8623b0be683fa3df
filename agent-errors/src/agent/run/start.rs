//! Where a run starts: a new run from its transcript, a resumed one from its checkpoint, each
//! made a [`Run`] once its context passes the checks made before anything runs.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Run;
use super::observed::Ended;
use crate::agent::counts::{Counts, SavedCounts, UsageMeter};
use crate::agent::durable::{self, CheckpointJournal, PendingCall, ResumeError, SavedRun, Seam};
use crate::agent::stream::DeltaSender;
use crate::agent::{AgentInner, AgentOutput, RunError, RunOptions, RunOutcome};
use crate::chat::Message;
use crate::events::RunReport;
use crate::executor::RecoveryState;
use crate::usage::{RunMeter, UsageLimits};

/// Where a run starts. A new run starts from its transcript; a resumed run is a new run that
/// starts from its checkpoint: the calls of its last turn still to answer, its counts, what it
/// had learnt, and the deadline it had left.
pub(super) struct Start {
    transcript: Vec<Message>,
    /// The turn whose calls are still to answer, and what was saved about each; like any turn,
    /// it joins the transcript only with its answers.
    pending: Option<(Message, Vec<PendingCall>)>,
    /// What a resumed run had counted; a new run counts from zero.
    counts: Option<SavedCounts>,
    /// What the run had learnt; a new run has learnt nothing, and restores nothing.
    recovery: Option<RecoveryState>,
    deadline: Option<Duration>,
    /// The caps the run is held to: a resumed run keeps those it was started with.
    usage_limits: Arc<UsageLimits>,
    /// The run's start, for its first model turn to start at too, when nothing else timed or
    /// waited on (a checkpoint save, a resumed turn's calls) comes between them.
    clock: Option<Instant>,
}

impl Start {
    /// Where a run resumed from `saved` starts: the calls of its last turn still to answer, its
    /// counts, what it had learnt and what was left of its deadline (`deadline` when it saved
    /// none).
    fn resumed(
        saved: &SavedRun,
        usage_limits: Arc<UsageLimits>,
        deadline: Option<Duration>,
    ) -> Start {
        let mut transcript = saved.transcript.clone();
        // The saved transcript ends with the turn being answered (checked when it was read).
        let pending = if saved.pending.is_empty() {
            None
        } else {
            transcript.pop().map(|asked| (asked, saved.pending.clone()))
        };
        Start {
            transcript,
            pending,
            counts: Some(saved.counts.clone()),
            recovery: Some(saved.recovery.clone()),
            deadline: saved
                .deadline_left_ms
                .map(Duration::from_millis)
                .or(deadline),
            usage_limits,
            clock: None,
        }
    }
}

impl<O: AgentOutput> AgentInner<O> {
    pub(in crate::agent) async fn run(
        &self,
        history: Vec<Message>,
        mut options: RunOptions,
        started: Instant,
    ) -> Ended<O> {
        let run_id = options.run_id.take().unwrap_or_else(durable::new_run_id);
        if let Err(error) = crate::agent::conversation::check_history(&history) {
            return Ended::from(RunOutcome {
                result: Err(RunError::InvalidHistory(error)),
                report: RunReport::default(),
                transcript: history,
                run_id,
            });
        }
        let transcript =
            crate::agent::conversation::with_system_prompt(self.system_prompt.as_deref(), history);
        if let Err(error) = self.check_run_limits(&options) {
            return Ended::from(RunOutcome {
                result: Err(error),
                report: RunReport::default(),
                transcript,
                run_id,
            });
        }
        let usage_limits =
            (options.usage_limits.take()).unwrap_or_else(|| self.usage_limits.clone());
        // An engine that replays the run keeps it in its own journal: a store beside it would
        // refuse the replayed run's id as taken.
        let seam = match (options.journal.take(), &self.checkpoints) {
            (Some(engine), _) => engine,
            (None, Some(store)) => {
                let mut saved = SavedRun::new(transcript.clone());
                saved.usage_limits = Some(UsageLimits::clone(&usage_limits));
                saved.signed_answers = self.approvals.key.is_some();
                let store = Arc::clone(store);
                let every = self.snapshot_every;
                let journal = CheckpointJournal::new(store, run_id.clone(), saved, 0, every);
                Seam::of(Arc::new(journal))
            }
            (None, None) => Seam::none(),
        };
        let start = Start {
            transcript,
            pending: None,
            counts: None,
            recovery: None,
            deadline: self.limits.run_deadline,
            usage_limits,
            // A run whose journal saves records its start before its first turn.
            clock: seam.calls.reading_after_save(started),
        };
        let mut ended = self.go(run_id, seam, start, options).await;
        super::context::name_a_taken_id(&mut ended.outcome.result);
        ended
    }

    pub(super) async fn resume(&self, run_id: String, mut options: RunOptions) -> Ended<O> {
        let refused = |error: RunError, transcript| {
            Ended::from(RunOutcome {
                result: Err(error.redacted()),
                report: RunReport::default(),
                transcript,
                run_id: run_id.clone(),
            })
        };
        let Some(store) = &self.checkpoints else {
            return refused(RunError::Resume(ResumeError::NoStore), Vec::new());
        };
        let knows = |name: &str| self.knows(name);
        let limit = self.limits.max_message_chars;
        let (mut saved, next) = match durable::resumable(&**store, &run_id, knows, limit).await {
            Ok(resumable) => resumable,
            Err((error, transcript)) => return refused(error, transcript),
        };
        // Its answers must be signed: an agent without the key could not check one.
        if saved.signed_answers && self.approvals.key.is_none() {
            let error = ResumeError::AnswerKeyRequired {
                run_id: run_id.clone(),
            };
            return refused(RunError::Resume(error), Vec::new());
        }
        if let Err(error) = self.check_run_limits(&options) {
            return refused(error, Vec::new());
        }
        let usage_limits = match options.usage_limits.take() {
            Some(limits) => limits,
            None => saved
                .usage_limits
                .clone()
                .map_or_else(|| self.usage_limits.clone(), Arc::new),
        };
        saved.usage_limits = Some(UsageLimits::clone(&usage_limits));
        let start = Start::resumed(&saved, usage_limits, self.limits.run_deadline);
        let store = Arc::clone(store);
        let every = self.snapshot_every;
        let journal = CheckpointJournal::new(store, run_id.clone(), saved, next, every);
        self.go(run_id, Seam::of(Arc::new(journal)), start, options)
            .await
    }

    /// Whether a call of `name` reaches a tool of this agent.
    pub(super) fn knows(&self, name: &str) -> bool {
        self.registry.tool(name).is_some() || self.builtins.enabled(name)
    }

    /// Runs a run from `start` to its end.
    async fn go(&self, run_id: String, seam: Seam, start: Start, options: RunOptions) -> Ended<O> {
        match Run::start(self, run_id, seam, start, options) {
            Ok(mut run) => {
                let result = run.drive_to_end().await;
                run.finish(result).await
            }
            Err(refused) => *refused,
        }
    }
}

impl<'a, O: AgentOutput> Run<'a, O> {
    /// The run `start` makes for `agent`, or the run's end when its context lacks what the
    /// agent's tools need or a clock to wait on.
    fn start(
        agent: &'a AgentInner<O>,
        run_id: String,
        seam: Seam,
        start: Start,
        mut options: RunOptions,
    ) -> Result<Self, Box<Ended<O>>> {
        let refused = agent
            .check_context(&options.extensions)
            .and_then(|()| super::context::check_timer(&seam.calls));
        if let Err(refused) = refused {
            return Err(Box::new(Ended::from(RunOutcome {
                result: Err(refused),
                report: RunReport::default(),
                transcript: start.transcript,
                run_id,
            })));
        }
        let deltas = options.deltas.take().map(DeltaSender::new);
        let compact_failures = options.compact_failures;
        let meter = RunMeter::for_run(&start.usage_limits, &options.caller_meter);
        let ctx = agent.context(options, &run_id, seam.calls, meter.clone());
        if let Some(recovery) = start.recovery {
            ctx.restore(recovery);
        }
        let request = agent.first_request(&ctx, start.transcript, meter.clone());
        let mut counts = Counts::new(UsageMeter::new(start.usage_limits, meter));
        if let Some(saved) = start.counts {
            counts.restore(saved);
        }
        if let Some((_, pending)) = &start.pending {
            let tools = (pending.iter()).filter(|p| agent.registry.tool(&p.call.name).is_some());
            counts.count_resumed(tools.map(|p| (&*p.call.name, p.progress.attempts)));
        }
        Ok(Run {
            agent,
            run_id,
            ctx,
            journal: seam.run,
            request,
            counts,
            reasks: Default::default(),
            resumed: start.pending,
            deltas,
            fallback: None,
            clock: start.clock,
            compact_failures,
            deadline: start.deadline,
        })
    }
}

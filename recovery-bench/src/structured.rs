//! The bad-structured-answers mix: an agent whose output is a typed order (`Json<Order>`, three
//! levels deep) asks a model that, at the fault rate, answers with a required field missing, a
//! wrong type two levels down, or prose around the JSON. Strategies differ in what they do with
//! such an answer: end the run (this library before it re-asked), re-ask with a generic "that was
//! not valid" (what a caller's own loop does), or re-ask showing the validation problems with
//! their paths (the library's output policy).
//!
//! The model is a reader, not a judge: told the problems of its answer, it fixes them; told only
//! that the answer was not valid, it tries again and meets the fault rate afresh. Each answer's
//! fault is a pure function of the seed, the task and the try, so every strategy meets the same
//! faults at the same places.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_errors::run::{Json, OutputPolicy};
use agent_errors::testing::{Reply, ScriptedModel};
use agent_errors::{AgentBuilder, ChatRequest, ChatResponse, Message, RunError, RunOptions};

/// The fault rates of the mix's table.
pub(crate) const RATES: [f64; 3] = [0.2, 0.5, 0.8];

/// The most answers one run may ask for: enough for every strategy's re-asks.
const MAX_ANSWERS: usize = 8;

/// The re-asks every re-asking strategy allows.
const REASKS: u32 = 2;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // Read through serde: the fields are what the schema checks.
struct Order {
    id: String,
    customer: Customer,
    quantity: u32,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Customer {
    name: String,
    address: Address,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Address {
    city: String,
    zip: u32,
}

/// How an answer is bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    MissingField,
    DeepWrongType,
    ProseAround,
}

/// What a strategy does with a bad final answer, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reask {
    /// The first bad answer ends the run (`OutputPolicy::retry(0)`: the library before re-asks).
    Never,
    /// The caller's own loop: on `InvalidOutput`, "that was not valid, answer again", twice.
    Generic,
    /// The library's output policy: the problems shown, with their paths, twice.
    WithProblems,
}

impl Reask {
    const EVERY: [Reask; 3] = [Reask::Never, Reask::Generic, Reask::WithProblems];

    fn name(self) -> &'static str {
        match self {
            Reask::Never => "no re-ask (InvalidOutput)",
            Reask::Generic => "generic re-ask x2 (caller's loop)",
            Reask::WithProblems => "library: problems shown, retry(2)",
        }
    }
}

/// One task's answers: the correct one, and how each try goes wrong (if it does).
struct Script {
    task: u64,
    seed: u64,
    rate: f64,
}

impl Script {
    fn correct(&self) -> String {
        let n = self.task;
        format!(
            r#"{{"id": "o-{n}", "customer": {{"name": "Ada {n}", "address": {{"city": "Oslo", "zip": {zip}}}}}, "quantity": {q}}}"#,
            zip = 100 + n % 900,
            q = 1 + n % 9
        )
    }

    /// The fault of try `try_index` (0-based), drawn from the seed, the task and the try alone.
    fn fault(&self, try_index: u64) -> Option<Fault> {
        let mut rng = fastrand::Rng::with_seed(
            self.seed ^ self.task.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (try_index << 48),
        );
        if rng.f64() >= self.rate {
            return None;
        }
        Some(match rng.u8(0..3) {
            0 => Fault::MissingField,
            1 => Fault::DeepWrongType,
            _ => Fault::ProseAround,
        })
    }

    fn answer(&self, fault: Option<Fault>) -> String {
        let correct = self.correct();
        match fault {
            None => correct,
            Some(Fault::MissingField) => {
                correct.replacen(&format!(r#""id": "o-{}", "#, self.task), "", 1)
            }
            Some(Fault::DeepWrongType) => {
                let zip = 100 + self.task % 900;
                correct.replacen(
                    &format!(r#""zip": {zip}"#),
                    &format!(r#""zip": "0{zip}""#),
                    1,
                )
            }
            Some(Fault::ProseAround) => {
                format!("Here is the order you asked for: {correct} Let me know!")
            }
        }
    }
}

/// The model of one run: answers by the script; told its answer's problems, it fixes them; told
/// only that it was not valid, it tries again under the fault rate. Counts its calls and tokens.
struct Counted {
    model: ScriptedModel,
    calls: Arc<AtomicU64>,
    tokens: Arc<AtomicU64>,
}

fn model(script: Arc<Script>) -> Counted {
    let model = ScriptedModel::named("extractor");
    let calls = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(AtomicU64::new(0));
    for _ in 0..MAX_ANSWERS {
        let (script, calls, tokens) = (script.clone(), calls.clone(), tokens.clone());
        model.push(Reply::computed(move |request| {
            let try_index = calls.fetch_add(1, Ordering::Relaxed);
            let told = last_user(request);
            let fault = match told.starts_with("Your answer does not fit") {
                true => None,
                false => script.fault(try_index),
            };
            let answer = script.answer(fault);
            let used = tokens_of(request) + (answer.len() / 4) as u64 + 8;
            tokens.fetch_add(used, Ordering::Relaxed);
            Ok(ChatResponse::text(answer))
        }));
    }
    Counted {
        model,
        calls,
        tokens,
    }
}

fn last_user(request: &ChatRequest) -> &str {
    let last = request.messages.iter().rev().find_map(|m| match m {
        Message::User { content } => Some(content.as_str()),
        _ => None,
    });
    last.unwrap_or_default()
}

/// About four characters a token, as the rest of the benchmark counts.
fn tokens_of(request: &ChatRequest) -> u64 {
    let chars: usize = (request.messages.iter())
        .map(|m| match m {
            Message::System { content } | Message::User { content } => content.len(),
            Message::Assistant { content, .. } => content.as_ref().map_or(0, String::len),
            _ => 0,
        })
        .sum();
    let schema = request
        .options
        .response_format
        .as_ref()
        .map_or(0, |f| format!("{f:?}").len());
    ((chars + schema) / 4) as u64 + 8
}

/// One run of `strategy` on `script`: whether it ended with the order, its calls and tokens.
async fn run(strategy: Reask, script: Arc<Script>) -> (bool, u64, u64) {
    let counted = model(script);
    let policy = match strategy {
        Reask::WithProblems => OutputPolicy::retry(REASKS),
        _ => OutputPolicy::retry(0),
    };
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(counted.model.clone())
        .output_policy(policy)
        .build()
        .expect("a valid agent");
    let prompt = "Extract the order from the customer's email.";
    let mut history = vec![Message::user(prompt)];
    let mut reasks = 0;
    let ok = loop {
        let outcome = agent
            .run_conversation(history.clone(), RunOptions::default())
            .await;
        match outcome.result {
            Ok(_) => break true,
            Err(RunError::InvalidOutput { .. })
                if strategy == Reask::Generic && reasks < REASKS =>
            {
                reasks += 1;
                history = outcome.transcript;
                history.push(Message::user(
                    "That answer was not valid for the required format. Answer again.",
                ));
            }
            Err(_) => break false,
        }
    };
    let calls = counted.calls.load(Ordering::Relaxed);
    (ok, calls, counted.tokens.load(Ordering::Relaxed))
}

/// The mix's table: success, model calls and tokens per task, per strategy and rate.
pub(crate) fn table(seed: u64, runs: u64) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let mut out = String::from(
        "### Mix: bad structured answers (missing fields, wrong types deep in the structure, \
         prose around the JSON)\n\n\
         | rate | strategy | success | model calls / task | tokens / task |\n\
         | ---: | --- | ---: | ---: | ---: |\n",
    );
    for rate in RATES {
        for strategy in Reask::EVERY {
            let (mut ok, mut calls, mut tokens) = (0u64, 0u64, 0u64);
            for task in 0..runs {
                let script = Arc::new(Script { task, seed, rate });
                let (done, c, t) = runtime.block_on(run(strategy, script));
                ok += u64::from(done);
                calls += c;
                tokens += t;
            }
            let per = |n: u64| n as f64 / runs as f64;
            let _ = writeln!(
                out,
                "| {:.0}% | {} | {:.1}% | {:.2} | {:.0} |",
                rate * 100.0,
                strategy.name(),
                100.0 * per(ok),
                per(calls),
                per(tokens)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_is_a_bad_answer_and_the_correct_one_is_good() {
        let script = Script {
            task: 7,
            seed: 1,
            rate: 1.0,
        };
        let good: Result<Order, _> = serde_json::from_str(&script.correct());
        assert!(good.is_ok());
        for fault in [
            Fault::MissingField,
            Fault::DeepWrongType,
            Fault::ProseAround,
        ] {
            let bad: Result<Order, _> = serde_json::from_str(&script.answer(Some(fault)));
            assert!(bad.is_err(), "{fault:?}");
        }
    }

    #[test]
    fn showing_the_problems_recovers_more_than_a_generic_re_ask() {
        let table = table(1, 60);
        let success = |strategy: Reask, rate: &str| -> f64 {
            let row = (table.lines())
                .find(|l| l.starts_with(&format!("| {rate} | {}", strategy.name())))
                .expect("a row");
            let cell = row.split('|').nth(3).expect("a success cell");
            cell.trim().trim_end_matches('%').parse().expect("a number")
        };
        assert!(success(Reask::WithProblems, "50%") > success(Reask::Generic, "50%"));
        assert!(success(Reask::Generic, "50%") > success(Reask::Never, "50%"));
        assert_eq!(success(Reask::WithProblems, "20%"), 100.0);
    }
}

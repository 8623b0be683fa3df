//! The fault mixes and the seeded plan that says, for one task run, which fault hits where.
//!
//! Every decision is a pure function of the seed, the task instance and the place it is asked
//! about (a step, a tool's n-th call, a transcript's length), never of how many random numbers
//! were drawn before: a strategy that makes more calls meets the same fault at the same place
//! as one that makes fewer.

use std::time::Duration;

use agent_errors::HttpError;
use agent_errors::testing::Fault;

/// A planted credential: every failure text carries one, so a leak to the model is visible.
pub(crate) const CANARY: &str = "sk-proj-Zq8xW3vB7nK2mP9tR4yL6cH1dF5gJ0aQ";

/// The part of [`CANARY`] that counts as a leak when a model request contains it.
pub(crate) const CANARY_CORE: &str = "Zq8xW3vB7nK2mP9t";

/// The model's habit of pushing on with a made-up value instead of stopping at a failure it
/// cannot get past: the same for every strategy and every fault mix.
pub(crate) const GUESS_RATE: f64 = 0.3;

/// A family of faults, injected at one rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Mix {
    /// Tool timeouts (504), 503s and 429s with `Retry-After`; writes whose answer is lost
    /// after they took effect.
    Transient,
    /// Malformed or wrongly typed arguments from the model.
    BadArgs,
    /// 401, 404 and 400: the same request fails the same way every time.
    Permanent,
    /// Model calls answered 529, 503 or 429.
    ModelOverload,
    /// Model answers cut off mid-stream.
    StreamCut,
    /// The primary model down for the whole task: only a fallback model gets through.
    ProviderOutage,
    /// One tool's service down for the whole task.
    ServiceDown,
    /// The process dies mid-run (after a tool's effect, before its answer is recorded).
    Crash,
    /// Every family above at once, each at the rate.
    All,
}

impl Mix {
    /// Every mix, in table order.
    pub(crate) const EVERY: [Mix; 9] = [
        Mix::Transient,
        Mix::BadArgs,
        Mix::Permanent,
        Mix::ModelOverload,
        Mix::StreamCut,
        Mix::ProviderOutage,
        Mix::ServiceDown,
        Mix::Crash,
        Mix::All,
    ];

    /// A short name for tables and plots.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Mix::Transient => "transient tool failures",
            Mix::BadArgs => "bad arguments",
            Mix::Permanent => "permanent tool failures",
            Mix::ModelOverload => "model overload and rate limits",
            Mix::StreamCut => "streams cut mid-answer",
            Mix::ProviderOutage => "provider outage",
            Mix::ServiceDown => "a service that stays down",
            Mix::Crash => "crash mid-run",
            Mix::All => "everything at once",
        }
    }

    fn includes(self, family: Mix) -> bool {
        self == family || self == Mix::All
    }
}

/// The fault rates every mix is run at.
pub(crate) const RATES: [f64; 4] = [0.0, 0.05, 0.20, 0.50];

/// A permanent failure planted on one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permanent {
    /// 401: the credential is no good.
    Unauthorized,
    /// 404: the thing asked for does not exist.
    NotFound,
    /// 400: the service refuses the request.
    InvalidRequest,
}

impl Permanent {
    pub(crate) fn error(self) -> HttpError {
        match self {
            Permanent::Unauthorized => HttpError::new(
                401,
                format!("Unauthorized: token rejected (Authorization: Bearer {CANARY})"),
            ),
            Permanent::NotFound => HttpError::new(
                404,
                format!("Not Found: GET https://api.internal/v2/records?api_key={CANARY}"),
            ),
            Permanent::InvalidRequest => HttpError::new(
                400,
                format!("invalid request: field rejected by upstream (x-api-key: {CANARY})"),
            ),
        }
    }
}

/// What a failed model call answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModelFault {
    Overloaded,
    Unavailable,
    RateLimited,
}

impl ModelFault {
    pub(crate) fn error(self) -> HttpError {
        match self {
            ModelFault::Overloaded => HttpError::new(529, "overloaded_error: Overloaded"),
            ModelFault::Unavailable => HttpError::new(503, "service unavailable"),
            ModelFault::RateLimited => {
                HttpError::new(429, "rate_limit_error").with_header("retry-after", "2")
            }
        }
    }
}

/// One task run's faults: the seed, which run of which task, the mix and its rate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FaultPlan {
    pub(crate) seed: u64,
    pub(crate) instance: u64,
    pub(crate) mix: Mix,
    pub(crate) rate: f64,
}

/// How many of a tool's calls get a planned fault; later calls run clean.
const PLANNED_CALLS: u64 = 24;

// What each question is about, so two questions never share their dice.
const ABOUT_TOOL_CALL: u64 = 1;
const ABOUT_PERMANENT: u64 = 2;
const ABOUT_ACK_LOST: u64 = 3;
const ABOUT_BAD_ARGS: u64 = 4;
const ABOUT_MODEL: u64 = 5;
const ABOUT_STREAM: u64 = 6;
const ABOUT_OUTAGE: u64 = 7;
const ABOUT_DOWN: u64 = 8;
const ABOUT_CRASH: u64 = 9;
const ABOUT_GUESS: u64 = 10;
const ABOUT_KIND: u64 = 11;

impl FaultPlan {
    /// A plan with no faults at all.
    #[cfg(test)]
    pub(crate) fn clean(seed: u64, instance: u64) -> Self {
        FaultPlan {
            seed,
            instance,
            mix: Mix::Transient,
            rate: 0.0,
        }
    }

    fn dice(&self, parts: &[u64]) -> fastrand::Rng {
        let mut h = splitmix(self.seed ^ splitmix(self.instance));
        for part in parts {
            h = splitmix(h ^ part);
        }
        fastrand::Rng::with_seed(h)
    }

    fn roll(&self, family: Mix, parts: &[u64]) -> bool {
        self.mix.includes(family) && self.rate > 0.0 && self.dice(parts).f64() < self.rate
    }

    fn pick(&self, parts: &[u64], n: usize) -> usize {
        self.dice(parts).usize(..n)
    }

    /// The faults queued on a tool's first calls (transient mix): a clean call is a zero delay.
    pub(crate) fn tool_faults(&self, tool: &str) -> Vec<Fault> {
        let tool_id = text_id(tool);
        (0..PLANNED_CALLS)
            .map(|n| {
                if !self.roll(Mix::Transient, &[ABOUT_TOOL_CALL, tool_id, n]) {
                    return Fault::Delay(Duration::ZERO);
                }
                match self.pick(&[ABOUT_KIND, tool_id, n], 3) {
                    0 => Fault::error(|| {
                        HttpError::new(
                            504,
                            format!("gateway timeout calling https://svc.internal/?token={CANARY}"),
                        )
                    }),
                    1 => Fault::error(|| {
                        HttpError::new(
                            503,
                            format!("upstream busy (Authorization: Bearer {CANARY})"),
                        )
                    }),
                    _ => Fault::error(|| {
                        HttpError::new(429, format!("slow down, key {CANARY} is over its rate"))
                            .with_header("retry-after", "3")
                    }),
                }
            })
            .collect()
    }

    /// A permanent failure planted on a step (permanent mix).
    pub(crate) fn permanent(&self, step: usize) -> Option<Permanent> {
        let step = step as u64;
        self.roll(Mix::Permanent, &[ABOUT_PERMANENT, step])
            .then(
                || match self.pick(&[ABOUT_KIND, ABOUT_PERMANENT, step], 3) {
                    0 => Permanent::Unauthorized,
                    1 => Permanent::NotFound,
                    _ => Permanent::InvalidRequest,
                },
            )
    }

    /// Whether the n-th call of a write that got through loses its answer after taking effect
    /// (transient mix): a gateway timeout, one of the three transient kinds, so at a third of
    /// the rate.
    pub(crate) fn ack_lost(&self, step: usize, nth_call: u32) -> bool {
        self.mix.includes(Mix::Transient)
            && self
                .dice(&[ABOUT_ACK_LOST, step as u64, u64::from(nth_call)])
                .f64()
                < self.rate / 3.0
    }

    /// Whether the model's first try at a step sends broken arguments (bad-arguments mix).
    pub(crate) fn bad_args(&self, step: usize) -> bool {
        self.roll(Mix::BadArgs, &[ABOUT_BAD_ARGS, step as u64])
    }

    /// Whether the model call at this place fails, and how (model-overload mix). `place` is the
    /// request's length; `repeat` counts the calls made with a request of that length.
    pub(crate) fn model_fault(&self, place: usize, repeat: u32) -> Option<ModelFault> {
        let parts = [ABOUT_MODEL, place as u64, u64::from(repeat)];
        self.roll(Mix::ModelOverload, &parts).then(|| {
            match self.pick(
                &[ABOUT_KIND, ABOUT_MODEL, place as u64, u64::from(repeat)],
                3,
            ) {
                0 => ModelFault::Overloaded,
                1 => ModelFault::Unavailable,
                _ => ModelFault::RateLimited,
            }
        })
    }

    /// Whether the model's answer at this place is cut off mid-stream (stream mix).
    pub(crate) fn stream_cut(&self, place: usize, repeat: u32) -> bool {
        self.roll(
            Mix::StreamCut,
            &[ABOUT_STREAM, place as u64, u64::from(repeat)],
        )
    }

    /// Whether the primary model is down for this whole task (provider-outage mix).
    pub(crate) fn provider_down(&self) -> bool {
        self.roll(Mix::ProviderOutage, &[ABOUT_OUTAGE])
    }

    /// The step whose service is down for this whole task, if any (service-down mix).
    pub(crate) fn service_down(&self, steps: usize) -> Option<usize> {
        self.roll(Mix::ServiceDown, &[ABOUT_DOWN])
            .then(|| self.pick(&[ABOUT_KIND, ABOUT_DOWN], steps))
    }

    /// The step during which the process dies, if any (crash mix).
    pub(crate) fn crash_step(&self, steps: usize) -> Option<usize> {
        self.roll(Mix::Crash, &[ABOUT_CRASH])
            .then(|| self.pick(&[ABOUT_KIND, ABOUT_CRASH], steps))
    }

    /// Whether the model pushes on past a failure at this step with a made-up value.
    pub(crate) fn guesses(&self, step: usize) -> bool {
        self.dice(&[ABOUT_GUESS, step as u64]).f64() < GUESS_RATE
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn text_id(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

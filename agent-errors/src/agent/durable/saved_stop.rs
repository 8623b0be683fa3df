//! A stop a call's answer carried, as a checkpoint saves it: a resumed run that finds the
//! answer ends the way the original run would have.

use serde::{Deserialize, Serialize};

use crate::agent::RunError;
use crate::classify::ErrorKind;
use crate::error::Severity;
use crate::executor::{Terminated, TerminationReason};

/// A stop a call's answer carried, saved so a resumed run ends the way the original would have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::agent) enum SavedStop {
    Terminated {
        tool: String,
        kind: ErrorKind,
        reason: SavedReason,
    },
    BreakerTripped {
        tool: String,
        failures: u32,
    },
    Escalated {
        reason: String,
        severity: Severity,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::agent) enum SavedReason {
    Auth,
    RetriesExhausted { attempts: u32 },
    CircuitOpen,
    BreakerTripped { failures: u32 },
    Thrown(String),
    PermissionDenials { denials: u32 },
}

impl SavedStop {
    pub(in crate::agent) fn of(error: &RunError) -> Option<SavedStop> {
        Some(match error {
            RunError::Terminated(t) => SavedStop::Terminated {
                tool: t.tool.clone(),
                kind: t.kind,
                reason: match &t.reason {
                    TerminationReason::Auth => SavedReason::Auth,
                    TerminationReason::RetriesExhausted { attempts } => {
                        SavedReason::RetriesExhausted {
                            attempts: *attempts,
                        }
                    }
                    TerminationReason::CircuitOpen => SavedReason::CircuitOpen,
                    TerminationReason::BreakerTripped { failures } => SavedReason::BreakerTripped {
                        failures: *failures,
                    },
                    TerminationReason::Thrown(reason) => {
                        SavedReason::Thrown(crate::redact::redact(reason).into_owned())
                    }
                    TerminationReason::PermissionDenials { denials } => {
                        SavedReason::PermissionDenials { denials: *denials }
                    }
                    // A call that waits is saved as waiting, never as answered.
                    TerminationReason::WaitingForPerson(_) => return None,
                },
            },
            RunError::BreakerTripped { tool, failures } => SavedStop::BreakerTripped {
                tool: tool.clone(),
                failures: *failures,
            },
            RunError::Escalated { reason, severity } => SavedStop::Escalated {
                reason: reason.clone(),
                severity: *severity,
            },
            _ => return None,
        })
    }

    /// The run error it stands for; the original tool error is not saved, so it has none.
    pub(in crate::agent) fn into_error(self) -> RunError {
        match self {
            SavedStop::Terminated { tool, kind, reason } => {
                let reason = match reason {
                    SavedReason::Auth => TerminationReason::Auth,
                    SavedReason::RetriesExhausted { attempts } => {
                        TerminationReason::RetriesExhausted { attempts }
                    }
                    SavedReason::CircuitOpen => TerminationReason::CircuitOpen,
                    SavedReason::BreakerTripped { failures } => {
                        TerminationReason::BreakerTripped { failures }
                    }
                    SavedReason::Thrown(reason) => TerminationReason::Thrown(reason),
                    SavedReason::PermissionDenials { denials } => {
                        TerminationReason::PermissionDenials { denials }
                    }
                };
                RunError::Terminated(Box::new(Terminated::new(tool, kind, reason, None)))
            }
            SavedStop::BreakerTripped { tool, failures } => {
                RunError::BreakerTripped { tool, failures }
            }
            SavedStop::Escalated { reason, severity } => RunError::Escalated { reason, severity },
        }
    }
}

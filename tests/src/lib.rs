//! Integration and UI tests for agent-errors live in `tests/` and `ui/`.

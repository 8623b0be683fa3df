//! Integration and UI tests for agent-errors live in `tests/`; the UI tests of the macros in the `tests-ui` package.

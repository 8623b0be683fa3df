//! Tests of agent-errors over MCP live in `tests/`; the fault server they start in `src/bin/`.

//! Nothing to use here: the benches are the point. `benches/instructions.rs` (run by
//! `scripts/callgrind.sh`) and `benches/instruction_limits.rs` (gungraun, run by
//! `scripts/check-instructions.sh` in CI) count the hot path's instructions, in a package of its
//! own whose build turns on no tokio `test-util`, so the counts are what a user's release build
//! pays.

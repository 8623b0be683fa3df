//! The tests written against one crate-wide policy, gathered into one test binary: `defaults!`
//! belongs at the crate root, so the files that declare tools under the same defaults share this
//! root as modules.

agent_errors::defaults!(on_error(execution = retry(3)));

mod agent_sketch;
mod explain;
mod sketch;

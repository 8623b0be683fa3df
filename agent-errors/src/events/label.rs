//! Label keys of the metrics, as the GenAI conventions spell them where they name one.

pub(crate) const TOOL: &str = "gen_ai.tool.name";
pub(crate) const MODEL: &str = "gen_ai.request.model";
pub(crate) const ERROR_TYPE: &str = "error.type";
pub(crate) const LAYER: &str = "layer";
pub(crate) const ACTION: &str = "action";
pub(crate) const OUTCOME: &str = "outcome";

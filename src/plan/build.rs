//! stub
#[derive(Debug, thiserror::Error)]
#[error("plan error")]
pub struct PlanError;
pub struct BuildInput;
pub fn build(_i: BuildInput) -> Result<super::Plan, PlanError> { Err(PlanError) }

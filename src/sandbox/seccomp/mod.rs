//! seccomp: TEMPORARY placeholder with the agreed API, replaced by the seccomp branch.
use crate::policy::NetMode;
#[derive(Debug, thiserror::Error)]
#[error("seccomp: {0}")]
pub struct SeccompError(String);
pub struct SeccompOptions { pub net: NetMode, pub allow_unix_sockets: bool }
pub struct Filters;
pub fn build(_o: &SeccompOptions) -> Result<Filters, SeccompError> { Ok(Filters) }
impl Filters {
    pub fn install(&self) -> Result<(), nix::errno::Errno> { Ok(()) }
    pub fn summary(&self) -> Vec<String> { vec![] }
}
pub fn kernel_supports_seccomp() -> bool { true }

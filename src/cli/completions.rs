//! `capsule completions SHELL`: the shell completion script, on stdout.
//!
//! Install: bash `capsule completions bash > ~/.local/share/bash-completion/completions/capsule`,
//! zsh `capsule completions zsh > "${fpath[1]}/_capsule"`,
//! fish `capsule completions fish > ~/.config/fish/completions/capsule.fish`.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

pub fn run(a: CompletionsArgs) -> i32 {
    let mut cmd = super::Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "capsule", &mut std::io::stdout().lock());
    0
}

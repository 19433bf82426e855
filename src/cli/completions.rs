//! `capsule completions SHELL`: the shell completion script, on stdout.
//!
//! Install: bash `capsule completions bash > ~/.local/share/bash-completion/completions/capsule`
//! (or `source <(capsule completions bash)` in ~/.bashrc),
//! zsh `capsule completions zsh > "${fpath[1]}/_capsule"`,
//! fish `capsule completions fish > ~/.config/fish/completions/capsule.fish`.
//! The wheel installs all three under the environment's `share/`.
//!
//! Values are offered where clap knows them (`--net` modes, starter policy
//! names); bash and fish also complete the names of existing volumes after
//! `capsule volume inspect|rm` (read from the volumes directory at the time
//! of completion).

use clap::{Args, CommandFactory};
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

pub fn run(a: CompletionsArgs) -> i32 {
    let mut cmd = super::Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(a.shell, &mut cmd, "capsule", &mut out);
    let extra = match a.shell {
        Shell::Bash => BASH_VOLUMES,
        Shell::Fish => FISH_VOLUMES,
        _ => "",
    };
    use std::io::Write;
    let _ = out.write_all(extra.as_bytes());
    0
}

/// Volume names after `capsule volume inspect|rm`, then clap's completion.
const BASH_VOLUMES: &str = r#"
# capsule: volume names for `capsule volume inspect|rm`
_capsule_volumes() {
    local cur="${COMP_WORDS[COMP_CWORD]}"
    if [[ "${COMP_WORDS[1]}" == volume && ( "${COMP_WORDS[2]}" == inspect || "${COMP_WORDS[2]}" == rm ) \
          && $COMP_CWORD -gt 2 && "$cur" != -* ]]; then
        local dir="${XDG_DATA_HOME:-$HOME/.local/share}/capsule/volumes"
        COMPREPLY=($(compgen -W "$(command ls -1 "$dir" 2>/dev/null)" -- "$cur"))
        return 0
    fi
    _capsule "$@"
}
complete -F _capsule_volumes -o bashdefault -o default capsule
"#;

const FISH_VOLUMES: &str = r#"
# capsule: volume names for `capsule volume inspect|rm`
complete -c capsule -n "__fish_seen_subcommand_from volume; and __fish_seen_subcommand_from inspect rm" -f -a "(command ls (set -q XDG_DATA_HOME; and echo \$XDG_DATA_HOME; or echo \$HOME/.local/share)/capsule/volumes 2>/dev/null)"
"#;

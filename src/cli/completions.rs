//! `capsule completions SHELL`: the shell completion script, on stdout.
//!
//! Install: bash `capsule completions bash > ~/.local/share/bash-completion/completions/capsule`
//! (or `source <(capsule completions bash)` in ~/.bashrc),
//! zsh `capsule completions zsh > "${fpath[1]}/_capsule"`,
//! fish `capsule completions fish > ~/.config/fish/completions/capsule.fish`.
//! The wheel installs all three under the environment's `share/`.
//!
//! Values are offered where clap knows them (`--net` modes, starter policy
//! names); bash, zsh and fish also complete the names of existing volumes after
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
    use std::io::Write;
    let mut cmd = super::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "capsule", &mut script);
    let mut script = String::from_utf8_lossy(&script).into_owned();
    match a.shell {
        Shell::Bash => script.push_str(BASH_VOLUMES),
        Shell::Fish => script.push_str(FISH_VOLUMES),
        // The NAME arguments of `volume inspect|rm|remove` are the only
        // `names`; the helper goes after the #compdef line.
        Shell::Zsh => {
            script = script.replace("'*::names:_default'", "'*::names:_capsule_volume_names'");
            if let Some(i) = script.find('\n') {
                script.insert_str(i + 1, ZSH_VOLUMES);
            }
        }
        _ => {}
    }
    let _ = std::io::stdout().lock().write_all(script.as_bytes());
    0
}

/// Volume names after `capsule volume inspect|rm`, then clap's completion.
const BASH_VOLUMES: &str = r#"
# capsule: volume names for `capsule volume inspect|rm`
_capsule_volumes() {
    local cur="${COMP_WORDS[COMP_CWORD]}"
    if [[ "${COMP_WORDS[1]}" == volume && ( "${COMP_WORDS[2]}" == inspect || "${COMP_WORDS[2]}" == rm || "${COMP_WORDS[2]}" == remove ) \
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
complete -c capsule -n "__fish_seen_subcommand_from volume; and __fish_seen_subcommand_from inspect rm remove" -f -a "(command ls (set -q XDG_DATA_HOME; and echo \$XDG_DATA_HOME; or echo \$HOME/.local/share)/capsule/volumes 2>/dev/null)"
"#;

const ZSH_VOLUMES: &str = r#"
# capsule: volume names for `capsule volume inspect|rm`
(( $+functions[_capsule_volume_names] )) ||
_capsule_volume_names() {
    local dir="${XDG_DATA_HOME:-$HOME/.local/share}/capsule/volumes"
    local -a names
    names=("$dir"/*(N:t))
    compadd -a names
}
"#;

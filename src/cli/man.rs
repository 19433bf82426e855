//! `capsule man`: the man page (roff) on stdout, or with `--dir DIR` one page
//! per command (capsule.1, capsule-exec.1, ...) written into DIR.
//!
//! Read it with `capsule man | man -l -`.

use std::path::PathBuf;

use clap::{Args, CommandFactory};

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write capsule.1 and a page per subcommand (capsule-exec.1, ...) into DIR instead.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn run(a: ManArgs) -> i32 {
    let cmd = super::Cli::command();
    let done = match &a.dir {
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout().lock()),
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(cmd, dir)),
    };
    match done {
        Ok(()) => 0,
        Err(e) => {
            let place = a
                .dir
                .as_ref()
                .map_or("stdout".into(), |d| d.display().to_string());
            super::error_line(format!("man: cannot write the man page to {place}: {e}"));
            1
        }
    }
}

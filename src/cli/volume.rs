//! `capsule volume create|inspect|rm|ls`: named directories capsule owns
//! (src/volume.rs), with the arguments, output and exit statuses of
//! `docker volume`, so callers written for a container runtime keep working:
//! `create` is idempotent and prints the name, `inspect` prints a JSON list
//! and exits 1 if any name is missing, `rm` of a missing volume exits 1 unless
//! `-f`.

use std::collections::BTreeMap;

use clap::Subcommand;

use crate::volume::{self, VolumeError, VolumeInfo};

/// Exit status of a failed volume command (docker's).
const FAILED: i32 = 1;

#[derive(Debug, Subcommand)]
pub enum VolumeCmd {
    /// Create a volume (kept as it is if it exists) and print its name.
    Create {
        /// Volume name, [a-zA-Z0-9][a-zA-Z0-9_.-]* (default: a generated one).
        name: Option<String>,
        /// Set a label, KEY=VALUE (repeatable).
        #[arg(short, long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// Volume driver: only "local" exists.
        #[arg(short, long, default_value = "local")]
        driver: String,
    },
    /// Print volumes as a JSON list, like `docker volume inspect` (exit 1 if any is missing).
    Inspect {
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
        /// `json`, or a template with {{.Name}}, {{.Mountpoint}}, {{.Driver}}, {{.CreatedAt}}, {{.Scope}}.
        #[arg(short, long)]
        format: Option<String>,
    },
    /// Remove volumes and everything in them (symlinks inside are never followed).
    #[command(visible_alias = "remove")]
    Rm {
        /// Succeed when a volume does not exist.
        #[arg(short, long)]
        force: bool,
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
    },
    /// List volumes.
    #[command(visible_alias = "list")]
    Ls {
        /// Only print the names.
        #[arg(short, long)]
        quiet: bool,
        /// `table` (default), `json` (one object a line), or a template as for inspect.
        #[arg(long)]
        format: Option<String>,
    },
}

pub fn run(cmd: VolumeCmd) -> i32 {
    match cmd {
        VolumeCmd::Create {
            name,
            labels,
            driver,
        } => create(name, &labels, &driver),
        VolumeCmd::Inspect { names, format } => inspect(&names, format.as_deref()),
        VolumeCmd::Rm { force, names } => rm(&names, force),
        VolumeCmd::Ls { quiet, format } => ls(quiet, format.as_deref()),
    }
}

fn fail(e: &VolumeError) -> i32 {
    super::error_line(e);
    FAILED
}

fn create(name: Option<String>, labels: &[String], driver: &str) -> i32 {
    if driver != "local" {
        super::error_line(format!(
            "volume driver {driver:?} is not supported (capsule has only \"local\")"
        ));
        return FAILED;
    }
    let mut map = BTreeMap::new();
    for l in labels {
        let (k, v) = l.split_once('=').unwrap_or((l.as_str(), ""));
        if k.is_empty() {
            super::error_line(format!("label {l:?}: expected KEY=VALUE"));
            return FAILED;
        }
        map.insert(k.to_string(), v.to_string());
    }
    let name = name.unwrap_or_else(|| ulid::Ulid::new().to_string().to_lowercase());
    match volume::create(&name, &map) {
        Ok(_) => {
            println!("{name}");
            0
        }
        Err(e) => fail(&e),
    }
}

fn inspect(names: &[String], format: Option<&str>) -> i32 {
    let mut found = vec![];
    let mut status = 0;
    for n in names {
        match volume::inspect(n) {
            Ok(v) => found.push(v),
            Err(e) => status = fail(&e),
        }
    }
    match format {
        None => {
            let text = serde_json::to_string_pretty(&found).unwrap_or_else(|_| "[]".into());
            println!("{text}");
        }
        Some(f) => {
            for v in &found {
                println!("{}", render(f, v));
            }
        }
    }
    status
}

fn rm(names: &[String], force: bool) -> i32 {
    let mut status = 0;
    for n in names {
        match volume::remove(n) {
            Ok(()) => println!("{n}"),
            Err(VolumeError::NotFound(_)) if force => {}
            Err(e) => status = fail(&e),
        }
    }
    status
}

fn ls(quiet: bool, format: Option<&str>) -> i32 {
    let all = match volume::list() {
        Ok(v) => v,
        Err(e) => return fail(&e),
    };
    match (quiet, format) {
        (true, _) => all.iter().for_each(|v| println!("{}", v.name)),
        (false, None | Some("table")) => {
            println!("{:<16}VOLUME NAME", "DRIVER");
            for v in &all {
                println!("{:<16}{}", v.driver, v.name);
            }
        }
        (false, Some(f)) => all.iter().for_each(|v| println!("{}", render(f, v))),
    }
    0
}

/// `json`, or a docker-style template (the fields only, no functions).
fn render(format: &str, v: &VolumeInfo) -> String {
    let f = format.trim();
    if f == "json" || f == "{{json .}}" {
        return serde_json::to_string(v).unwrap_or_default();
    }
    let labels = v
        .labels
        .iter()
        .map(|(k, val)| format!("{k}={val}"))
        .collect::<Vec<_>>()
        .join(",");
    let fields = [
        ("Name", v.name.clone()),
        ("Mountpoint", v.mountpoint.display().to_string()),
        ("Driver", v.driver.to_string()),
        ("CreatedAt", v.created_at.clone()),
        ("Scope", v.scope.to_string()),
        ("Labels", labels),
    ];
    let mut out = format.replace("\\t", "\t").replace("\\n", "\n");
    for (k, val) in fields {
        for pat in [format!("{{{{.{k}}}}}"), format!("{{{{ .{k} }}}}")] {
            out = out.replace(&pat, &val);
        }
    }
    out
}

//! `capsule check -p FILE`: validate a policy and show what this kernel enforces.

use std::path::PathBuf;

use clap::Args;

use super::report::{plan_json, print_plan};
use crate::plan::{self, build::Overrides, BuildInput};
use crate::policy;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The policy file.
    #[arg(short, long, value_name = "FILE")]
    pub policy: PathBuf,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A policy that does not even plan: the reason on stderr, and under
/// `--json` one object on stdout (`ok: false`, the reason in `problems`),
/// as `exec --json` prints a refused result.
fn refuse(json: bool, msg: String) -> i32 {
    super::error_line(&msg);
    if json {
        println!("{}", serde_json::json!({"ok": false, "problems": [msg]}));
    }
    125
}

pub fn run(a: CheckArgs) -> i32 {
    let loaded = match policy::load_file(&a.policy) {
        Ok(lp) => lp,
        Err(e) => return refuse(a.json, super::exec::policy_load_error(&e)),
    };
    let input = BuildInput {
        loaded,
        overrides: Overrides::default(),
        argv: vec![],
        best_effort: false,
        // A fresh id: the private TMPDIR check makes for a moment is per run.
        run_id: super::exec::new_run_id(),
    };
    let plan = match plan::build(input) {
        Ok(p) => p,
        Err(e) => return refuse(a.json, e.to_string()),
    };
    let k = crate::kernel::probe();
    // The same preparation `exec` runs: what it refuses, check refuses.
    let mut problems: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut limits = std::collections::BTreeMap::new();
    let mut signals = None;
    let mut view = None;
    let namespaces;
    match crate::sandbox::predict(&plan, crate::supervisor::spawn::trial) {
        Ok(p) => {
            namespaces = p.path.namespaces;
            limits = p.limits;
            view = p.view;
            signals = Some(p.signals);
            notes.extend(p.missing.iter().map(|m| format!("not enforced here: {m}")));
            notes.extend(p.limitations.iter().map(|m| format!("limitation: {m}")));
        }
        Err(e) => {
            namespaces = e.path.namespaces;
            problems.push(e.to_string())
        }
    }
    if a.json {
        let mut v = plan_json(&plan, k, view.as_ref(), namespaces);
        v["ok"] = serde_json::json!(problems.is_empty());
        v["problems"] = serde_json::json!(problems);
        v["notes"] = serde_json::json!(notes);
        v["enforcement_limits"] = serde_json::json!(limits);
        v["signals"] = serde_json::json!(signals.map(|s| s.as_str()));
        println!("{v}");
    } else {
        println!("policy {} is valid", a.policy.display());
        print_plan(&plan, k, view.as_ref(), namespaces);
        if let Some(s) = signals {
            println!("signals   {}", s.describe());
        }
        for (name, how) in &limits {
            println!("enforced  {name}: {how}");
        }
        for n in &notes {
            println!("{}", super::report::wrap_note(n));
        }
        for p in &problems {
            println!("capsule exec refuses this policy here: {p}");
        }
    }
    // The verdict's reason where every other 125 puts it, too.
    for p in &problems {
        super::error_line(format!("exec refuses this policy here: {p}"));
    }
    if problems.is_empty() {
        0
    } else {
        125
    }
}

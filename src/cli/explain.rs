//! `capsule exec --explain`: after the run, every access the sandbox
//! refused, each answered by `why`'s Survey (the same planning as the run):
//! the file accesses the path observer saw (`guards::observer`) that the
//! Survey says are refused, and the hosts the proxy refused by name.

use serde_json::{json, Value};

use crate::guards::observer::Observer;
use crate::plan::Plan;
use crate::policy::LoadedPolicy;
use crate::result::RunResult;
use crate::why::{Answer, Survey};

/// At most this many denials are kept in the result; the rest are counted.
pub const MAX_DENIALS: usize = 64;

/// The Survey of the observed file accesses stops after this long; the
/// accesses not answered by then are counted in `not_observed`. Each answer
/// looks at the host's file system as capsule (links, ancestors), and the
/// run chose the paths: a deep directory chain in a write grant made each
/// answer walk it once per missing component, minutes after a short run.
pub const SURVEY_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// Fill `r.denials` and `r.explain`.
pub fn explain(
    plan: &Plan,
    loaded: &LoadedPolicy,
    cli_hosts: usize,
    observer: Option<&Observer>,
    r: &mut RunResult,
) {
    let survey = match survey_for(plan, loaded, cli_hosts, r) {
        Ok(s) => s,
        Err(e) => {
            r.denials = Some(Vec::new());
            r.explain = Some(
                json!({"files": false, "why_not": format!("the survey: {e}"), "dropped": 0, "not_observed": 0}),
            );
            return;
        }
    };
    let mut answers: Vec<Answer> = Vec::new();
    let mut signals = Vec::new();
    let (files, why_not, not_kept) = match observer {
        Some(o) => observed(&survey, o, &mut answers, &mut signals),
        None => (false, Some("no observer".to_string()), 0),
    };
    // The proxy's refusals by name (the port is not recorded: 443 is asked).
    for host in &r.denied_hosts {
        let mut a = survey.connect(host, 443);
        if !a.allowed {
            a.question = format!("connect {host}");
            answers.push(a);
        }
    }
    brokered(&survey, r, &mut answers);
    // network.mode none: the run tried the network (its namespace's
    // counters), or asked the resolver (the observer saw /etc/resolv.conf
    // read: the one sign of a lookup where no namespace counts).
    let lookup = plan.net.mode == crate::policy::NetMode::None
        && observer.is_some_and(|o| {
            let seen = o.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.pairs
                .iter()
                .any(|(p, a)| *a == 0 && p.as_path() == std::path::Path::new("/etc/resolv.conf"))
        });
    let tried = network_attempts(r);
    if tried > 0 || lookup {
        let what = if tried > 0 {
            format!("{tried} failed attempt(s) to resolve a name or connect, counted in its network namespace")
        } else {
            "it read /etc/resolv.conf to look a name up".to_string()
        };
        answers.push(survey.network_off(&what));
    }
    // The signal guard's refusals, by the target's pid.
    for pid in &signals {
        answers.push(survey.signal(*pid));
    }
    let mut dropped = 0u64;
    let mut seen_q = std::collections::BTreeSet::new();
    answers.retain(|a| seen_q.insert(a.question.clone()));
    if answers.len() > MAX_DENIALS {
        dropped = (answers.len() - MAX_DENIALS) as u64;
        answers.truncate(MAX_DENIALS);
    }
    // The proxy's refused requests (already in `denials`) come first, each
    // with what `why` says of its request (line, reason, smallest change).
    let mut all = r.denials.take().unwrap_or_default();
    for d in all.iter_mut().filter(|d| d.get("kind").is_some()) {
        survey.explain_refusal(d);
    }
    all.extend(answers.iter().map(Answer::to_json));
    r.denials = Some(all);
    r.explain = Some(json!({
        "files": files,
        "why_not": if files { None } else { why_not },
        "dropped": dropped,
        "not_observed": not_kept,
        "name_lookup": lookup,
    }));
}

/// The failed attempts to reach the network of a run in `network.mode:
/// none` with a namespace of its own (`usage.network.failed_attempts`).
fn network_attempts(r: &RunResult) -> u64 {
    r.usage
        .as_ref()
        .and_then(|u| u.pointer("/network/failed_attempts"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The end-of-run line of a run in `network.mode: none` that tried to
/// reach the network (issue 39): the program itself shows a DNS failure or
/// "Connection refused", never why. Known from the run's namespace's
/// counters (`supervisor::net_counters`), or under `--explain` from the
/// resolver's read of /etc/resolv.conf; None when neither says so.
pub fn network_off_line(r: &RunResult) -> Option<String> {
    let tried = network_attempts(r);
    let lookup = r
        .explain
        .as_ref()
        .and_then(|e| e.get("name_lookup"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if tried == 0 && !lookup {
        return None;
    }
    let what = if tried > 0 {
        format!("{tried} failed attempt(s) to resolve a name or connect")
    } else {
        "a name lookup".to_string()
    };
    Some(format!(
        "the network is off (network.mode: none) and the run tried to reach it ({what}); to let it reach a host: \
         `--net proxy --allow-host HOST` (network.mode: proxy with network.allow_hosts)"
    ))
}

/// The observer's file accesses the plan refuses, answered until
/// [`SURVEY_BUDGET`] runs out, and the signals it saw; returns whether files
/// were observed, why not, and how many accesses went unanswered.
fn observed(
    survey: &Survey<'_>,
    o: &Observer,
    answers: &mut Vec<Answer>,
    signals: &mut Vec<i32>,
) -> (bool, Option<String>, u64) {
    let seen = o.seen.lock().unwrap_or_else(|p| p.into_inner());
    signals.extend(seen.signals.iter().copied());
    let until = std::time::Instant::now() + SURVEY_BUDGET;
    let accesses = seen.accesses();
    let mut unanswered = 0u64;
    for (i, (path, access, present)) in accesses.iter().enumerate() {
        if std::time::Instant::now() > until {
            unanswered = (accesses.len() - i) as u64;
            break;
        }
        let a = survey.observed(path, *access, *present);
        if !a.allowed {
            answers.push(a);
        }
    }
    (
        seen.active,
        seen.why_not.clone(),
        seen.dropped + seen.skipped + unanswered,
    )
}

/// The broker's refusals: tools not allow-listed, and models (by the host's
/// name) the policy or the host config's ceiling refused.
fn brokered(survey: &Survey<'_>, r: &RunResult, answers: &mut Vec<Answer>) {
    let usage_list = |key: &str| {
        r.usage
            .as_ref()
            .and_then(|u| u.get(key))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for t in usage_list("refused_tools").iter().filter_map(Value::as_str) {
        let a = survey.tool(t);
        if !a.allowed {
            answers.push(a);
        }
    }
    for m in usage_list("refused_models")
        .iter()
        .filter_map(Value::as_str)
    {
        let mut a = survey.model(m);
        if a.allowed {
            // The policy allows it: the host config's ceiling refused it.
            a.allowed = false;
            a.key = Some("the host config's llm ceiling".into());
            a.line = None;
            a.because = format!(
                "the policy allows {m}, but the host config's llm ceiling (enabled, allowed_models) refuses it"
            );
            a.no_change =
                Some("the policy cannot raise the host's ceiling: change the host config".into());
        }
        answers.push(a);
    }
}

/// `why`'s Survey of the path run `r` took: a pid namespace, or the
/// no-namespace path (where clone() refused them, even when the host's
/// settings allow them). `capsule learn` asks the same.
pub fn survey_for<'a>(
    plan: &'a Plan,
    loaded: &'a LoadedPolicy,
    cli_hosts: usize,
    r: &RunResult,
) -> Result<Survey<'a>, crate::sandbox::SandboxError> {
    let namespaces = r.enforcement.tree_kill == "pid-namespace";
    Survey::with_namespaces(plan, loaded, cli_hosts, namespaces)
}

/// A field of a denial as it may reach the user's terminal: the paths and
/// tool names in it are the run's bytes, so every control character (ESC,
/// BEL, CR, a newline that would forge a whole `capsule:` line) and every
/// bidirectional override is shown escaped (`\u{1b}`), never sent raw.
/// The JSON result and the audit record keep the text as it was.
pub fn shown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The denials on stderr, as `why` prints its answers.
pub fn print(denials: &[Value], info: Option<&Value>) {
    let files = info
        .and_then(|i| i.get("files"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut out = String::new();
    if denials.is_empty() {
        out.push_str("capsule: --explain: the sandbox refused nothing this run could see\n");
    } else {
        out.push_str(&format!(
            "capsule: --explain: the sandbox refused {} access(es):\n",
            denials.len()
        ));
    }
    for d in denials {
        let s = |k: &str| d.get(k).and_then(Value::as_str).map(shown);
        out.push_str(&format!(
            "{}: refused by {}\n",
            s("question").unwrap_or_default(),
            s("layer_detail").unwrap_or_default()
        ));
        if let Some(k) = s("key") {
            match d.get("line").and_then(Value::as_u64) {
                Some(l) => out.push_str(&format!("  key     {k} (line {l})\n")),
                None => out.push_str(&format!("  key     {k}\n")),
            }
        }
        if let Some(b) = s("because") {
            out.push_str(&format!("  because {b}\n"));
        }
        if let Some(c) = s("change") {
            out.push_str(&format!("  to allow {c}\n"));
        }
        if let Some(c) = s("no_change") {
            out.push_str(&format!("  no policy change allows it: {c}\n"));
        }
        // A proxy refusal's notes: the credentials its request carries or not.
        let notes = d
            .get("notes")
            .and_then(Value::as_array)
            .filter(|_| d.get("kind").is_some());
        for n in notes.into_iter().flatten().filter_map(Value::as_str) {
            out.push_str(&format!("  note    {}\n", shown(n)));
        }
    }
    if let Some(n) = info
        .and_then(|i| i.get("dropped"))
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
    {
        out.push_str(&format!("capsule: --explain: {n} more not kept\n"));
    }
    if let Some(n) = info
        .and_then(|i| i.get("not_observed"))
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
    {
        out.push_str(&format!(
            "capsule: --explain: {n} file accesses past the observer's bound were not checked\n"
        ));
    }
    if !files {
        let why = info
            .and_then(|i| i.get("why_not"))
            .and_then(Value::as_str)
            .map_or_else(|| "unknown".to_string(), shown);
        out.push_str(&format!(
            "capsule: --explain: file accesses were not observed ({why}); only the proxy's, the broker's and the signal guard's refusals are explained\n"
        ));
    }
    crate::sys::stdio::err_text(&out);
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_runs_control_characters_are_shown_escaped() {
        assert_eq!(super::shown("/a b/ü.txt"), "/a b/ü.txt");
        assert_eq!(
            super::shown("a\u{1b}]0;x\u{7}\ncapsule: y"),
            "a\\u{1b}]0;x\\u{7}\\ncapsule: y"
        );
        assert_eq!(super::shown("\u{202e}gpj.exe"), "\\u{202e}gpj.exe");
        assert_eq!(super::shown("\u{9b}2J"), "\\u{9b}2J");
    }
}

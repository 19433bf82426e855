//! `capsule learn`: from what a confined run was refused to a draft policy.
//!
//! The run itself is `exec --explain`'s (the CLI in `cli::learn` drives it):
//! the path observer records every path-taking call, `why`'s [`Survey`]
//! answers each one as the run's own planning, and a refused answer carries
//! the smallest grant that would allow it ([`Answer::grant`]). This module
//! judges those grants ([`judge`]: never `/`, `$HOME` or what holds it, a
//! credential store, an /etc secret, /proc or /sys wholesale, anything the
//! policy validation refuses), collapses them to sensible directories
//! ([`collapse`]) and writes the draft YAML with a comment on each grant
//! ([`render`]).
//!
//! [`Survey`]: crate::why::Survey

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::plan::credentials;
use crate::policy::validate::{self, GrantKind};
use crate::policy::{Env, Limits, LlmAccess, Mount, PathEntry, Policy, Tools};
use crate::why::{Answer, FsAccess};

/// The allowlist entry of a learning run that learnt no host yet: the proxy
/// needs one, and `.invalid` never resolves (RFC 2606). Never in a draft.
pub const PLACEHOLDER_HOST: &str = "capsule-learn.invalid";

/// One access the run was refused that a grant would allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// The grant `why` proposed (canonical).
    pub path: PathBuf,
    pub kind: GrantKind,
    /// What was asked, for the grant's comment: "read by: python3 (openat /x)".
    pub why: String,
}

/// An access learn will not grant, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refused {
    /// A path, a host, a tool...
    pub what: String,
    /// read, write, exec, connect, tool, model, signal...
    pub access: String,
    pub reason: String,
}

/// One grant of the draft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub path: PathBuf,
    pub kind: GrantKind,
    /// The accesses that needed it (at most a few are shown).
    pub why: Vec<String>,
}

/// Why learn never grants `p` for `kind`, or None. `home` is the invoking
/// user's home.
pub fn never(p: &Path, kind: GrantKind, home: &Path) -> Option<String> {
    if p == Path::new("/") {
        return Some("is / (the whole host)".into());
    }
    if p == home {
        return Some("is $HOME".into());
    }
    if home.starts_with(p) {
        return Some(format!("holds $HOME ({})", home.display()));
    }
    let creds = credentials::patterns(home, &[]);
    if let Some(c) = p
        .ancestors()
        .find(|a| credentials::is_credential(&creds, a))
    {
        return Some(format!("credential store ({})", c.display()));
    }
    let secrets = credentials::system_secrets();
    if let Some(s) = p
        .ancestors()
        .find(|a| credentials::is_credential(&secrets, a))
    {
        return Some(format!("an /etc secret ({})", s.display()));
    }
    // A directory holding a credential store or a secret would be carved
    // out around it; learn still never proposes it.
    if p.is_dir() {
        if let Some(l) = credentials::existing(&creds, |x| x.starts_with(p))
            .first()
            .or(credentials::existing(&secrets, |x| x.starts_with(p)).first())
        {
            return Some(format!(
                "holds a credential store or secret ({}: {})",
                l.path.display(),
                l.what
            ));
        }
    }
    if p == Path::new("/proc") || p == Path::new("/sys") {
        return Some("is /proc or /sys wholesale".into());
    }
    if let Err(why) = validate::check_grant(p, kind) {
        return Some(format!("refused by policy validation: {why}"));
    }
    None
}

/// Whether `dir` is a place learn may widen a grant to: not `/` or a
/// top-level directory (/etc, /usr, /home, /tmp...), not the temporary
/// directory itself, not beneath /proc, /sys or /dev, nothing [`never`]
/// refuses, and not world-writable (shared scratch space).
fn widen_ok(dir: &Path, kind: GrantKind, home: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    if dir.components().count() < 3 {
        return false;
    }
    let tmp = std::env::temp_dir();
    let tmp = std::fs::canonicalize(&tmp).unwrap_or(tmp);
    if dir == tmp || ["/proc", "/sys", "/dev"].iter().any(|d| dir.starts_with(d)) {
        return false;
    }
    if std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o002 != 0) {
        return false;
    }
    never(dir, kind, home).is_none()
}

/// The judgement of one refused answer: the grant it needs, or why not (an
/// empty reason: nothing to grant and nothing to report, the path being the
/// run's own, such as its private /tmp, or gone).
/// `observed` is the path as the program named it.
pub fn judge(
    a: &Answer,
    observed: &Path,
    access: FsAccess,
    by: &str,
    home: &Path,
) -> Result<Need, Refused> {
    let refuse = |reason: String| Refused {
        what: observed.display().to_string(),
        access: access.as_str().to_string(),
        reason,
    };
    // What the program named, and what it resolves to: neither may be a
    // credential store or a secret, whatever grant `why` proposes.
    let real = std::fs::canonicalize(observed).unwrap_or_else(|_| observed.to_path_buf());
    for p in [observed, real.as_path()] {
        let kind = match access {
            FsAccess::Read => GrantKind::Read,
            FsAccess::Exec => GrantKind::Exec,
            _ => GrantKind::Write,
        };
        if let Some(why) = never(p, kind, home) {
            if p == home || why.starts_with("credential") || why.starts_with("an /etc") {
                return Err(refuse(why));
            }
        }
    }
    // What does not exist on the host is the run's own (its private /tmp)
    // or gone: nothing to grant.
    if matches!(access, FsAccess::Read | FsAccess::Exec)
        && std::fs::symlink_metadata(observed).is_err()
    {
        return Err(refuse(String::new()));
    }
    let Some((path, kind)) = a.grant.clone() else {
        let reason = a
            .no_change
            .clone()
            .unwrap_or_else(|| format!("no grant allows it: {}", a.because));
        return Err(refuse(reason));
    };
    if let Some(why) = never(&path, kind, home) {
        return Err(refuse(why));
    }
    if std::fs::symlink_metadata(&path).is_err() {
        return Err(refuse(String::new()));
    }
    Ok(Need {
        path,
        kind,
        why: format!("{} by: {by}", access.as_str()),
    })
}

/// The grants of `needs`, collapsed: reads and execs of two or more entries
/// of one directory become that directory (and two or more such
/// directories of one parent, that parent), where [`widen_ok`] allows it;
/// writes stay as narrow as observed (`why` already proposes the directory
/// for a file to be created). A grant beneath a broader one of a kind that
/// includes it is dropped.
pub fn collapse(needs: &[Need], home: &Path) -> Vec<Grant> {
    let mut by_kind: BTreeMap<u8, BTreeMap<PathBuf, Vec<String>>> = BTreeMap::new();
    for n in needs {
        let e = by_kind
            .entry(kind_code(n.kind))
            .or_default()
            .entry(n.path.clone())
            .or_default();
        if !e.contains(&n.why) {
            e.push(n.why.clone());
        }
    }
    let mut out = Vec::new();
    for (code, mut paths) in by_kind {
        let kind = kind_of(code);
        if kind != GrantKind::Write {
            for _ in 0..2 {
                paths = widen(paths, kind, home);
            }
        }
        out.extend(
            paths
                .into_iter()
                .map(|(path, why)| Grant { path, kind, why }),
        );
    }
    // Covered by a broader grant that gives at least as much.
    let covers = |a: &Grant, b: &Grant| {
        b.path.starts_with(&a.path)
            && (a.kind == b.kind
                || (b.kind == GrantKind::Read && a.kind != GrantKind::Read)
                || (a.kind == GrantKind::Write && b.kind == GrantKind::Write))
            && !(a.path == b.path && a.kind == b.kind)
    };
    // What a covered grant was needed for moves to the one that covers it.
    let all = out.clone();
    for a in out.iter_mut() {
        let moved: Vec<String> = all
            .iter()
            .filter(|b| covers(a, b))
            .flat_map(|b| b.why.clone())
            .collect();
        for w in moved {
            if !a.why.contains(&w) {
                a.why.push(w);
            }
        }
    }
    let all = out.clone();
    out.retain(|b| !all.iter().any(|a| covers(a, b)));
    out
}

/// One level of widening: the entries of a directory that holds two or more
/// become the directory.
fn widen(
    paths: BTreeMap<PathBuf, Vec<String>>,
    kind: GrantKind,
    home: &Path,
) -> BTreeMap<PathBuf, Vec<String>> {
    let mut children: BTreeMap<PathBuf, usize> = BTreeMap::new();
    for p in paths.keys() {
        if let Some(parent) = p.parent() {
            *children.entry(parent.to_path_buf()).or_default() += 1;
        }
    }
    let mut out: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    for (p, why) in paths {
        let target = match p.parent() {
            Some(d) if children.get(d).copied().unwrap_or(0) >= 2 && widen_ok(d, kind, home) => {
                d.to_path_buf()
            }
            _ => p,
        };
        let e = out.entry(target).or_default();
        for w in why {
            if !e.contains(&w) {
                e.push(w);
            }
        }
    }
    out
}

fn kind_code(k: GrantKind) -> u8 {
    match k {
        GrantKind::Read => 0,
        GrantKind::Write => 1,
        GrantKind::Exec => 2,
    }
}

fn kind_of(c: u8) -> GrantKind {
    match c {
        0 => GrantKind::Read,
        1 => GrantKind::Write,
        _ => GrantKind::Exec,
    }
}

/// Why learn never proposes the host `host` (as the proxy recorded it), or
/// None: a loopback, private (RFC 1918), carrier-grade NAT or unique-local
/// address, or `localhost`. The proxy reaches those only when a person
/// names the literal (a name resolving to one is refused as DNS rebinding):
/// a command asking for one is asking for this host's or this network's
/// internal services, which only you may list.
pub fn internal_host(host: &str) -> Option<String> {
    use crate::proxy::allow_hosts::TargetHost;
    use crate::proxy::destination::classify_ip;
    let t = TargetHost::parse(host)?;
    let what = match &t {
        TargetHost::Name(n) if n == "localhost" || n.ends_with(".localhost") => {
            "a loopback name (this host's own services)".to_string()
        }
        TargetHost::Ip(ip) if classify_ip(*ip).internal() => {
            format!("{} (an internal service)", classify_ip(*ip).describe())
        }
        _ => return None,
    };
    Some(format!(
        "{host} is {what}: the proxy reaches internal addresses only when you name the literal in \
         network.allow_hosts yourself, so learn never proposes one"
    ))
}

/// A host the run reached (or was refused) through the proxy while learning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGrant {
    pub host: String,
    pub why: String,
}

/// The widening of one `allow_hosts` map entry (a TLS-terminated host)
/// learnt from the requests the proxy refused by its rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleGrant {
    /// Its index in `network.allow_hosts`.
    pub entry: usize,
    /// Methods to add to its `methods`.
    pub methods: Vec<String>,
    /// Path patterns to add to its `paths` (the refused path itself, or with
    /// a segment a pattern cannot name made `*`, said in `why`).
    pub paths: Vec<String>,
    /// The refused requests that needed it.
    pub why: Vec<String>,
}

impl RuleGrant {
    /// Fold a refusal's smallest change (`why`'s) into the entry's grant.
    pub fn add(grants: &mut Vec<RuleGrant>, c: &crate::why::RuleChange, why: String) {
        let i = match grants.iter().position(|g| g.entry == c.entry) {
            Some(i) => i,
            None => {
                grants.push(RuleGrant {
                    entry: c.entry,
                    ..RuleGrant::default()
                });
                grants.len() - 1
            }
        };
        let g = &mut grants[i];
        if let Some(m) = c.method.as_ref().filter(|m| !g.methods.contains(m)) {
            g.methods.push(m.clone());
        }
        if let Some(p) = c.path.as_ref().filter(|p| !g.paths.contains(p)) {
            g.paths.push(p.clone());
        }
        let why = match &c.generalised {
            Some(gen) => format!("{why}; {gen}"),
            None => why,
        };
        if !g.why.contains(&why) {
            g.why.push(why);
        }
    }
}

/// What goes into the draft besides the base.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub grants: Vec<Grant>,
    pub hosts: Vec<HostGrant>,
    /// Map entries of the base widened (methods, paths).
    pub rules: Vec<RuleGrant>,
    /// Comments for the allow_hosts list: what learn will not widen
    /// (credential_misuse, budgets, ambiguous paths).
    pub net_notes: Vec<String>,
    /// The workspace learn added to the base (a write grant, commented so).
    pub workspace: Option<String>,
}

/// The base policy with relative paths made absolute (against `base_dir`),
/// so that the draft means the same wherever it is written.
pub fn absolute_base(mut p: Policy, base_dir: &Path) -> Policy {
    let abs = |e: &mut PathEntry| {
        let raw = e.raw().to_string();
        if raw.starts_with('/') || raw.starts_with('~') {
            return;
        }
        let joined = base_dir.join(&raw).display().to_string();
        *e = match e {
            PathEntry::Plain(s) if s.ends_with('?') => PathEntry::Plain(format!("{joined}?")),
            PathEntry::Plain(_) => PathEntry::Plain(joined),
            PathEntry::Detailed { optional, .. } => PathEntry::Detailed {
                path: joined,
                optional: *optional,
            },
        };
    };
    let fs = &mut p.filesystem;
    for e in fs
        .read
        .iter_mut()
        .chain(fs.write.iter_mut())
        .chain(fs.exec.iter_mut())
        .chain(fs.deny.iter_mut())
    {
        abs(e);
    }
    for m in &mut p.mounts {
        if !m.src.starts_with('/') && !m.src.starts_with('~') && !m.src.starts_with("volume:") {
            m.src = base_dir.join(&m.src).display().to_string();
        }
    }
    let rel = |f: &Path| !f.is_absolute() && !f.starts_with("~");
    if let Some(ca) = p.network.upstream_ca.as_mut().filter(|f| rel(f)) {
        *ca = base_dir.join(&*ca);
    }
    for c in &mut p.credentials {
        if let Some(f) = c.from.file.as_mut().filter(|f| rel(f)) {
            *f = base_dir.join(&*f);
        }
    }
    p
}

/// A YAML double-quoted scalar (JSON's quoting is valid YAML).
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A comment's text: one line, no control characters, bounded. The text
/// holds the run's own bytes (its process names), so every character some
/// reader takes for a line break goes too: YAML 1.1 (PyYAML, libyaml) and
/// editors break lines at U+2028 and U+2029 (U+0085 is a control), and what
/// followed would be read as policy; bidirectional overrides would make the
/// line show other than it reads.
fn comment(s: &str) -> String {
    s.chars()
        .map(|c| {
            let breaks = matches!(c, '\u{2028}' | '\u{2029}');
            let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if c.is_control() || breaks || bidi {
                ' '
            } else {
                c
            }
        })
        .take(300)
        .collect()
}

fn entry(e: &PathEntry) -> String {
    match e {
        PathEntry::Plain(s) => q(s),
        PathEntry::Detailed { path, optional } => {
            format!("{{path: {}, optional: {optional}}}", q(path))
        }
    }
}

/// The sections rendered by serde (the draft changes none of them).
#[derive(Serialize)]
struct Rest {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mounts: Vec<Mount>,
    env: Env,
    limits: Limits,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Tools>,
    #[serde(skip_serializing_if = "Option::is_none")]
    llm_access: Option<LlmAccess>,
    /// Never a value: where each is read, as the base says.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    credentials: Vec<crate::policy::egress::Credential>,
}

/// The draft's YAML: `base` (absolute paths) plus `draft`, each learnt
/// grant and host with a comment saying which access needed it. `header`
/// lines become comments at the top.
pub fn render(base: &Policy, draft: &Draft, header: &[String]) -> String {
    let mut y = String::new();
    for h in header {
        y.push_str(&format!("# {}\n", comment(h)));
    }
    y.push_str(&format!("version: {}\n", base.version));
    y.push_str("filesystem:\n");
    let fs = &base.filesystem;
    for (name, list, kind) in [
        ("read", &fs.read, Some(GrantKind::Read)),
        ("write", &fs.write, Some(GrantKind::Write)),
        ("exec", &fs.exec, Some(GrantKind::Exec)),
        ("deny", &fs.deny, None),
    ] {
        let learnt: Vec<&Grant> = draft
            .grants
            .iter()
            .filter(|g| Some(g.kind) == kind)
            .collect();
        if list.is_empty() && learnt.is_empty() {
            y.push_str(&format!("  {name}: []\n"));
            continue;
        }
        y.push_str(&format!("  {name}:\n"));
        for e in list {
            let ws = kind == Some(GrantKind::Write)
                && draft.workspace.as_deref() == Some(e.raw())
                && matches!(e, PathEntry::Plain(_));
            if ws {
                y.push_str(&format!(
                    "    - {}  # the workspace (where learn ran, or --workspace)\n",
                    entry(e)
                ));
            } else {
                y.push_str(&format!("    - {}\n", entry(e)));
            }
        }
        for g in learnt {
            let mut why: Vec<String> = g.why.iter().take(3).cloned().collect();
            if g.why.len() > 3 {
                why.push(format!("and {} more", g.why.len() - 3));
            }
            y.push_str(&format!(
                "    - {}  # {}\n",
                q(&g.path.display().to_string()),
                comment(&why.join("; "))
            ));
        }
    }
    y.push_str(&format!("  system: {}\n  tmp: {}\n", fs.system, fs.tmp));
    render_network(&mut y, base, draft);
    let rest = Rest {
        mounts: base.mounts.clone(),
        env: base.env.clone(),
        limits: base.limits.clone(),
        tools: base.tools.clone(),
        llm_access: base.llm_access.clone(),
        credentials: base.credentials.clone(),
    };
    match serde_saphyr::to_string(&rest) {
        Ok(s) => y.push_str(&s),
        // Never expected; JSON is YAML too.
        Err(_) => {
            if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(&rest) {
                for (k, v) in m {
                    y.push_str(&format!("{k}: {v}\n"));
                }
            }
        }
    }
    if !y.ends_with('\n') {
        y.push('\n');
    }
    y
}

fn render_network(y: &mut String, base: &Policy, draft: &Draft) {
    let n = &base.network;
    let mode = if draft.hosts.is_empty() || n.mode == crate::policy::NetMode::Unrestricted {
        n.mode
    } else {
        crate::policy::NetMode::Proxy
    };
    y.push_str(&format!("network:\n  mode: {}\n", mode.as_str()));
    let hosts: Vec<&HostGrant> = if mode == crate::policy::NetMode::Unrestricted {
        Vec::new()
    } else {
        draft.hosts.iter().collect()
    };
    if n.allow_hosts.is_empty() && hosts.is_empty() {
        y.push_str("  allow_hosts: []\n");
    } else {
        y.push_str("  allow_hosts:\n");
        for (i, h) in n.allow_hosts.iter().enumerate() {
            match h {
                crate::policy::egress::AllowHost::Host(h) => {
                    y.push_str(&format!("    - {}\n", q(h)))
                }
                crate::policy::egress::AllowHost::Rules(r) => map_entry(y, i, r, draft),
            }
        }
        for note in &draft.net_notes {
            y.push_str(&format!("    # {}\n", comment(note)));
        }
        for h in hosts {
            y.push_str(&format!("    - {}  # {}\n", q(&h.host), comment(&h.why)));
        }
    }
    if let Some(ca) = &n.upstream_ca {
        y.push_str(&format!(
            "  upstream_ca: {}\n",
            q(&ca.display().to_string())
        ));
    }
    y.push_str(&format!("  allow_unix_sockets: {}\n", n.allow_unix_sockets));
    if let Some(l) = n.loopback {
        y.push_str(&format!("  loopback: {l}\n"));
    }
    if let Some(m) = n.max_connections {
        y.push_str(&format!("  max_connections: {m}\n"));
    }
}

/// A map entry as a flow map (JSON is YAML), widened by what learn learnt
/// for it, with a comment saying which refused requests needed it.
fn map_entry(y: &mut String, i: usize, r: &crate::policy::egress::HostRules, draft: &Draft) {
    let mut r = r.clone();
    let learnt = draft.rules.iter().find(|g| g.entry == i);
    if let Some(g) = learnt {
        // A list left out allows any: only a list is widened.
        if let Some(m) = r.methods.as_mut() {
            m.extend(
                g.methods
                    .iter()
                    .filter(|x| !m.contains(x))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
        if let Some(p) = r.paths.as_mut() {
            p.extend(
                g.paths
                    .iter()
                    .filter(|x| !p.contains(x))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
    }
    let flow = serde_json::to_string(&r).unwrap_or_default();
    match learnt {
        Some(g) => {
            let mut added: Vec<String> = g.methods.clone();
            added.extend(g.paths.iter().map(|p| format!("path {p}")));
            let mut why: Vec<String> = g.why.iter().take(3).cloned().collect();
            if g.why.len() > 3 {
                why.push(format!("and {} more", g.why.len() - 3));
            }
            let text = format!(
                "learnt: {} (refused by the proxy: {})",
                added.join(", "),
                why.join("; ")
            );
            y.push_str(&format!("    - {flow}  # {}\n", comment(&text)));
        }
        None => y.push_str(&format!("    - {flow}\n")),
    }
}

/// The distinct refusals, in order.
pub fn dedup_refused(v: &mut Vec<Refused>) {
    let mut seen = BTreeSet::new();
    v.retain(|r| seen.insert((r.what.clone(), r.access.clone())));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(p: &str, kind: GrantKind) -> Need {
        Need {
            path: p.into(),
            kind,
            why: format!("read by: t (openat {p})"),
        }
    }

    #[test]
    fn never_the_home_its_keys_the_root_or_secrets() {
        let home = Path::new("/home/u");
        for (p, want) in [
            ("/", "is /"),
            ("/home/u", "is $HOME"),
            ("/home", "holds $HOME"),
            ("/home/u/.ssh", "credential store"),
            ("/home/u/.ssh/id_rsa", "credential store"),
            ("/home/u/.aws/credentials", "credential store"),
            ("/etc/shadow", "an /etc secret"),
            ("/proc", "is /proc"),
        ] {
            let why = never(Path::new(p), GrantKind::Read, home)
                .unwrap_or_else(|| panic!("{p} would be granted"));
            assert!(why.starts_with(want), "{p}: {why}");
        }
        assert!(never(Path::new("/etc"), GrantKind::Write, home).is_some());
        assert!(never(Path::new("/home/u/proj/data"), GrantKind::Read, home).is_none());
    }

    #[test]
    fn a_key_is_refused_whatever_grant_why_proposes() {
        let home = Path::new("/home/u");
        let a = Answer {
            grant: Some(("/home/u/.ssh/id_rsa".into(), GrantKind::Read)),
            ..Answer::default()
        };
        let r = judge(
            &a,
            Path::new("/home/u/.ssh/id_rsa"),
            FsAccess::Read,
            "cat (openat /home/u/.ssh/id_rsa)",
            home,
        )
        .expect_err("a key granted");
        assert!(r.reason.starts_with("credential store"), "{r:?}");
        // A grant proposed at $HOME itself (a file to create there).
        let a = Answer {
            grant: Some(("/home/u".into(), GrantKind::Write)),
            ..Answer::default()
        };
        let r = judge(
            &a,
            Path::new("/home/u/new.txt"),
            FsAccess::Write,
            "sh",
            home,
        )
        .expect_err("$HOME granted");
        assert_eq!(r.reason, "is $HOME");
    }

    #[test]
    fn reads_of_one_directory_collapse_writes_do_not() {
        let home = Path::new("/nonexistent-home");
        let g = collapse(
            &[
                need("/srv/proj/data/a.csv", GrantKind::Read),
                need("/srv/proj/data/b.csv", GrantKind::Read),
                need("/srv/other/one.txt", GrantKind::Read),
                need("/srv/out/x.txt", GrantKind::Write),
                need("/srv/out/y.txt", GrantKind::Write),
            ],
            home,
        );
        let shown: Vec<(String, GrantKind)> = g
            .iter()
            .map(|g| (g.path.display().to_string(), g.kind))
            .collect();
        assert!(
            shown.contains(&("/srv/proj/data".into(), GrantKind::Read)),
            "{shown:?}"
        );
        assert!(
            shown.contains(&("/srv/other/one.txt".into(), GrantKind::Read)),
            "{shown:?}"
        );
        assert!(
            shown.contains(&("/srv/out/x.txt".into(), GrantKind::Write)),
            "{shown:?}"
        );
        assert!(
            shown.contains(&("/srv/out/y.txt".into(), GrantKind::Write)),
            "{shown:?}"
        );
        // Never to a top-level directory.
        let g = collapse(
            &[
                need("/etc/a.conf", GrantKind::Read),
                need("/etc/b.conf", GrantKind::Read),
            ],
            home,
        );
        assert!(g.iter().all(|g| g.path != Path::new("/etc")), "{g:?}");
    }

    #[test]
    fn a_read_under_a_write_grant_is_dropped() {
        let g = collapse(
            &[
                need("/srv/w", GrantKind::Write),
                need("/srv/w/f", GrantKind::Read),
            ],
            Path::new("/nonexistent-home"),
        );
        assert_eq!(g.len(), 1, "{g:?}");
    }

    #[test]
    fn the_draft_parses_and_names_why() {
        let base = Policy {
            version: 1,
            ..Default::default()
        };
        let d = Draft {
            grants: vec![Grant {
                path: "/srv/data".into(),
                kind: GrantKind::Read,
                why: vec!["read by: python3 (openat /srv/data/x.csv)".into()],
            }],
            hosts: vec![HostGrant {
                host: "127.0.0.1".into(),
                why: "reached by: the command (proxy)".into(),
            }],
            workspace: None,
            ..Draft::default()
        };
        let y = render(&base, &d, &["a draft".into()]);
        assert!(
            y.contains("# read by: python3 (openat /srv/data/x.csv)"),
            "{y}"
        );
        let p = crate::policy::parse::parse_str(&y, "draft", Some(false)).expect(&y);
        assert_eq!(p.filesystem.read, vec![PathEntry::from("/srv/data")]);
        assert_eq!(p.network.allow_hosts, vec!["127.0.0.1".to_string()]);
        assert_eq!(p.network.mode, crate::policy::NetMode::Proxy);
    }

    #[test]
    fn a_widened_map_entry_parses_and_says_why() {
        let y = "version: 1\nnetwork:\n  mode: proxy\n  allow_hosts:\n    - pypi.org\n    - {host: api.github.com, methods: [GET], paths: [\"/repos/**\"]}\n";
        let base = crate::policy::parse::parse_str(y, "base", Some(false)).expect("base");
        let mut rules = Vec::new();
        let c = crate::why::RuleChange {
            entry: 1,
            method: Some("POST".into()),
            path: Some("/user".into()),
            generalised: None,
        };
        RuleGrant::add(&mut rules, &c, "POST api.github.com/user".into());
        let d = Draft {
            rules,
            net_notes: vec!["not learnt: x: credential_misuse".into()],
            ..Draft::default()
        };
        let text = render(&base, &d, &[]);
        assert!(
            text.contains(
                "# learnt: POST, path /user (refused by the proxy: POST api.github.com/user)"
            ),
            "{text}"
        );
        assert!(
            text.contains("    # not learnt: x: credential_misuse\n"),
            "{text}"
        );
        let p = crate::policy::parse::parse_str(&text, "draft", Some(false)).expect(&text);
        let r = p.network.allow_hosts[1]
            .rules()
            .expect("a map entry")
            .clone();
        assert_eq!(r.methods, Some(vec!["GET".to_string(), "POST".to_string()]));
        assert_eq!(
            r.paths,
            Some(vec!["/repos/**".to_string(), "/user".to_string()])
        );
        assert_eq!(p.network.allow_hosts[0], "pypi.org".to_string());
    }
}

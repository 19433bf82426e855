//! `capsule why`: the answer to "would the sandbox let the command do X, and
//! if not, who says no and what would change that?", from the same planning
//! `exec` does and without running anything.
//!
//! [`Survey::new`] prepares the layers exactly as `exec` would on this host
//! (`sandbox::prepare`: the Landlock rules with their carve-outs, the view,
//! the seccomp programs, the signal layer) and keeps what a question needs;
//! each `Survey::*` question then returns an [`Answer`]: the verdict, the layer
//! that decides it here, the policy key (and line) that grants or refuses it,
//! and the smallest change that would allow it, or why none can.
//!
//! The filesystem answer reads the Landlock rules `prepare` built (not the
//! policy's grants): Landlock gives a path the union of the rights of the rules
//! on it and its ancestors, so the carve-outs' expansions, dropped grants and
//! ABI masks are answered as the kernel will see them.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::kernel;
use crate::plan::{Origin, Plan};
use crate::policy::validate::{self, GrantKind};
use crate::policy::NetMode;
use crate::sandbox::landlock::{Report, RuleKind, RuleLine};
use crate::sandbox::view::ViewSummary;
use crate::sandbox::{self, SandboxError, SignalLayer};

mod request;
pub use request::{Request, RequestFacts, RuleChange};

/// A filesystem access `why` can answer for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsAccess {
    Read,
    Write,
    Exec,
    Truncate,
    Chmod,
}

impl FsAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            FsAccess::Read => "read",
            FsAccess::Write => "write",
            FsAccess::Exec => "exec",
            FsAccess::Truncate => "truncate",
            FsAccess::Chmod => "chmod",
        }
    }

    /// Whether the access changes the file (its data or its metadata).
    pub fn changes(self) -> bool {
        matches!(self, FsAccess::Write | FsAccess::Truncate | FsAccess::Chmod)
    }
}

/// One answer.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// The question, e.g. "read /etc/hosts".
    pub question: String,
    pub allowed: bool,
    /// Short id of the deciding layer: landlock, view, seccomp,
    /// truncate-guard, netns, proxy, broker, env, pid-namespace,
    /// landlock-scope, seccomp-notify, host, none.
    pub layer: &'static str,
    /// The layer in words, e.g. "Landlock ABI 6".
    pub layer_detail: String,
    /// The policy key (or flag, or built-in rule) that grants or refuses it.
    pub key: Option<String>,
    pub line: Option<usize>,
    /// Why, in one sentence.
    pub because: String,
    /// The smallest change that would allow it (when refused).
    pub change: Option<String>,
    /// Why no change to the policy can allow it (when refused).
    pub no_change: Option<String>,
    pub notes: Vec<String>,
    /// The grant `change` proposes, as data (for `capsule learn`): the
    /// path and the kind of grant. None when the change is not a grant (or
    /// when it is a credential store or a carve-out, which learn never
    /// grants).
    pub grant: Option<(PathBuf, GrantKind)>,
    /// For a request (`POST https://...`): TLS, credentials carried, and the
    /// widening of a map entry that would allow it.
    pub request: Option<RequestFacts>,
}

impl Answer {
    fn new(question: String) -> Answer {
        Answer {
            question,
            ..Answer::default()
        }
    }

    pub fn verdict(&self) -> &'static str {
        if self.allowed {
            "allowed"
        } else {
            "refused"
        }
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "question": self.question,
            "verdict": self.verdict(),
            "allowed": self.allowed,
            "layer": self.layer,
            "layer_detail": self.layer_detail,
            "key": self.key,
            "line": self.line,
            "because": self.because,
            "change": self.change,
            "no_change": self.no_change,
            "notes": self.notes,
        });
        if let Some(r) = &self.request {
            v["tls"] = json!(r.tls);
            v["credentials"] = json!(r.credentials);
        }
        v
    }

    /// Human text: a verdict line and indented details.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{}: {} by {}\n",
            self.question,
            self.verdict(),
            self.layer_detail
        );
        if let Some(k) = &self.key {
            match self.line {
                Some(l) => s.push_str(&format!("  key     {k} (line {l})\n")),
                None => s.push_str(&format!("  key     {k}\n")),
            }
        }
        s.push_str(&format!("  because {}\n", self.because));
        if let Some(c) = &self.change {
            s.push_str(&format!("  to allow {c}\n"));
        }
        if let Some(c) = &self.no_change {
            s.push_str(&format!("  no policy change allows it: {c}\n"));
        }
        if let Some(r) = &self.request {
            s.push_str(&format!("  tls     {}\n", r.tls));
            if !r.credentials.is_empty() {
                s.push_str(&format!("  carries {}\n", r.credentials.join(", ")));
            }
        }
        for n in &self.notes {
            s.push_str(&format!("  note    {n}\n"));
        }
        s
    }

    fn key_of(&mut self, origin: &Origin) {
        match origin {
            Origin::Policy { key, line } => {
                self.key = Some(key.clone());
                self.line = *line;
            }
            Origin::Cli(flag) => self.key = Some((*flag).to_string()),
            Origin::System => self.key = Some("filesystem.system".into()),
            Origin::Tmp => self.key = Some("filesystem.tmp".into()),
            Origin::Workspace => self.key = Some("--workspace".into()),
            Origin::Command(why) => self.key = Some(format!("the command ({why})")),
            Origin::Credential(_) => self.key = Some("built-in credential carve-out".into()),
            Origin::Secret(_) => self.key = Some("built-in /etc secret carve-out".into()),
            Origin::CaBundle => self.key = Some("network (the run's CA bundle)".into()),
        }
    }
}

/// A mount's source as `--mount` takes it: `volume:NAME` for one of
/// capsule's volumes (its directory there would be taken as a host path,
/// and carved out like the other volumes), else the host path.
fn mount_source(src: &Path) -> String {
    let vols = crate::volume::volumes_dir();
    let vols = std::fs::canonicalize(&vols).unwrap_or(vols);
    match (src.parent(), src.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) if dir == vols && crate::volume::validate_name(name).is_ok() => {
            format!("volume:{name}")
        }
        _ => src.display().to_string(),
    }
}

/// What `exec` would set up on this host, kept for the questions.
pub struct Survey<'a> {
    plan: &'a Plan,
    lines: &'a std::collections::BTreeMap<String, usize>,
    env_policy: &'a crate::policy::Env,
    /// How many of the plan's allow_hosts came from `--allow-host` (the last ones).
    cli_hosts: usize,
    report: Report,
    view: Option<ViewSummary>,
    signals: SignalLayer,
    netns: bool,
    own_loopback: bool,
    truncate_guard: bool,
    seccomp: bool,
    namespaces: bool,
    /// The metadata guard of the no-view path: the write grants it lets
    /// change and the carve-outs it refuses (None: no such guard).
    meta_guard: Option<(Vec<PathBuf>, Vec<PathBuf>)>,
}

/// Landlock rights, as far as `why`'s questions need them.
#[derive(Debug, Clone, Copy, Default)]
struct Rights {
    read_file: bool,
    read_dir: bool,
    write_file: bool,
    make: bool,
    exec: bool,
}

fn rights_of(rule: &RuleLine) -> Rights {
    if matches!(rule.kind, RuleKind::ListOnly { .. }) {
        return Rights {
            read_dir: true,
            ..Rights::default()
        };
    }
    let a = rule.access;
    Rights {
        read_file: a.read || a.write || a.exec,
        read_dir: a.read || a.write || a.exec,
        write_file: a.write,
        make: a.write,
        exec: a.exec,
    }
}

impl<'a> Survey<'a> {
    /// Prepare every layer for `plan` as `exec` would here (as `check` does,
    /// see `sandbox::predict`), without running anything. `Err` is the
    /// refusal `exec` would print.
    pub fn new(
        plan: &'a Plan,
        loaded: &'a crate::policy::LoadedPolicy,
        cli_hosts: usize,
    ) -> Result<Survey<'a>, SandboxError> {
        Survey::on_path(plan, loaded, cli_hosts, None)
    }

    /// As [`Survey::new`], for a run that did (or did not) get its
    /// namespaces: `exec --explain` knows which path the run took (a
    /// container may refuse the namespaces the host's settings promise).
    pub fn with_namespaces(
        plan: &'a Plan,
        loaded: &'a crate::policy::LoadedPolicy,
        cli_hosts: usize,
        namespaces: bool,
    ) -> Result<Survey<'a>, SandboxError> {
        Survey::on_path(plan, loaded, cli_hosts, Some(namespaces))
    }

    /// `namespaces`: None, the path `check` predicts; Some, that path.
    fn on_path(
        plan: &'a Plan,
        loaded: &'a crate::policy::LoadedPolicy,
        cli_hosts: usize,
        namespaces: Option<bool>,
    ) -> Result<Survey<'a>, SandboxError> {
        let port = (plan.net.mode == NetMode::Proxy).then_some(1);
        // The path `exec` lands on here (a container may refuse the
        // namespaces, or a fresh /proc), as `check` predicts it; or the one
        // the run took.
        let layers = sandbox::with_trial_tmpdir(plan, || match namespaces {
            None => sandbox::predict_path(plan, port, crate::supervisor::spawn::trial),
            Some(namespaces) => {
                let path = sandbox::RunPath {
                    namespaces,
                    bound_proc: false,
                    fallbacks: Vec::new(),
                };
                sandbox::prepare(plan, port, &path)
                    .map(|l| (l, path.clone()))
                    .map_err(|error| sandbox::Refusal { error, path })
            }
        });
        let (mut layers, path) = layers.map_err(|r| r.error)?;
        let namespaces = path.namespaces;
        layers.cgroup.remove();
        let report = layers
            .landlock
            .as_ref()
            .map(|l| l.report().clone())
            .unwrap_or_default();
        Ok(Survey {
            plan,
            lines: &loaded.lines,
            env_policy: &loaded.policy.env,
            cli_hosts,
            report,
            view: layers.view.as_ref().map(|v| v.summary.clone()),
            signals: layers.signals,
            netns: layers.netns,
            own_loopback: layers.own_loopback,
            truncate_guard: layers.truncate_guard.is_some(),
            seccomp: layers.seccomp_enforced,
            namespaces,
            // The metadata guard of the no-view path: its write grants and denies.
            meta_guard: layers
                .meta_guard
                .as_ref()
                .map(|m| (m.write.clone(), m.deny.clone())),
        })
    }

    /// The host's layers in one JSON object (the `host` of `why --json`).
    pub fn host_json(&self) -> Value {
        json!({
            "landlock_abi": self.report.abi,
            "landlock_fs": self.report.fs,
            "namespaces": self.namespaces,
            "view": self.view.is_some(),
            "seccomp": self.seccomp,
            "signals": self.signals.as_str(),
            "network": self.plan.net.mode,
            "note": self.namespaces.then_some(
                "namespaces: a throwaway trial child made them here, as check does, so these answers are for \
                 the path exec takes on this host; CAPSULE_NO_NAMESPACES=1 asks about the no-namespace path"
            ),
        })
    }

    fn landlock(&self) -> String {
        format!("Landlock ABI {}", self.report.abi)
    }

    fn line(&self, key: &str) -> Option<usize> {
        // The closest recorded ancestor, as `policy::lines::lookup`.
        let mut k = key;
        loop {
            if let Some(l) = self.lines.get(k) {
                return Some(*l);
            }
            k = &k[..k.rfind(['.', '['])?];
        }
    }

    // ---------------------------------------------------------------- files

    /// May the run do `access` on `path` (absolute; symlinks are followed as
    /// the kernel would)?
    pub fn path(&self, path: &Path, access: FsAccess) -> Answer {
        self.path_asked(path, access, Asked::Now)
    }

    /// [`Survey::path`] for an access the run made (`exec --explain`,
    /// `learn`): `present` says whether the path was there in the run's
    /// view when it asked (the path observer looks). In the run's private
    /// places (/tmp, /dev/shm) what was there is the run's own, whatever the
    /// host holds at that path; what was not there, but is on the host, is
    /// hidden by the view.
    pub fn observed(&self, path: &Path, access: FsAccess, present: bool) -> Answer {
        self.path_asked(path, access, Asked::InRun { present })
    }

    fn path_asked(&self, path: &Path, access: FsAccess, asked: Asked) -> Answer {
        // A link beneath a mount's destination is followed in the run's
        // view (an absolute target is a place of the view, `..` climbs it),
        // not on the host from the mount's source.
        if let Some(seen) = self.resolve_in_view(path) {
            let mut a = self.path_as_seen(&seen, access, asked);
            a.notes.insert(
                0,
                format!(
                    "{} is {} in the run's view (a symbolic link in a mount, followed there)",
                    path.display(),
                    seen.display()
                ),
            );
            a.question = format!("{} {}", access.as_str(), path.display());
            return a;
        }
        self.path_as_seen(path, access, asked)
    }

    /// [`Survey::path`] for a path whose links beneath mounts are followed.
    fn path_as_seen(&self, path: &Path, access: FsAccess, asked: Asked) -> Answer {
        let mut a = Answer::new(format!("{} {}", access.as_str(), path.display()));
        // Beneath a mount's destination the run reaches the mount's source:
        // judged there, by its grant (the view's own places do not apply).
        let mounted = self.through_mount(path);
        if let Some((src, b)) = &mounted {
            a.notes.push(format!(
                "{} is {} on the host: the mount of {} at {}{}",
                path.display(),
                src.display(),
                b.src.display(),
                b.dst.display(),
                if b.read_only { " (read-only)" } else { "" }
            ));
        }
        if let Some((_, b)) = mounted.as_ref().filter(|(_, b)| b.read_only) {
            if access.changes() {
                return refused_by_read_only_mount(a, b);
            }
        }
        let path = mounted.as_ref().map_or(path, |(src, _)| src.as_path());
        // A path in one of the view's private places (/tmp, /dev/shm, and
        // HOME, which is /tmp there) is judged as the view gives it, at any
        // depth, before anything of the host's is looked at: the host's
        // /tmp/x is not the run's /tmp/x (nor its links).
        if mounted.is_none() {
            if let Some(done) = self.private_place(&a, &lexical(path), access, asked) {
                return done;
            }
        }
        let (real, exists) = canonical(path);
        if real != path {
            a.notes.push(format!(
                "{} resolves to {} (the kernel checks the target)",
                path.display(),
                real.display()
            ));
        }
        let is_dir = exists && real.is_dir();
        if !exists {
            a.notes.push(format!(
                "{} does not exist now{}",
                real.display(),
                if matches!(access, FsAccess::Write) {
                    ": the question is whether it can be created"
                } else {
                    ""
                }
            ));
        }
        // The link itself must be in the run's view to be followed.
        if mounted.is_none() {
            if let Some(done) = self.link_outside_view(&a, path, &real) {
                return done;
            }
            if let Some(done) = self.view_special(&mut a, &real, access, asked) {
                return done;
            }
        }
        if access == FsAccess::Chmod {
            return self.chmod(a, &real, exists);
        }
        let t = Target {
            real: &real,
            exists,
            is_dir,
            access,
        };
        if !self.report.fs {
            return self.path_without_landlock(a, &t);
        }
        let (granted, decider) = self.rights(&real);
        a.allowed = t.wants(&granted);
        a.layer = "landlock";
        a.layer_detail = self.landlock();
        if access == FsAccess::Truncate && self.report.abi < kernel::LANDLOCK_TRUNCATE {
            return self.truncate_below_abi3(a, &real, exists);
        }
        if a.allowed {
            return self.allowed_by_landlock(a, &t, &decider);
        }
        if self.refused_by_carve_out(&mut a, &t) || self.refused_in_expanded_dir(&mut a, &t) {
            return a;
        }
        self.refused_for_want_of_grant(a, &t)
    }

    /// --best-effort without Landlock: nothing checks reads, writes only the
    /// view (its writable binds are the write grants).
    fn path_without_landlock(&self, mut a: Answer, t: &Target<'_>) -> Answer {
        let (real, exists) = (t.real, t.exists);
        if t.access == FsAccess::Truncate {
            return self.truncate_below_abi3(a, real, exists);
        }
        if t.access == FsAccess::Write && self.view.is_some() && self.write_bind(real).is_none() {
            a.allowed = false;
            a.layer = "view";
            a.layer_detail = "the read-only view of the host".into();
            a.because = "outside every write grant, the host is mounted read-only in the run's view (EROFS)".into();
            self.suggest(&mut a, real, exists, GrantKind::Write);
        } else if let Some(why) = host_refuses(real, exists, t.is_dir, t.access) {
            a.layer = "host";
            a.layer_detail = "the host's file permissions".into();
            a.because = format!("nothing in the sandbox checks it here, but {why}");
        } else {
            a.allowed = true;
            a.layer = "none";
            a.layer_detail = "no layer (no Landlock here, --best-effort)".into();
            a.because =
                "NOT ENFORCED: this kernel has no Landlock, and the run was allowed without it"
                    .into();
        }
        a
    }

    /// Landlock allows it: unless the host's permissions refuse it, the key
    /// is the deepest rule that gives the right.
    fn allowed_by_landlock(&self, mut a: Answer, t: &Target<'_>, decider: &Deciders<'_>) -> Answer {
        if let Some(why) = host_refuses(t.real, t.exists, t.is_dir, t.access) {
            a.allowed = false;
            a.layer = "host";
            a.layer_detail =
                "the host's file permissions (the run holds no capabilities, as root too)".into();
            a.because = format!("the sandbox allows it, but {why}");
            a.no_change = Some(
                "capsule cannot give a run more than the host's file permissions: change the file's mode or \
                 owner on the host"
                    .into(),
            );
            return a;
        }
        if let Some(rule) = decider.find(|r: &Rights| t.wants(r)) {
            a.key_of(&rule.origin);
            a.because = match &rule.kind {
                RuleKind::CarveOut { grant } => format!(
                    "{} ({}) gives {} beneath it, as part of the grant of {} expanded around carve-outs",
                    rule.path.display(),
                    rule.origin,
                    rule.access.label(),
                    grant.display()
                ),
                _ => format!(
                    "{} ({}) gives {} beneath it",
                    rule.path.display(),
                    rule.origin,
                    rule.access.label()
                ),
            };
        }
        a
    }

    /// Refused by a carve-out (the deepest one holding the path): its key,
    /// and the grant naming it exactly, or why none can. False: no carve-out.
    fn refused_by_carve_out(&self, a: &mut Answer, t: &Target<'_>) -> bool {
        let Some(d) = self
            .report
            .denied
            .iter()
            .filter(|d| t.real.starts_with(&d.path))
            .max_by_key(|d| d.path.components().count())
        else {
            return false;
        };
        a.key_of(&d.origin);
        let home = crate::policy::resolve::invoking_home();
        let grant_shown = shown_key(&self.report.rules, &d.grant);
        a.because = match &d.origin {
            Origin::Credential(what) => format!(
                "{} is a credential store ({what}), carved out beneath {grant_shown}",
                tilde(&d.path, &home)
            ),
            Origin::Secret(what) => format!(
                "{} is a system secret ({what}), carved out beneath {grant_shown}",
                d.path.display()
            ),
            _ => format!(
                "{} is carved out ({}) beneath {grant_shown}",
                d.path.display(),
                d.origin
            ),
        };
        match &d.origin {
            Origin::Policy { key, .. } => {
                a.change = Some(format!(
                    "remove {} from the policy's carve-outs ({key})",
                    d.path.display()
                ))
            }
            _ => {
                let k = t.kind();
                match validate::check_grant(&d.path, k) {
                    Ok(()) => {
                        a.change = Some(format!(
                            "a grant naming it exactly: filesystem.{}: [{}] (or --allow-{} {}); a broader grant never includes it",
                            k.as_str(),
                            yq(&tilde(&d.path, &home)),
                            k.as_str(),
                            shq(&d.path.display().to_string())
                        ))
                    }
                    Err(why) => a.no_change = Some(why),
                }
            }
        }
        true
    }

    /// A directory expanded around a carve-out: entries cannot be made in
    /// it directly. False: not such a directory.
    fn refused_in_expanded_dir(&self, a: &mut Answer, t: &Target<'_>) -> bool {
        let parent = t.real.parent().unwrap_or(Path::new("/"));
        if t.exists && !(t.is_dir && matches!(t.access, FsAccess::Write)) {
            return false;
        }
        let dir = if t.exists { t.real } else { parent };
        let Some(d) = self
            .report
            .denied
            .iter()
            .find(|d| dir.starts_with(&d.grant) && d.path.starts_with(dir) && d.path != dir)
        else {
            return false;
        };
        a.because = format!(
            "{} is expanded around the carve-out of {} ({}): Landlock cannot subtract, so entries \
             directly in it are reachable only when they existed at the start of the run, and nothing \
             can be created there",
            dir.display(),
            d.path.display(),
            d.origin
        );
        a.no_change = Some(format!(
            "create it in a subdirectory of {} instead, or drop the carve-out of {}",
            dir.display(),
            d.path.display()
        ));
        true
    }

    /// No grant gives the right: the deepest that gives less, a dropped
    /// grant, and the smallest grant that would allow it.
    fn refused_for_want_of_grant(&self, mut a: Answer, t: &Target<'_>) -> Answer {
        let real = t.real;
        let partial = self
            .report
            .rules
            .iter()
            .filter(|r| real.starts_with(&r.path) && r.kind != RuleKind::ProcSelf)
            .max_by_key(|r| r.path.components().count());
        match partial {
            Some(r) => {
                a.key_of(&r.origin);
                a.because = format!(
                    "{} ({}) gives only {} beneath it",
                    r.path.display(),
                    r.origin,
                    match r.kind {
                        RuleKind::ListOnly { .. } => "listing".to_string(),
                        _ => r.access.label(),
                    }
                );
            }
            None => {
                a.because = format!("no grant covers {}", real.display());
            }
        }
        if let Some(g) = self
            .report
            .dropped
            .iter()
            .find(|g| real.starts_with(&g.path))
        {
            a.notes.push(format!(
                "the grant of {} ({}) is dropped: it lies inside the carve-out of {}",
                g.path.display(),
                g.origin,
                g.deny.display()
            ));
        }
        self.suggest(&mut a, real, t.exists, t.kind());
        a
    }

    /// The union of the rights of every rule on `p` and its ancestors, and a
    /// finder for the deepest rule that gives a right.
    fn rights(&self, p: &Path) -> (Rights, Deciders<'_>) {
        let rules: Vec<&RuleLine> = self
            .report
            .rules
            .iter()
            .filter(|r| r.kind != RuleKind::ProcSelf && p.starts_with(&r.path))
            .collect();
        let mut all = Rights::default();
        for r in &rules {
            let x = rights_of(r);
            all.read_file |= x.read_file;
            all.read_dir |= x.read_dir;
            all.write_file |= x.write_file;
            all.make |= x.make;
            all.exec |= x.exec;
        }
        (all, Deciders(rules))
    }

    /// The smallest grant that would allow `kind` on `real`, or why none can.
    fn suggest(&self, a: &mut Answer, real: &Path, exists: bool, kind: GrantKind) {
        // Grants must exist: a new file needs its directory granted.
        let target = if exists {
            real.to_path_buf()
        } else {
            real.ancestors()
                .find(|p| p.exists())
                .unwrap_or(Path::new("/"))
                .to_path_buf()
        };
        let home = crate::policy::resolve::invoking_home();
        let creds = crate::plan::credentials::patterns(&home, &[]);
        if let Some(c) = real
            .ancestors()
            .find(|p| crate::plan::credentials::is_credential(&creds, p))
        {
            let shown = tilde(c, &home);
            let why = format!(
                "{shown} is a credential store: only a grant naming it exactly reaches it (a broader grant, such as \
                 ~, never includes it)"
            );
            if !c.exists() {
                a.no_change = Some(format!("{why}, and it does not exist here"));
                return;
            }
            a.change = match validate::check_grant(c, kind) {
                Ok(()) => Some(format!(
                    "a grant naming it exactly: filesystem.{}: [{}] (or --allow-{} {}); {why}",
                    kind.as_str(),
                    yq(&shown),
                    kind.as_str(),
                    shq(&c.display().to_string())
                )),
                Err(e) => {
                    a.no_change = Some(e);
                    None
                }
            };
            return;
        }
        if let Some(why) = self.host_shared(&target) {
            a.no_change = Some(why);
            return;
        }
        // Never the whole host: the nearest existing place is `/` only for
        // a path whose first component the host lacks.
        if target == Path::new("/") {
            a.no_change = Some(format!(
                "nothing on the way to {} exists on the host but / (the whole host), which capsule never \
                 proposes: create the directory first and grant it, or grant a directory of your own",
                real.display()
            ));
            return;
        }
        match validate::check_grant(&target, kind) {
            Ok(()) => {
                a.change = Some(format!(
                    "add {} to filesystem.{} (or run with --allow-{} {})",
                    yq(&target.display().to_string()),
                    kind.as_str(),
                    kind.as_str(),
                    shq(&target.display().to_string())
                ));
                a.grant = Some((target, kind));
            }
            Err(why) => a.no_change = Some(why),
        }
    }

    /// Why a grant of `target` is not proposed where the run has no view
    /// (no mount namespace): /tmp, /var/tmp, /dev/shm, /dev/mqueue and the
    /// terminals are then the host's, shared by every program and run of
    /// this user, and the grant would hand the run all of them (`learn`
    /// would write it into a draft). A directory of the user's own beneath
    /// them is proposed as usual.
    fn host_shared(&self, target: &Path) -> Option<String> {
        if self.view.is_some() {
            return None;
        }
        let is = |p: &str| target == Path::new(p);
        let (place, what, instead) = if is("/tmp") || is("/var/tmp") {
            (
                target.display().to_string(),
                "every temporary file",
                "the run's own temporary directory is $TMPDIR (or grant a directory of your own beneath it); ",
            )
        } else if is("/dev/shm") {
            (
                "/dev/shm".to_string(),
                "every POSIX shared-memory object and semaphore",
                "",
            )
        } else if is("/dev/mqueue") {
            ("/dev/mqueue".to_string(), "every POSIX message queue", "")
        } else if is("/dev/pts") || is("/dev/pts/ptmx") || is("/dev/ptmx") {
            (
                "/dev/pts".to_string(),
                "every terminal",
                "capsule's terminal relay gives the command a pty when capsule's stdin is one; ",
            )
        } else {
            return None;
        };
        Some(format!(
            "{place} is the host's here (the run has no mount namespace, so no private one): a grant would give \
             the run {what} of this user, other runs' and programs' too, so capsule does not propose it; \
             {instead}a private {place} needs user namespaces (README: \"In containers and pods\")"
        ))
    }

    /// Whether `p` (canonical) lies in the host's /tmp where the view shows
    /// the run's private /tmp instead: neither a grant bound into it nor a
    /// directory leading to one.
    fn hidden_by_private_tmp(&self, p: &Path) -> bool {
        let tmp = Path::new("/tmp");
        if !self.view.as_ref().is_some_and(|v| v.private_tmp) || !p.starts_with(tmp) || p == tmp {
            return false;
        }
        let under_tmpdir = |g: &Path| self.plan.tmpdir.as_ref().is_some_and(|t| g.starts_with(t));
        !self.plan.fs.grants.iter().any(|g| {
            g.path.starts_with(tmp)
                && !under_tmpdir(&g.path)
                && (p.starts_with(&g.path) || g.path.starts_with(p))
        })
    }

    /// A symbolic link whose own place the run's view does not show.
    fn link_outside_view(&self, a: &Answer, path: &Path, real: &Path) -> Option<Answer> {
        let (dir, name) = (path.parent()?, path.file_name()?);
        let link = std::fs::canonicalize(dir).ok()?.join(name);
        if link == real || !link.is_symlink() || !self.hidden_by_private_tmp(&link) {
            return None;
        }
        let mut out = a.clone();
        out.allowed = false;
        out.layer = "view";
        out.layer_detail = "the run's view (mount namespace)".into();
        out.key = Some("filesystem.tmp".into());
        out.line = self.line("filesystem.tmp");
        out.because = format!(
            "the link {} lies in the host's /tmp, which the run does not see (its /tmp is its private TMPDIR): it cannot be followed",
            link.display()
        );
        let dir = link.parent().unwrap_or(Path::new("/")).to_path_buf();
        self.propose(&mut out, &dir, Path::new("/tmp"), GrantKind::Read);
        match &mut out.change {
            Some(c) => c.push_str(", or use the target's path"),
            None => {
                out.no_change = None;
                out.change = Some(format!("use the target's path ({})", real.display()));
            }
        }
        Some(out)
    }

    /// `path` with the symbolic links that lie beneath a mount's destination
    /// followed as the run's view does (their targets read on the host, at
    /// the mount's source; an absolute one restarts at the view's root).
    /// None where no such link is on the way (or too many: the host's walk
    /// then answers), or outside the view.
    fn resolve_in_view(&self, path: &Path) -> Option<PathBuf> {
        use std::collections::VecDeque;
        use std::path::Component;
        self.view.as_ref()?;
        if !self.plan.fs.mounts.iter().any(|b| b.src != b.dst) {
            return None;
        }
        let mut rest: VecDeque<PathBuf> = path
            .components()
            .map(|c| PathBuf::from(c.as_os_str()))
            .collect();
        let mut done = PathBuf::from("/");
        let (mut hops, mut followed) = (0, false);
        while let Some(c) = rest.pop_front() {
            match c.components().next() {
                Some(Component::RootDir | Component::CurDir) | None => continue,
                Some(Component::ParentDir) => {
                    // `..` inside a mount climbs the run's view (to the
                    // destination's parent at its top), not the host's.
                    followed |= self.through_mount(&done).is_some();
                    done.pop();
                    continue;
                }
                _ => {}
            }
            let next = done.join(&c);
            let link = self
                .through_mount(&next)
                .and_then(|(host, _)| std::fs::read_link(host).ok());
            let Some(target) = link else {
                done = next;
                continue;
            };
            hops += 1;
            if hops > 40 {
                return None;
            }
            followed = true;
            if target.is_absolute() {
                done = PathBuf::from("/");
            }
            for t in target
                .components()
                .map(|c| PathBuf::from(c.as_os_str()))
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                rest.push_front(t);
            }
        }
        followed.then_some(done)
    }

    /// `path` beneath the destination of a mount (`mounts:`, `--mount`) at
    /// another place in the run's view: the source path it reaches there
    /// (the bind the view attaches last over `path` is what the run sees
    /// there: a write grant or a grant under /tmp bound at its own path
    /// beneath the destination covers the mount, and is judged as itself).
    fn through_mount(&self, path: &Path) -> Option<(PathBuf, &crate::plan::Bind)> {
        let view = self.view.as_ref()?;
        // The view's binds in attach order (parents first, a later one at
        // the same place on top): the last one holding `path` shows it.
        let top = view.binds.iter().rev().find(|b| path.starts_with(&b.dst))?;
        let b = self.plan.fs.mounts.iter().rev().find(|b| {
            *b == top
                && b.src != b.dst
                && self
                    .plan
                    .fs
                    .grants
                    .iter()
                    .any(|g| g.path == b.src && g.origin.is_mount())
        })?;
        let rest = path.strip_prefix(&b.dst).ok()?;
        // `..` out of a mount climbs the run's view, not the source's parent.
        if rest
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return None;
        }
        Some((
            if rest.as_os_str().is_empty() {
                b.src.clone()
            } else {
                b.src.join(rest)
            },
            b,
        ))
    }

    /// The view's own places: the private /tmp, /proc, /dev/shm and the
    /// covered secrets of /etc. None: Landlock's rules decide.
    fn view_special(
        &self,
        a: &mut Answer,
        real: &Path,
        access: FsAccess,
        asked: Asked,
    ) -> Option<Answer> {
        let v = self.view.as_ref()?;
        let writes = access.changes();
        if let Some(out) = self.covered_secret(a, v, real, writes) {
            return Some(out);
        }
        // Reached through a link of the host: the target's place in the view.
        if let Some(out) = self.private_place(a, real, access, asked) {
            return Some(out);
        }
        if v.private_proc && real.starts_with("/proc") {
            let mut out = a.clone();
            out.layer = "view";
            out.layer_detail = "the run's view (its own pid namespace and /proc)".into();
            out.allowed = !writes && !matches!(access, FsAccess::Exec);
            out.because =
                "/proc is the run's own (its pid namespace): it shows only the run's processes, read-only".into();
            if !out.allowed {
                out.no_change = Some("nothing beneath /proc may be written or executed".into());
            }
            return Some(out);
        }
        None
    }

    /// A path in one of the view's private places, the private /tmp (the
    /// run's TMPDIR, also its HOME) or /dev/shm (a tmpfs of its own), as the
    /// view gives it at any depth (`p` lexical, nothing of the host
    /// followed). None: not in such a place, or beneath a bind of the view
    /// there (a grant bound again at its own path, a mount), whose own rules
    /// decide.
    ///
    /// The view attaches each bind beneath the place at its destination; a
    /// destination two or more levels down is reached through a small
    /// read-only tmpfs at the place's first component holding only the
    /// directories that lead to the binds (`sandbox::view`'s skeleton).
    /// Everything else in the place is the run's own: it may make, write,
    /// read and remove anything there, at any depth, and execute nothing.
    fn private_place(
        &self,
        a: &Answer,
        p: &Path,
        access: FsAccess,
        asked: Asked,
    ) -> Option<Answer> {
        let v = self.view.as_ref()?;
        let (base, what) = if v.private_tmp && p.starts_with("/tmp") {
            (
                Path::new("/tmp"),
                "/tmp is the run's private TMPDIR (its HOME too)",
            )
        } else if v.private_shm && p.starts_with("/dev/shm") {
            (Path::new("/dev/shm"), "/dev/shm is the run's own tmpfs")
        } else {
            return None;
        };
        let binds: Vec<&PathBuf> = v
            .binds
            .iter()
            .map(|b| &b.dst)
            .filter(|d| d.starts_with(base) && d.as_path() != base)
            .collect();
        if binds.iter().any(|d| p.starts_with(d)) {
            return None;
        }
        let mut out = a.clone();
        out.layer = "view";
        out.layer_detail = if base == Path::new("/tmp") {
            "the run's view (mount namespace)".into()
        } else {
            "the run's view (a private /dev/shm)".into()
        };
        if base == Path::new("/tmp") {
            out.key = Some("filesystem.tmp".into());
            out.line = self.line("filesystem.tmp");
        }
        // The place's first component below it, and whether the view made
        // it a read-only skeleton leading to a bind deeper down.
        let top = p
            .strip_prefix(base)
            .ok()
            .and_then(|r| r.components().next())
            .map(|c| base.join(c));
        let skeleton = top.as_ref().is_some_and(|t| {
            binds
                .iter()
                .any(|d| d.starts_with(t) && d.components().count() > t.components().count())
        });
        let leads = binds.iter().any(|d| d.starts_with(p) && d.as_path() != p);
        let writes = access.changes();
        // The deepest of `p` and its ancestors below the place that the
        // host holds: asked now, that is the host's, which the run does not
        // see (in the run it is there only once the run makes its own).
        let on_host = p
            .ancestors()
            .take_while(|d| *d != base)
            .find(|d| std::fs::symlink_metadata(d).is_ok());
        let hidden_grant = |h: &Path| hidden_grant(h, p, base, access);
        if skeleton {
            let t = top.as_deref().unwrap_or(base);
            if leads && !writes {
                out.allowed = true;
                out.because = format!(
                    "{what}, and {} is only a read-only directory leading to a grant bound inside it: it \
                     lists that way and nothing else of the host's",
                    p.display()
                );
                return Some(out);
            }
            out.allowed = false;
            if writes {
                let dir = if leads { p } else { p.parent().unwrap_or(base) };
                out.because = format!(
                    "{what}, but {} lies in a read-only directory the view made to lead to a grant bound \
                     inside it (beneath {}): nothing can be made or changed there",
                    p.display(),
                    t.display()
                );
                self.propose(&mut out, dir, base, GrantKind::Write);
            } else {
                out.because = format!(
                    "{what}: beneath {} it shows only the directories leading to a grant bound inside it; the \
                     host's {} is not in the view",
                    t.display(),
                    p.display()
                );
                let (g, kind) = hidden_grant(p);
                self.propose(&mut out, &g, base, kind);
            }
            return Some(out);
        }
        Some(self.own_place(out, (p, base, what), on_host, access, asked))
    }

    /// The answer for `p` in the run's own part of a private place
    /// (`base`, described by `what`): what the run makes there, at any depth.
    fn own_place(
        &self,
        mut out: Answer,
        (p, base, what): (&Path, &Path, &str),
        on_host: Option<&Path>,
        access: FsAccess,
        asked: Asked,
    ) -> Answer {
        let writes = access.changes();
        // Asked now, a path the host holds there means the host's, which the
        // run does not see; observed, a write made what it wrote, and a
        // read found what the run had made (or nothing, where the view hid
        // the host's).
        let hidden = on_host.filter(|h| match asked {
            Asked::Now => true,
            Asked::InRun { present } => !writes && !present && *h == p,
        });
        if let Some(h) = hidden {
            out.allowed = false;
            out.because = format!(
                "{what}: the host's {} is not in the view (the run finds there only what it made itself, \
                 and may make its own {} there)",
                h.display(),
                p.display()
            );
            let (g, kind) = hidden_grant(h, p, base, access);
            self.propose(&mut out, &g, base, kind);
            return out;
        }
        if matches!(access, FsAccess::Exec) {
            out.allowed = false;
            out.because = format!("{what}: writable but not executable");
            out.change = Some("exec a file from an exec grant instead (filesystem.exec)".into());
            return out;
        }
        out.allowed = true;
        out.because = if p == base {
            format!("{what}: the run makes, reads and removes what it likes there (deleted after the run)")
        } else {
            format!(
                "{what}: {} is the run's own at any depth (deleted after the run), not the host's",
                p.display()
            )
        };
        out
    }

    /// A grant of `target` as the change, or why none is proposed: never
    /// `/` nor the private place `base` itself (granting the host's /tmp
    /// would take the private one away), and only what exists on the host.
    fn propose(&self, a: &mut Answer, target: &Path, base: &Path, kind: GrantKind) {
        if target == Path::new("/") || target == base || !target.starts_with(base) {
            a.no_change = Some(format!(
                "{} is the run's own place, not the host's: no grant is narrower than the whole of it, \
                 and capsule does not propose one",
                base.display()
            ));
            return;
        }
        if std::fs::symlink_metadata(target).is_err() {
            a.no_change = Some(format!(
                "{} does not exist on the host: there is nothing of the host's to grant there",
                target.display()
            ));
            return;
        }
        match validate::check_grant(target, kind) {
            Ok(()) => {
                a.change = Some(format!(
                    "add {} to filesystem.{} (a grant under {} is bound into the run's private one)",
                    yq(&target.display().to_string()),
                    kind.as_str(),
                    base.display()
                ));
                a.grant = Some((target.to_path_buf(), kind));
            }
            Err(why) => a.no_change = Some(why),
        }
    }

    /// A covered /etc secret of the view (/dev/null or an empty mode-000
    /// directory in place of it).
    fn covered_secret(
        &self,
        a: &Answer,
        v: &ViewSummary,
        real: &Path,
        writes: bool,
    ) -> Option<Answer> {
        let (at, what) = v.secrets.iter().find(|(at, _)| real.starts_with(at))?;
        let mut out = a.clone();
        out.allowed = false;
        out.layer = "view";
        out.layer_detail = "the run's view (mount namespace)".into();
        out.key = Some("built-in /etc secret cover".into());
        out.because = format!(
            "{} is a system secret ({what}): the view covers it ({}), so the run {}",
            at.display(),
            if at.is_dir() {
                "an empty mode-000 directory"
            } else {
                "/dev/null"
            },
            if writes {
                "cannot change it"
            } else {
                "reads nothing of it (an empty file)"
            }
        );
        match validate::check_grant(at, GrantKind::Read) {
            Ok(()) if !writes => {
                out.change = Some(format!(
                    "a grant naming it exactly: filesystem.read: [{}] (a grant of /etc never includes it)",
                    yq(&at.display().to_string())
                ))
            }
            Ok(()) => {
                out.change = Some(format!(
                    "a write grant naming it exactly: filesystem.write: [{}]",
                    yq(&at.display().to_string())
                ))
            }
            Err(why) => out.no_change = Some(why),
        }
        Some(out)
    }

    /// The write grant whose writable bind holds `real` in the view (the
    /// deepest): its carve-outs hide content (Landlock), not the inode.
    fn write_bind(&self, real: &Path) -> Option<&crate::plan::FsGrant> {
        self.plan
            .fs
            .grants
            .iter()
            .filter(|g| g.access.write && real.starts_with(&g.path))
            .max_by_key(|g| g.path.components().count())
    }

    /// Allowed through the writable bind of the write grant `g` in the view
    /// (each write grant is bound writable whole): the grant's key, and for
    /// a carve-out beneath it the note "D is carved out (ORIGIN), but
    /// `caveat`" (a carve-out hides content, not the inode).
    fn writable_in_view(
        &self,
        a: &mut Answer,
        g: &crate::plan::FsGrant,
        real: &Path,
        caveat: &str,
    ) {
        a.allowed = true;
        a.key_of(&g.origin);
        a.because = format!(
            "{} ({}) is writable in the view",
            g.path.display(),
            g.origin
        );
        if let Some(d) = self
            .report
            .denied
            .iter()
            .find(|d| real.starts_with(&d.path))
        {
            a.notes.push(format!(
                "{} is carved out ({}), but {caveat}",
                d.path.display(),
                d.origin
            ));
        }
    }

    /// truncate(2) by path where Landlock has no truncate right (ABI 1-2):
    /// the view's read-only host, or the seccomp truncate guard.
    fn truncate_below_abi3(&self, mut a: Answer, real: &Path, exists: bool) -> Answer {
        let abi = self.report.abi;
        a.allowed = false;
        if self.view.is_some() {
            a.layer = "view";
            a.layer_detail = format!(
                "the read-only view of the host (Landlock ABI {abi} has no truncate right)"
            );
            match self.write_bind(real) {
                Some(g) => self.writable_in_view(
                    &mut a,
                    g,
                    real,
                    "below Landlock ABI 3 a carve-out does not stop truncate() by path inside a write grant: \
                     its content can be destroyed, though not read",
                ),
                None => {
                    a.because = "outside every write grant, the host is mounted read-only in the run's view (EROFS)".into();
                    self.suggest(&mut a, real, exists, GrantKind::Write);
                }
            }
        } else if self.truncate_guard {
            a.layer = "truncate-guard";
            a.layer_detail = format!(
                "capsule's seccomp truncate guard (Landlock ABI {abi} has no truncate right)"
            );
            a.because =
                "truncate() by path is refused everywhere (seccomp cannot read the path)".into();
            a.no_change = Some(
                "use ftruncate() on a descriptor opened for writing (open with O_WRONLY|O_TRUNC), which a write \
                 grant allows (see --write)"
                    .into(),
            );
        } else {
            a.allowed = true;
            a.layer = "none";
            a.layer_detail = "no layer (--best-effort)".into();
            a.because = "NOT ENFORCED: no layer checks truncate() by path on this host".into();
        }
        a
    }

    fn chmod(&self, mut a: Answer, real: &Path, exists: bool) -> Answer {
        a.notes
            .push("setting a setuid or setgid bit is refused by seccomp everywhere".into());
        if self.view.is_some() {
            a.layer = "view";
            a.layer_detail =
                "the read-only view of the host (Landlock has no hook for chmod)".into();
            // Each write grant is bound writable whole: its carve-outs hide
            // content (Landlock), not metadata.
            if let Some(g) = self.write_bind(real) {
                self.writable_in_view(
                    &mut a,
                    g,
                    real,
                    "a carve-out hides content only: inside a write grant its mode can change",
                );
            } else {
                a.allowed = false;
                a.because = "outside every write grant, the host is mounted read-only in the run's view: chmod fails with EROFS, as root too".into();
                self.suggest(&mut a, real, exists, GrantKind::Write);
                return a;
            }
        } else if let Some((write, deny)) = &self.meta_guard {
            if self.chmod_by_meta_guard(&mut a, write, deny, real, exists) {
                return a;
            }
        } else {
            a.layer = "host";
            a.layer_detail =
                "the host's file permissions (no view here: Landlock has no hook for chmod)".into();
            a.allowed = true;
            a.because = format!(
                "NOT ENFORCED by capsule on this path (no mount namespace): the owner of {} can change its mode",
                real.display()
            );
        }
        self.chmod_owner_only(&mut a, real);
        a
    }

    /// chmod on the no-view path with capsule's metadata guard: allowed in
    /// its write grants less its carve-outs, never on a device. True when
    /// the answer is final (refused).
    fn chmod_by_meta_guard(
        &self,
        a: &mut Answer,
        write: &[PathBuf],
        deny: &[PathBuf],
        real: &Path,
        exists: bool,
    ) -> bool {
        a.layer = "meta-guard";
        a.layer_detail =
            "capsule's metadata guard (seccomp user notification; no view here)".into();
        let grant = write
            .iter()
            .filter(|w| real.starts_with(w))
            .max_by_key(|w| w.components().count());
        let carved = deny.iter().find(|d| real.starts_with(d));
        let device = std::fs::metadata(real).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_char_device() || m.file_type().is_block_device()
        });
        match (grant, carved) {
            (Some(g), None) if !device => {
                a.allowed = true;
                if let Some(fg) = self.plan.fs.grants.iter().find(|x| &x.path == g) {
                    a.key_of(&fg.origin);
                }
                a.because = format!(
                    "{} is a write grant, and capsule makes the call itself",
                    g.display()
                );
            }
            (_, Some(d)) => {
                a.because = format!(
                    "{} is carved out: the guard refuses it (EACCES)",
                    d.display()
                );
                a.no_change =
                    Some("a carve-out's metadata never changes; drop the carve-out".into());
                return true;
            }
            _ => {
                a.because = if device {
                    "a device's metadata never changes (EACCES)".into()
                } else {
                    "outside every write grant the guard refuses it (EACCES)".into()
                };
                if !device {
                    self.suggest(a, real, exists, GrantKind::Write);
                }
                return true;
            }
        }
        false
    }

    /// The run holds no capabilities (no CAP_FOWNER, as root too): only the
    /// file's owner changes its mode.
    fn chmod_owner_only(&self, a: &mut Answer, real: &Path) {
        use std::os::unix::fs::MetadataExt;
        let uid = nix::unistd::geteuid().as_raw();
        if let Ok(m) = std::fs::metadata(real) {
            if m.uid() != uid {
                a.allowed = false;
                a.layer = "host";
                a.layer_detail =
                    "the host's file permissions (the run holds no capabilities, as root too)"
                        .into();
                a.because = format!(
                    "{} belongs to uid {}: only its owner may change its mode (EPERM), and the run holds no capabilities",
                    real.display(),
                    m.uid()
                );
                a.change = None;
                a.no_change =
                    Some("capsule cannot give a run more than the host's permissions".into());
            }
        }
    }

    // -------------------------------------------------------------- network

    /// May the run connect to `host:port`?
    pub fn connect(&self, host: &str, port: u16) -> Answer {
        use crate::proxy::allow_hosts::TargetHost;
        let mut a = Answer::new(format!("connect {host}:{port}"));
        let target = TargetHost::parse(host);
        let loopback = target
            .as_ref()
            .is_some_and(TargetHost::is_explicit_loopback);
        a.key = Some("network.mode".into());
        a.line = self.line("network.mode");
        let mode = self.plan.net.mode;
        if mode == NetMode::Unrestricted {
            a.allowed = true;
            a.layer = "none";
            a.layer_detail = "no layer (network.mode: unrestricted)".into();
            a.because = "the run shares the host's network".into();
            return a;
        }
        if loopback && self.own_loopback {
            a.allowed = true;
            a.layer = "netns";
            a.layer_detail = "the run's own network namespace".into();
            a.because = format!(
                "{host} is the run's own loopback: it reaches only what the run itself listens on, never the host's services"
            );
            return a;
        }
        let direct = if self.netns {
            (
                "netns",
                "the run's own network namespace (no route out)".to_string(),
            )
        } else if self.seccomp {
            (
                "seccomp",
                "seccomp (IP sockets refused on the host's network)".to_string(),
            )
        } else {
            ("landlock", self.landlock())
        };
        if mode == NetMode::None {
            a.layer = direct.0;
            a.layer_detail = direct.1;
            a.because = "network.mode is none: no connection leaves the run".into();
            match target.as_ref().map(|t| self.always_refused(t)) {
                Some(Some(why)) => a.no_change = Some(why),
                _ => {
                    a.change = Some(format!(
                        "network.mode: proxy with network.allow_hosts: [\"{host}\"] (or --net proxy --allow-host {host}); \
                         the run then reaches it through capsule's proxy (HTTP(S)_PROXY)"
                    ))
                }
            }
            return a;
        }
        self.through_proxy(a, host, port, &direct.1)
    }

    /// `network.mode: none`, and the run tried to reach the network (`what`:
    /// how capsule knows); `--explain` lists it, the host being unknown.
    pub fn network_off(&self, what: &str) -> Answer {
        let mut a = Answer::new("connect (the network)".into());
        a.key = Some("network.mode".into());
        a.line = self.line("network.mode");
        (a.layer, a.layer_detail) = if self.netns {
            (
                "netns",
                "the run's own network namespace (no route out)".to_string(),
            )
        } else if self.seccomp {
            (
                "seccomp",
                "seccomp (IP sockets refused on the host's network)".to_string(),
            )
        } else {
            ("landlock", self.landlock())
        };
        a.because = format!("network.mode is none: no connection leaves the run ({what})");
        a.change = Some(
            "network.mode: proxy with network.allow_hosts: [\"HOST\"] (or --net proxy --allow-host HOST); the run \
             then reaches HOST through capsule's proxy (HTTP(S)_PROXY)"
                .into(),
        );
        a
    }

    /// Proxy mode: only through the proxy, and only what its own decision
    /// function allows (`direct`: the layer that refuses a direct connection).
    fn through_proxy(&self, mut a: Answer, host: &str, port: u16, direct: &str) -> Answer {
        use crate::proxy::allow_hosts::{Allowlist, TargetHost};
        let target = TargetHost::parse(host);
        let loopback = target
            .as_ref()
            .is_some_and(TargetHost::is_explicit_loopback);
        a.layer = "proxy";
        a.layer_detail = "capsule's egress proxy (the only way out)".into();
        a.notes.push(format!(
            "a direct connection is refused by {}; the run reaches hosts through the proxy (HTTP_PROXY/HTTPS_PROXY)",
            direct
        ));
        let list = Allowlist::parse(&self.plan.net.allow_hosts).ok();
        let decided = match &list {
            Some(l) => crate::proxy::decide::check_target(l, host, port),
            None => Err(crate::proxy::refusal::Refusal::NotListed {
                host: host.to_string(),
                port,
            }),
        };
        match decided {
            Ok(_) => {
                a.allowed = true;
                let n = self.plan.net.allow_hosts.len();
                let i = self.plan.net.allow_hosts.iter().position(|e| {
                    Allowlist::parse(std::slice::from_ref(e))
                        .is_ok_and(|l| target.as_ref().is_some_and(|t| l.permits_target(t, port)))
                });
                if let Some(i) = i {
                    if i >= n - self.cli_hosts {
                        a.key = Some(format!("--allow-host {}", self.plan.net.allow_hosts[i]));
                        a.line = None;
                    } else {
                        let k = format!("network.allow_hosts[{i}]");
                        a.line = self.line(&k);
                        a.key = Some(k);
                    }
                    a.because = format!(
                        "the proxy's allowlist entry \"{}\" matches {host}:{port}",
                        self.plan.net.allow_hosts[i]
                    );
                }
                if matches!(target, Some(TargetHost::Name(_))) && !loopback {
                    a.notes.push(
                        "a name that resolves to a private, loopback or link-local address is still refused (DNS rebinding)"
                            .into(),
                    );
                }
            }
            Err(refusal) => {
                a.allowed = false;
                a.key = Some("network.allow_hosts".into());
                a.line = self.line("network.allow_hosts");
                a.because = refusal.to_string();
                match target.as_ref().map(|t| self.always_refused(t)) {
                    Some(Some(why)) => a.no_change = Some(why),
                    Some(None) => {
                        a.change = Some(format!(
                            "add \"{host}\" (or \"{host}:{port}\") to network.allow_hosts (or run with --allow-host {host})"
                        ))
                    }
                    None => a.no_change = Some(format!("{host} is neither a host name nor an IP address")),
                }
            }
        }
        a
    }

    fn always_refused(&self, t: &crate::proxy::allow_hosts::TargetHost) -> Option<String> {
        use crate::proxy::allow_hosts::TargetHost;
        use crate::proxy::destination::{classify_ip, is_metadata_name};
        match t {
            TargetHost::Name(n) if is_metadata_name(n) => Some(format!(
                "{n} is a cloud metadata endpoint: the proxy refuses it whatever the allowlist says (only network.mode: unrestricted, no network confinement at all, reaches it)"
            )),
            TargetHost::Ip(ip) if classify_ip(*ip).always_refused() => Some(format!(
                "{ip} is {}: the proxy refuses it whatever the allowlist says (only network.mode: unrestricted, no network confinement at all, reaches it)",
                classify_ip(*ip).describe()
            )),
            _ => None,
        }
    }

    // ------------------------------------------------------- broker, env, signals

    /// May the run call the tool `name`?
    pub fn tool(&self, name: &str) -> Answer {
        let mut a = Answer::new(format!("tool {name}"));
        a.layer = "broker";
        a.layer_detail = "capsule's RPC broker (in the unconfined parent)".into();
        let allow = self.plan.tools.as_ref().map(|t| &t.allow);
        match allow.and_then(|l| l.iter().position(|t| t.name == name)) {
            Some(i) => {
                let k = format!("tools.allow[{i}]");
                a.line = self.line(&k);
                a.key = Some(k);
                a.allowed = true;
                a.because = format!(
                    "the policy allow-lists the tool {name} (each call counts against tools.max_calls)"
                );
            }
            None => {
                a.key = Some("tools.allow".into());
                a.line = self.line("tools.allow");
                a.because = format!("{name} is not in the policy's tools.allow");
                // The name is the run's string when `--explain` asks: quoted
                // (JSON's quoting is YAML's), the snippet stays one tool.
                let quoted = serde_json::to_string(name).unwrap_or_default();
                a.change = Some(format!(
                    "add {{name: {quoted}, command: [...]}} (or {{name: {quoted}, forward: true}}) to tools.allow"
                ));
            }
        }
        a
    }

    /// May the run ask for the model `name`?
    pub fn model(&self, name: &str) -> Answer {
        let mut a = Answer::new(format!("model {name}"));
        a.layer = "broker";
        a.layer_detail = "capsule's RPC broker (in the unconfined parent)".into();
        a.notes.push(
            "the host config's llm ceiling (enabled, allowed_models) can still refuse it: capsule reads it when the run starts"
                .into(),
        );
        let llm = self.plan.llm.as_ref().filter(|l| l.enabled);
        let Some(llm) = llm else {
            a.key = Some("llm_access.enabled".into());
            a.line = self.line("llm_access");
            a.because = "llm_access is not enabled in the policy".into();
            a.change = Some(format!(
                "llm_access: {{enabled: true, allowed_models: [\"{name}\"]}}"
            ));
            return a;
        };
        match &llm.allowed_models {
            None => {
                a.allowed = true;
                a.key = Some("llm_access.enabled".into());
                a.line = self.line("llm_access.enabled");
                a.because = "llm_access is enabled and names no allowed_models: any model the host config allows".into();
            }
            Some(list) => match list.iter().position(|m| m == name) {
                Some(i) => {
                    let k = format!("llm_access.allowed_models[{i}]");
                    a.line = self.line(&k);
                    a.key = Some(k);
                    a.allowed = true;
                    a.because = format!("llm_access.allowed_models names {name}");
                }
                None => {
                    a.key = Some("llm_access.allowed_models".into());
                    a.line = self.line("llm_access.allowed_models");
                    a.because = format!("{name} is not in llm_access.allowed_models");
                    a.change = Some(format!("add \"{name}\" to llm_access.allowed_models"));
                }
            },
        }
        a
    }

    /// Does the run get the environment variable `name`? (Its value is never shown.)
    pub fn env(&self, name: &str) -> Answer {
        let mut a = Answer::new(format!("env {name}"));
        a.layer = "env";
        a.layer_detail =
            "the child's environment (built by capsule, empty but for what the policy names)"
                .into();
        let pass = &self.env_policy.pass;
        if validate::is_refused_env(name) {
            a.because = format!(
                "{name} is always refused: it makes programs load code or options from outside the policy"
            );
            a.key = Some("built-in refused variables".into());
            a.no_change = Some("capsule refuses a policy that passes or sets it".into());
            return a;
        }
        if self.plan.env.iter().any(|(k, _)| k == name) {
            a.allowed = true;
            let k = if self.plan_policy_env_set(name) {
                format!("env.set.{name}")
            } else if let Some(i) = pass.iter().position(|p| p == name) {
                format!("env.pass[{i}]")
            } else {
                "built-in (PATH, HOME, TMPDIR, LANG)".to_string()
            };
            a.line = self.line(&k);
            a.because = format!("{name} is in the child's environment ({k})");
            a.key = Some(k);
            return a;
        }
        if let Some(i) = pass.iter().position(|p| p == name) {
            let k = format!("env.pass[{i}]");
            a.line = self.line(&k);
            a.key = Some(k);
            a.because =
                format!("{name} is named in env.pass but is not set in capsule's environment");
            a.change = Some(format!("set {name} in the environment capsule runs in"));
            return a;
        }
        a.key = Some("env.pass".into());
        a.because = format!("{name} is not named: the child's environment starts empty");
        a.change = Some(format!(
            "add {name} to env.pass (copied from capsule's environment), or set it in env.set"
        ));
        a
    }

    /// May the run signal `pid`, a process outside it (`why` runs nothing,
    /// so every pid it can name is outside the run)?
    pub fn signal(&self, pid: i32) -> Answer {
        let mut a = Answer::new(format!("signal {pid}"));
        a.layer = self.signals.as_str();
        a.layer_detail = match self.signals {
            SignalLayer::PidNamespace => "the run's own pid namespace".into(),
            SignalLayer::LandlockScope => {
                format!("Landlock's signal scope (ABI {})", self.report.abi)
            }
            SignalLayer::SeccompNotify => {
                "seccomp user notification (capsule checks every signal's target)".into()
            }
            SignalLayer::None => "no layer (--best-effort)".into(),
        };
        a.notes.push(self.signals.describe().to_string());
        a.allowed = self.signals == SignalLayer::None;
        a.because = if a.allowed {
            "NOT ENFORCED: no layer keeps the run's signals inside it on this host (--best-effort)"
                .into()
        } else {
            format!(
                "process {pid} is outside the run: only the run's own processes can be signalled"
            )
        };
        if !a.allowed {
            a.no_change = Some("no policy key lets a run signal processes outside it".into());
        }
        a
    }

    fn plan_policy_env_set(&self, name: &str) -> bool {
        self.env_policy.set.contains_key(name)
    }
}

/// A write beneath a read-only mount: EROFS from the view, whatever the grants.
fn refused_by_read_only_mount(mut a: Answer, b: &crate::plan::Bind) -> Answer {
    a.allowed = false;
    a.layer = "view";
    a.layer_detail = "the run's view (mount namespace)".into();
    a.because = format!(
        "{} is mounted read-only at {} (EROFS)",
        b.src.display(),
        b.dst.display()
    );
    a.change = Some(format!(
        "mount it read-write: --mount {} (or read_only: false in mounts:)",
        shq(&format!("{}:{}:rw", mount_source(&b.src), b.dst.display()))
    ));
    a
}

/// What the view hides of the host's at `h` (asked about `p`, in the private
/// place `base`), and the grant that binds it in: a link (a venv's
/// `bin/python`) needs only to be seen, its target is judged where it
/// points; a file to execute, an exec grant; a write, a write grant.
fn hidden_grant(h: &Path, p: &Path, base: &Path, access: FsAccess) -> (PathBuf, GrantKind) {
    match access {
        FsAccess::Write | FsAccess::Truncate | FsAccess::Chmod => {
            (h.to_path_buf(), GrantKind::Write)
        }
        FsAccess::Exec if h == p && h.is_symlink() => {
            (h.parent().unwrap_or(base).to_path_buf(), GrantKind::Read)
        }
        FsAccess::Exec if h == p => (h.to_path_buf(), GrantKind::Exec),
        _ => (h.to_path_buf(), GrantKind::Read),
    }
}

/// Who asks about a path: a person, of what the run would meet (`why`), or
/// the path observer, of an access the run made (`--explain`, `learn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Now,
    /// `present`: the path was there in the run's view when it asked.
    InRun {
        present: bool,
    },
}

/// `p` with `.` and `..` taken away lexically (as the observer records
/// paths; a path in a private place is judged in the view, where the
/// host's links there do not exist).
fn lexical(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// A path question, resolved: the canonical path, whether it exists and
/// is a directory, and the access asked.
struct Target<'p> {
    real: &'p Path,
    exists: bool,
    is_dir: bool,
    access: FsAccess,
}

impl Target<'_> {
    /// Whether rights `r` give the access (writing an existing file, or
    /// making an entry).
    fn wants(&self, r: &Rights) -> bool {
        match self.access {
            FsAccess::Read if self.is_dir => r.read_dir,
            FsAccess::Read => r.read_file,
            FsAccess::Write | FsAccess::Truncate if self.exists && !self.is_dir => r.write_file,
            FsAccess::Write | FsAccess::Truncate => r.make,
            FsAccess::Exec => r.exec,
            FsAccess::Chmod => false,
        }
    }

    /// The kind of grant that gives the access.
    fn kind(&self) -> GrantKind {
        match self.access {
            FsAccess::Read => GrantKind::Read,
            FsAccess::Exec => GrantKind::Exec,
            _ => GrantKind::Write,
        }
    }
}

/// The rules on a path and its ancestors.
struct Deciders<'a>(Vec<&'a RuleLine>);

impl<'a> Deciders<'a> {
    /// The deepest rule that gives what `want` asks.
    fn find(&self, want: impl Fn(&Rights) -> bool) -> Option<&'a RuleLine> {
        self.0
            .iter()
            .filter(|r| want(&rights_of(r)))
            .max_by_key(|r| r.path.components().count())
            .copied()
    }
}

/// Whether the host's permission bits refuse `access` on `real` to this
/// user: the run holds no capabilities (no CAP_DAC_OVERRIDE, as root too),
/// so the owner, group and other bits decide, and every directory on the
/// way must be searchable. (ACLs are not read: an ACL that grants more is
/// not seen here.)
fn host_refuses(real: &Path, exists: bool, is_dir: bool, access: FsAccess) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let mut gids: Vec<u32> = nix::unistd::getgroups()
        .unwrap_or_default()
        .iter()
        .map(|g| g.as_raw())
        .collect();
    gids.push(nix::unistd::getegid().as_raw());
    let has = |m: &std::fs::Metadata, want: u32| {
        let shift = if m.uid() == uid {
            6
        } else if gids.contains(&m.gid()) {
            3
        } else {
            0
        };
        (m.mode() >> shift) & want == want
    };
    let who = format!("uid {uid}");
    for dir in real.ancestors().skip(1) {
        if let Ok(m) = std::fs::metadata(dir) {
            if !has(&m, 0o1) {
                return Some(format!(
                    "{} is not searchable by {who} (mode {:o})",
                    dir.display(),
                    m.mode() & 0o7777
                ));
            }
        }
    }
    let (target, want, what) = match (exists, access) {
        (true, FsAccess::Read) => (real, 0o4, "readable"),
        (true, FsAccess::Write | FsAccess::Truncate) if is_dir => (real, 0o3, "writable"),
        (true, FsAccess::Write | FsAccess::Truncate) => (real, 0o2, "writable"),
        (true, FsAccess::Exec) => (real, 0o1, "executable"),
        (false, FsAccess::Write) => (real.parent()?, 0o3, "writable"),
        _ => return None,
    };
    let m = std::fs::metadata(target).ok()?;
    if has(&m, want) {
        return None;
    }
    Some(format!(
        "{} is not {what} by {who} (mode {:o}, owner {})",
        target.display(),
        m.mode() & 0o7777,
        m.uid()
    ))
}

/// The canonical path the kernel would check, and whether it exists: the
/// deepest existing ancestor canonicalized, the rest appended.
fn canonical(p: &Path) -> (PathBuf, bool) {
    if let Ok(c) = std::fs::canonicalize(p) {
        return (c, true);
    }
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut cur = p;
    loop {
        match cur.parent() {
            Some(parent) => {
                if let Some(n) = cur.file_name() {
                    rest.push(n);
                }
                if let Ok(c) = std::fs::canonicalize(parent) {
                    let mut out = c;
                    for n in rest.iter().rev() {
                        out.push(n);
                    }
                    return (out, false);
                }
                cur = parent;
            }
            None => return (p.to_path_buf(), false),
        }
    }
}

/// `~/x` for a path under the home, else the path.
/// Text the run may have chosen (a path, a name) as a YAML double-quoted
/// scalar, for a suggested policy change: JSON's quoting is YAML's, so a
/// `"` or a `, ` in it cannot end the scalar or add another entry.
fn yq(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A word for a suggested command line: as is when it holds only characters
/// no POSIX shell treats specially, else single-quoted (a path the run named
/// `x$(id)` must not run `id` when the suggestion is pasted).
fn shq(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@,=%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn tilde(p: &Path, home: &Path) -> String {
    match p.strip_prefix(home) {
        Ok(rest) if home != Path::new("/") => format!("~/{}", rest.display()),
        _ => p.display().to_string(),
    }
}

/// "`read: [~]`"-like words for the grant a carve-out was cut from.
fn shown_key(rules: &[RuleLine], grant: &Path) -> String {
    let origin = rules.iter().find_map(|r| match &r.kind {
        RuleKind::CarveOut { grant: g } | RuleKind::ListOnly { grant: g } if g == grant => {
            Some(&r.origin)
        }
        RuleKind::Grant if r.path == grant => Some(&r.origin),
        _ => None,
    });
    match origin {
        Some(o) => format!("the grant of {} ({o})", grant.display()),
        None => format!("the grant of {}", grant.display()),
    }
}

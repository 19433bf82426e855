//! The run's egress set-up (contract section 8), in the parent before fork:
//! each credential's value read on the host (never written anywhere), a
//! placeholder per credential, the run's CA, and the CA bundle the run
//! trusts. The proxy (`crate::proxy::egress`) does the rest.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::plan::{CaBundle, CredentialPlan, Plan};
use crate::policy::egress::{InjectForm, SourceForm};
use crate::proxy::egress::{self, BoundCredential, Egress, HostRule, Inject, RunCa, Secret};

/// The variables that name the run's CA bundle, for the clients that read
/// one (OpenSSL and Go, Python requests, curl, Node, git, pip, cargo, npm:
/// a `cafile` in an npmrc makes npm ignore NODE_EXTRA_CA_CERTS, and its
/// environment setting wins over the npmrc's).
pub const CA_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "NPM_CONFIG_CAFILE",
];

/// How long a credential's `command` may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a credential's source may hold.
const MAX_VALUE: u64 = 64 * 1024;

#[derive(Debug, Error)]
pub enum EgressSetupError {
    #[error("{key} ({name}): its source, {source_desc}, {why}")]
    Source {
        key: String,
        name: String,
        source_desc: String,
        why: String,
    },
    #[error("network.upstream_ca {path}: {why}")]
    UpstreamCa { path: PathBuf, why: String },
    #[error("making the run's CA: {0}")]
    Ca(String),
    #[error("writing the run's CA bundle {path}: {source}")]
    Bundle {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the run's egress set-up hands the proxy and the child.
pub struct RunEgress {
    pub egress: Arc<Egress>,
    /// (variable, placeholder) for the child's environment.
    pub placeholders: Vec<(String, String)>,
    /// The run's CA certificate (PEM): public.
    pub ca_pem: String,
}

/// Read every credential, make the CA; `None` when nothing is terminated.
pub fn prepare(plan: &Plan) -> Result<Option<RunEgress>, EgressSetupError> {
    if !crate::plan::egress::terminates(&plan.net) {
        return Ok(None);
    }
    let mut credentials = Vec::new();
    let mut placeholders = Vec::new();
    for c in &plan.net.credentials {
        let value = read_value(c, &plan.policy_dir)?;
        let placeholder = egress::placeholder();
        for v in &c.placeholder_env {
            placeholders.push((v.clone(), placeholder.clone()));
        }
        credentials.push(BoundCredential {
            name: c.name.clone(),
            value,
            placeholder,
            hosts: c.hosts.clone(),
            methods: c.methods.clone(),
            paths: c.paths.clone(),
            inject: match &c.inject {
                InjectForm::Header { name, format } => Inject::Header {
                    name: name.clone(),
                    format: format.clone(),
                },
                InjectForm::Basic { username } => Inject::Basic {
                    username: username.clone(),
                },
                InjectForm::Query { param } => Inject::Query {
                    param: param.clone(),
                },
            },
            allow_plaintext: c.allow_plaintext,
        });
    }
    let upstream_extra_ca_pem = match &plan.net.upstream_ca {
        Some(p) => Some(read_upstream_ca(p)?),
        None => None,
    };
    let rules = plan
        .net
        .host_rules
        .iter()
        .map(|(i, r)| HostRule {
            index: *i,
            host: r.host.clone(),
            methods: r.methods.clone(),
            paths: r.paths.clone(),
            max_requests: r.max_requests,
            max_upload_bytes: r.max_upload_bytes,
            git: r.git.as_ref().map(|g| crate::proxy::egress::git::GitRule {
                fetch: g.fetch.clone(),
                push: g
                    .push
                    .as_ref()
                    .map(|p| crate::proxy::egress::git::GitPushRule {
                        repos: p.repos.clone(),
                        branches: p.branches.clone(),
                        tags: p.tags.clone(),
                        delete: p.delete,
                    }),
            }),
        })
        .collect();
    let ca = RunCa::new().map_err(|e| EgressSetupError::Ca(e.to_string()))?;
    let ca_pem = ca.cert_pem();
    Ok(Some(RunEgress {
        egress: Arc::new(Egress {
            rules,
            credentials,
            upstream_extra_ca_pem,
            ca,
        }),
        placeholders,
        ca_pem,
    }))
}

fn read_upstream_ca(p: &Path) -> Result<Vec<u8>, EgressSetupError> {
    let err = |why: String| EgressSetupError::UpstreamCa {
        path: p.to_path_buf(),
        why,
    };
    let mut buf = Vec::new();
    std::fs::File::open(p)
        .and_then(|f| f.take(16 * 1024 * 1024).read_to_end(&mut buf))
        .map_err(|e| err(e.to_string()))?;
    if !buf.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
        return Err(err(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(buf)
}

/// One credential's value, from capsule's environment, a file or a host
/// command. Errors name the credential and its source, never a value.
fn read_value(c: &CredentialPlan, policy_dir: &Path) -> Result<Secret, EgressSetupError> {
    let fail = |why: String| EgressSetupError::Source {
        key: c.key.clone(),
        name: c.name.clone(),
        source_desc: c.source.describe(),
        why,
    };
    let raw: Vec<u8> = match &c.source {
        SourceForm::Env(v) => match std::env::var_os(v) {
            Some(x) => std::os::unix::ffi::OsStringExt::into_vec(x),
            None => return Err(fail("is not set in capsule's environment".into())),
        },
        SourceForm::File(p) => {
            let mut buf = Vec::new();
            std::fs::File::open(p)
                .and_then(|f| f.take(MAX_VALUE + 1).read_to_end(&mut buf))
                .map_err(|e| fail(format!("cannot be read: {e}")))?;
            buf
        }
        SourceForm::Command(argv) => run_command(argv, policy_dir).map_err(fail)?,
    };
    let value = trim_newline(raw);
    check_value(&value).map_err(fail)?;
    Ok(Secret::new(value))
}

fn trim_newline(mut v: Vec<u8>) -> Vec<u8> {
    if v.last() == Some(&b'\n') {
        v.pop();
        if v.last() == Some(&b'\r') {
            v.pop();
        }
    }
    v
}

/// A value that can go in a request head: not empty, bounded, no control
/// characters (a line break would split the head).
fn check_value(v: &[u8]) -> Result<(), String> {
    if v.is_empty() {
        return Err("is empty".into());
    }
    if v.len() as u64 > MAX_VALUE {
        return Err(format!("holds more than {MAX_VALUE} bytes"));
    }
    if v.iter().any(|&b| b.is_ascii_control() && b != b'\t') {
        return Err(
            "holds a control character or a line break (one trailing newline is removed)".into(),
        );
    }
    Ok(())
}

/// Run a credential's host command in the policy's directory, its standard
/// output the value (bounded, within [`COMMAND_TIMEOUT`]).
fn run_command(argv: &[String], dir: &Path) -> Result<Vec<u8>, String> {
    let (prog, args) = argv.split_first().ok_or("is empty")?;
    let mut child = Command::new(prog)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot be started: {e}"))?;
    let mut out = child.stdout.take().ok_or("has no output pipe")?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut out).take(MAX_VALUE + 1).read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > COMMAND_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "did not finish within {}s",
                    COMMAND_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("could not be waited for: {e}")),
        }
    };
    let buf = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("failed ({status})"));
    }
    Ok(buf)
}

/// Write the run's CA bundle: the host's roots (the system bundle, when the
/// host has one) and the run's CA, in a directory of capsule's own, readable
/// by the run's user (mode 0755/0644: it holds only public certificates).
pub fn write_bundle(b: &CaBundle, ca_pem: &str) -> Result<(), EgressSetupError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let err = |source| EgressSetupError::Bundle {
        path: b.file.clone(),
        source,
    };
    let mut text = match &b.system {
        Some(s) => std::fs::read(s).unwrap_or_default(),
        None => Vec::new(),
    };
    if !text.is_empty() && !text.ends_with(b"\n") {
        text.push(b'\n');
    }
    text.extend_from_slice(b"# capsule: this run's CA (TLS-terminated hosts of its proxy)\n");
    text.extend_from_slice(ca_pem.as_bytes());
    if let Some(dir) = b.file.parent() {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(dir)
            .map_err(err)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&b.file)
        .map_err(err)?;
    std::io::Write::write_all(&mut f, &text).map_err(err)
}

/// Remove the bundle and its directory (the run is over).
pub fn remove_bundle(b: &CaBundle) {
    let _ = std::fs::remove_file(&b.file);
    if let Some(dir) = b.file.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// The child's variables: each placeholder, and the CA variables naming the bundle.
pub fn child_env(e: &RunEgress, bundle: Option<&CaBundle>) -> Vec<(String, String)> {
    let mut env = e.placeholders.clone();
    if let Some(b) = bundle {
        let path = b.file.to_string_lossy().into_owned();
        env.extend(CA_VARS.iter().map(|v| (v.to_string(), path.clone())));
    }
    env
}

/// A request the proxy refused, as a `denials` entry (the shape of `why`'s
/// answers, with `kind`: `credential_misuse`, `rule` or `budget`).
pub fn denial(r: &crate::proxy::stats::EgressRefusal) -> serde_json::Value {
    use crate::proxy::stats::RefusalKind;
    let (kind, because) = match r.kind {
        RefusalKind::CredentialMisuse => (
            "credential_misuse",
            format!(
                "the request carried the placeholder of {}, which is not bound to this host, method or path (or not over http://)",
                r.rule
            ),
        ),
        RefusalKind::Rule => ("rule", format!("{} does not allow it", r.rule)),
        RefusalKind::Budget => ("budget", format!("{}'s budget is spent", r.rule)),
    };
    serde_json::json!({
        "question": format!("{} {}{}", r.method, r.host, r.path),
        "verdict": "refused",
        "allowed": false,
        "layer": "proxy",
        "layer_detail": "capsule's egress proxy (TLS terminated; the request was answered 403/429 and the run went on)",
        "kind": kind,
        "key": r.rule,
        "line": null,
        "because": because,
        "change": null,
        "no_change": null,
        "notes": [],
    })
}

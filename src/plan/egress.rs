//! The egress part of the plan (contract section 8): credentials as the
//! supervisor reads them, and `--credential VAR@HOST`.

use std::path::Path;

use super::CredentialPlan;
use crate::policy::egress::{is_env_name, Credential, CredentialSource};
use crate::policy::{NetMode, Policy};

/// The policy's credentials, checked (validation ran first: a form that does
/// not check is left out, never guessed), file sources made absolute.
pub fn credentials(policy: &Policy, base: &Path) -> Vec<CredentialPlan> {
    let home = crate::policy::home::invoking_home();
    policy
        .credentials
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let mut source = c.from.form().ok()?;
            if let crate::policy::egress::SourceForm::File(p) = &mut source {
                let raw = p.to_string_lossy().into_owned();
                *p = crate::policy::resolve::expand(&raw, base, &home).ok()?;
            }
            Some(CredentialPlan {
                name: c.name.clone(),
                source,
                hosts: c.hosts.clone(),
                methods: c.methods.clone(),
                paths: c.paths.clone(),
                inject: c.inject_form().ok()?,
                placeholder_env: c.placeholder_env.clone(),
                allow_plaintext: c.allow_plaintext,
                key: format!("credentials[{i}]"),
            })
        })
        .collect()
}

/// `--credential VAR@HOST`: a bearer token from capsule's variable VAR for
/// HOST, the run's VAR holding the placeholder; HOST joins the allowlist and
/// the network mode becomes proxy unless the policy or `--net` says otherwise.
pub fn apply_flag(policy: &mut Policy, flag: &str, net_given: bool) -> Result<(), String> {
    let (var, host) = flag
        .split_once('@')
        .ok_or_else(|| "write VAR@HOST: the host variable holding a bearer token, and the one host it may go to".to_string())?;
    if !is_env_name(var) {
        return Err(format!("`{var}` is not a variable name"));
    }
    crate::policy::hosts::check_allow_host(host)?;
    if policy.credentials.iter().any(|c| c.name == var) {
        return Err(format!("a credential named `{var}` exists already"));
    }
    if !policy.network.allow_hosts.iter().any(|h| h.host() == host) {
        policy.network.allow_hosts.push(host.into());
    }
    if !net_given && policy.network.mode == NetMode::None {
        policy.network.mode = NetMode::Proxy;
    }
    policy.credentials.push(Credential {
        name: var.to_string(),
        from: CredentialSource {
            env: Some(var.to_string()),
            ..Default::default()
        },
        hosts: vec![host.to_string()],
        methods: None,
        paths: None,
        inject: None,
        placeholder_env: vec![var.to_string()],
        allow_plaintext: false,
    });
    Ok(())
}

/// Whether the proxy terminates TLS for some host: a map entry of
/// `allow_hosts` or a credential.
pub fn terminates(net: &super::NetPlan) -> bool {
    net.mode == NetMode::Proxy && (!net.host_rules.is_empty() || !net.credentials.is_empty())
}

/// The host's system CA bundles, as the proxy's upstream side probes them.
pub use crate::proxy::egress::engine::SYSTEM_BUNDLES;

/// The first system bundle this host has, as the real file it names.
pub fn system_bundle() -> Option<std::path::PathBuf> {
    SYSTEM_BUNDLES
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
}

/// The run's CA bundle, where the proxy terminates TLS: a file in a
/// directory of capsule's own (never the run's TMPDIR, which the run can
/// write), granted read-only, shown by the view at the system bundle's path.
pub fn ca_bundle(
    net: &super::NetPlan,
    run_id: &str,
    grants: &mut Vec<super::FsGrant>,
) -> Option<super::CaBundle> {
    if !terminates(net) {
        return None;
    }
    let file = std::env::temp_dir()
        .join(format!("capsule-{run_id}.ca"))
        .join("ca-bundle.pem");
    grants.push(super::FsGrant {
        opened: super::Opened::NONE,
        path: file.clone(),
        access: super::Access::READ,
        origin: super::Origin::CaBundle,
    });
    Some(super::CaBundle {
        file,
        system: system_bundle(),
    })
}

/// Refuse a credential source the run could read or change: a `file` beneath
/// any grant (not carved out), a `command` checked as a host `command` tool.
pub fn check_sources(
    creds: &mut [CredentialPlan],
    grants: &[super::FsGrant],
    deny: &[super::FsDeny],
    policy_dir: &Path,
    host_path: Option<&str>,
) -> Result<(), (String, String)> {
    use crate::policy::egress::SourceForm;
    let reachable: Vec<(std::path::PathBuf, super::Origin)> = grants
        .iter()
        .filter(|g| g.origin != super::Origin::CaBundle)
        .map(|g| (g.path.clone(), g.origin.clone()))
        .collect();
    let writable = super::tools::writable_places(grants);
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    for c in creds.iter_mut() {
        let who = format!("{} ({})", c.key, c.name);
        match &mut c.source {
            SourceForm::Env(_) => {}
            SourceForm::File(f) => {
                let carved = deny.iter().any(|d| f.starts_with(&d.path));
                if let (Some((g, o)), false) = (super::tools::lies_in(f, &reachable), carved) {
                    return Err((
                        who,
                        format!(
                            "its file {} lies in {} ({o}), which the run can {}: keep the file outside the run's \
                             grants, or carve it out with filesystem.deny",
                            f.display(),
                            g.display(),
                            if writable.iter().any(|(w, _)| w == g) { "write" } else { "read" }
                        ),
                    ));
                }
            }
            SourceForm::Command(argv) => {
                super::tools::check_command(
                    argv,
                    policy_dir,
                    &writable,
                    host_path,
                    home.as_deref(),
                )
                .map_err(|why| (who, format!("its command: {why}")))?;
            }
        }
    }
    Ok(())
}

/// Whether a credential's source resolves now, without reading its value:
/// the variable is set, the file can be opened, the program exists. Said by
/// `capsule check` (a command is never run there).
pub fn source_resolves(c: &CredentialPlan) -> (bool, String) {
    use crate::policy::egress::SourceForm;
    match &c.source {
        SourceForm::Env(v) => match std::env::var_os(v) {
            Some(x) if !x.is_empty() => (true, format!("${v} is set")),
            Some(_) => (false, format!("${v} is empty")),
            None => (false, format!("${v} is not set in capsule's environment")),
        },
        SourceForm::File(p) => match std::fs::File::open(p) {
            Ok(_) => (true, format!("{} is readable", p.display())),
            Err(e) => (false, format!("{}: {e}", p.display())),
        },
        SourceForm::Command(argv) => {
            let prog = argv.first().map(String::as_str).unwrap_or("");
            if Path::new(prog).is_file() {
                (true, format!("{prog} exists (not run by check)"))
            } else {
                (false, format!("{prog} not found"))
            }
        }
    }
}

/// How a credential goes into requests, for `check` (`header Authorization: Bearer {}`).
pub fn inject_text(c: &CredentialPlan) -> String {
    use crate::policy::egress::InjectForm;
    match &c.inject {
        InjectForm::Header { name, format } => format!("header {name}: {format}"),
        InjectForm::Basic { username } => format!("basic auth as {username}"),
        InjectForm::Query { param } => format!("query parameter {param}"),
    }
}

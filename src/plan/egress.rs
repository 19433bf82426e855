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

//! The fail-closed checks of contract section 8: map entries of
//! `network.allow_hosts` and `credentials:`.

use std::collections::BTreeSet;

use super::super::egress::{
    check_methods, check_paths, check_ref_patterns, check_repo_patterns, is_env_name, Credential,
    GitRules, HostRules,
};
use super::super::hosts::{check_allow_host, split_port};
use super::super::{NetMode, Policy, PolicyError};
use super::Validator;
use crate::proxy::allow_hosts::{Allowlist, TargetHost};

impl Validator<'_> {
    /// One map entry of `network.allow_hosts` (`key` is its path).
    pub(super) fn host_rules(&self, key: &str, r: &HostRules) -> Result<(), PolicyError> {
        check_allow_host(&r.host).map_err(|e| self.err(&format!("{key}.host"), e))?;
        if let Some(m) = &r.methods {
            check_methods(m).map_err(|e| self.err(&format!("{key}.methods"), e))?;
        }
        if let Some(p) = &r.paths {
            check_paths(p).map_err(|e| self.err(&format!("{key}.paths"), e))?;
        }
        if let Some(g) = &r.git {
            self.git_rules(key, r, g)?;
        }
        if r.max_requests == Some(0) {
            return Err(self.err(
                &format!("{key}.max_requests"),
                "0 would allow no request; leave the key out for no budget",
            ));
        }
        Ok(())
    }

    /// `git:` of a map entry: no `methods`/`paths` beside it (git decides what
    /// passes), repository and ref patterns that check.
    fn git_rules(&self, key: &str, r: &HostRules, g: &GitRules) -> Result<(), PolicyError> {
        if r.methods.is_some() || r.paths.is_some() {
            return Err(self.err(
                &format!("{key}.git"),
                "an entry with git rules allows only git requests: leave methods and paths out (or give another entry for the same host)",
            ));
        }
        check_repo_patterns(&g.fetch).map_err(|e| self.err(&format!("{key}.git.fetch"), e))?;
        let Some(push) = &g.push else { return Ok(()) };
        if push.repos.is_empty() {
            return Err(self.err(
                &format!("{key}.git.push.repos"),
                "an empty list would allow no push; leave push out instead",
            ));
        }
        check_repo_patterns(&push.repos)
            .map_err(|e| self.err(&format!("{key}.git.push.repos"), e))?;
        check_ref_patterns(&push.branches)
            .map_err(|e| self.err(&format!("{key}.git.push.branches"), e))?;
        check_ref_patterns(&push.tags).map_err(|e| self.err(&format!("{key}.git.push.tags"), e))?;
        Ok(())
    }

    /// `credentials:`: names, sources, hosts covered by the allowlist,
    /// injection forms, placeholder variables.
    pub(super) fn credentials(&self, p: &Policy) -> Result<(), PolicyError> {
        if p.credentials.is_empty() {
            return Ok(());
        }
        if p.network.mode != NetMode::Proxy {
            return Err(self.err(
                "credentials",
                format!(
                    "credentials are injected by capsule's proxy, but network.mode is {}: use `mode: proxy` (or --net proxy) with the credentials' hosts in allow_hosts",
                    p.network.mode.as_str()
                ),
            ));
        }
        let hosts: Vec<String> = p
            .network
            .allow_hosts
            .iter()
            .map(|h| h.host().to_string())
            .collect();
        let allow = Allowlist::parse(&hosts).ok();
        let mut names = BTreeSet::new();
        let mut vars = BTreeSet::new();
        for (i, c) in p.credentials.iter().enumerate() {
            let key = format!("credentials[{i}]");
            self.credential(&key, c, allow.as_ref())?;
            if !names.insert(c.name.as_str()) {
                return Err(self.err(
                    &format!("{key}.name"),
                    format!("`{}` names two credentials", c.name),
                ));
            }
            for v in &c.placeholder_env {
                if !vars.insert(v.as_str()) {
                    return Err(self.err(
                        &format!("{key}.placeholder_env"),
                        format!("`{v}` is the placeholder of two credentials"),
                    ));
                }
                if p.env.set.contains_key(v) || p.env.pass.iter().any(|x| x == v) {
                    return Err(self.err(
                        &format!("{key}.placeholder_env"),
                        format!("`{v}` is also in the env section; the run's {v} is the placeholder, so remove it there"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn credential(
        &self,
        key: &str,
        c: &Credential,
        allow: Option<&Allowlist>,
    ) -> Result<(), PolicyError> {
        if c.name.is_empty()
            || !c
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(self.err(
                &format!("{key}.name"),
                format!("`{}`: a name is letters, digits, `-`, `_`, `.`", c.name),
            ));
        }
        c.from
            .form()
            .map_err(|e| self.err(&format!("{key}.from"), e))?;
        if c.hosts.is_empty() {
            return Err(self.err(
                &format!("{key}.hosts"),
                "name the hosts this credential may go to",
            ));
        }
        for (j, h) in c.hosts.iter().enumerate() {
            let hk = format!("{key}.hosts[{j}]");
            check_allow_host(h).map_err(|e| self.err(&hk, e))?;
            if !allow.is_some_and(|a| covered(a, h)) {
                return Err(self.err(
                    &hk,
                    format!("`{h}` is not in network.allow_hosts: add it there (the credential only says where the value may go)"),
                ));
            }
        }
        if let Some(m) = &c.methods {
            check_methods(m).map_err(|e| self.err(&format!("{key}.methods"), e))?;
        }
        if let Some(p) = &c.paths {
            check_paths(p).map_err(|e| self.err(&format!("{key}.paths"), e))?;
        }
        c.inject_form()
            .map_err(|e| self.err(&format!("{key}.inject"), e))?;
        for v in &c.placeholder_env {
            if !is_env_name(v) {
                return Err(self.err(
                    &format!("{key}.placeholder_env"),
                    format!("`{v}` is not a variable name"),
                ));
            }
        }
        Ok(())
    }
}

/// Is a credential host (`name`, `*.suffix`, an IP literal, each with an
/// optional `:PORT`) inside what the allowlist reaches? A wildcard must be
/// listed as such; a name or literal must be permitted on its port (on 443
/// when it names none).
fn covered(allow: &Allowlist, h: &str) -> bool {
    // `h` passed check_allow_host: its split cannot fail.
    let Ok((host, port)) = split_port(h) else {
        return false;
    };
    let port = port.and_then(|p| p.parse::<u16>().ok());
    if host.starts_with("*.") {
        return allow.lists_wildcard(&host.to_ascii_lowercase(), port);
    }
    match TargetHost::parse(host) {
        Some(t) => allow.permits_target(&t, port.unwrap_or(443)),
        None => false,
    }
}

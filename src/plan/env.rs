//! The child's environment, built from nothing.
//!
//! PATH (the host's), HOME, TMPDIR, LANG=C.UTF-8 unless passed, then the
//! policy's `env.pass` (host values, when set) and `env.set`, then what
//! capsule itself adds (proxy variables, CAPSULE_RPC_FD). Variables that
//! change how interpreters load code (LD_*, PYTHONPATH, NODE_OPTIONS, ...)
//! are refused even when a policy names them. No other host variable
//! reaches the child.

use crate::policy::validate::is_refused_env;
use crate::policy::Env;

/// PATH when the host has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, thiserror::Error)]
#[error("environment variable {name} is refused in the sandbox ({key}); remove it from the policy")]
pub struct EnvError {
    pub name: String,
    pub key: String,
}

/// Build the environment in order. `home`/`tmpdir` are the child's.
pub fn build(
    policy: &Env,
    host_path: Option<&str>,
    home: &str,
    tmpdir: Option<&str>,
    extra: &[(String, String)],
) -> Result<Vec<(String, String)>, EnvError> {
    let mut env: Vec<(String, String)> =
        Vec::with_capacity(8 + policy.pass.len() + policy.set.len() + extra.len());
    let put = |env: &mut Vec<(String, String)>, k: &str, v: String| {
        if let Some(slot) = env.iter_mut().find(|(n, _)| n == k) {
            slot.1 = v;
        } else {
            env.push((k.to_string(), v));
        }
    };
    put(
        &mut env,
        "PATH",
        host_path
            .filter(|p| !p.is_empty())
            .unwrap_or(DEFAULT_PATH)
            .to_string(),
    );
    put(&mut env, "HOME", home.to_string());
    if let Some(t) = tmpdir {
        put(&mut env, "TMPDIR", t.to_string());
    }
    put(&mut env, "LANG", "C.UTF-8".to_string());
    for (i, name) in policy.pass.iter().enumerate() {
        if is_refused_env(name) {
            return Err(EnvError {
                name: name.clone(),
                key: format!("env.pass[{i}]"),
            });
        }
        if let Ok(v) = std::env::var(name) {
            put(&mut env, name, v);
        }
    }
    for (name, value) in &policy.set {
        if is_refused_env(name) {
            return Err(EnvError {
                name: name.clone(),
                key: format!("env.set.{name}"),
            });
        }
        put(&mut env, name, value.clone());
    }
    for (name, value) in extra {
        put(&mut env, name, value.clone());
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_from_nothing_with_refusals() {
        std::env::set_var("CAPSULE_ENV_TEST_SECRET", "s3cret");
        std::env::set_var("CAPSULE_ENV_TEST_PASS", "ok");
        let mut p = Env::default();
        p.pass.push("CAPSULE_ENV_TEST_PASS".into());
        p.set.insert("A".into(), "1".into());
        let env = build(&p, Some("/bin"), "/h", Some("/t"), &[]).unwrap();
        assert!(env.iter().all(|(k, _)| k != "CAPSULE_ENV_TEST_SECRET"));
        assert!(env.contains(&("CAPSULE_ENV_TEST_PASS".into(), "ok".into())));
        assert!(env.contains(&("LANG".into(), "C.UTF-8".into())));
        let mut bad = Env::default();
        bad.set.insert("LD_PRELOAD".into(), "/x.so".into());
        assert!(build(&bad, None, "/h", None, &[]).is_err());
        let mut bad = Env::default();
        bad.pass.push("PYTHONPATH".into());
        assert!(build(&bad, None, "/h", None, &[]).is_err());
    }
}

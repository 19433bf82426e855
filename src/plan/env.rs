//! The child's environment, built from nothing.
//!
//! PATH (the host's), HOME, TMPDIR, LANG=C.UTF-8 unless passed, then the
//! policy's `env.pass` (host values, when set) and `env.set`, then what
//! capsule itself adds (proxy variables, CAPSULE_RPC_FD). Variables that
//! change how interpreters load code (LD_*, PYTHONPATH, NODE_OPTIONS, ...)
//! are refused even when a policy names them, except the module search
//! paths `PYTHONPATH` and `NODE_PATH` when every entry lies in a place that
//! is read-only in the child (see [`check_search_path`]). No other host
//! variable reaches the child.

use std::path::PathBuf;

use super::Access;
pub use crate::policy::search_path::{check_search_path, is_search_path};
use crate::policy::validate::is_refused_env;
use crate::policy::Env;

/// PATH when the host has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, thiserror::Error)]
#[error("environment variable {name} is refused in the sandbox ({key}): {why}")]
pub struct EnvError {
    pub name: String,
    pub key: String,
    pub why: String,
}

const REFUSED_WHY: &str =
    "it makes programs load code or options from outside the policy; remove it from the policy";

/// Build the environment in order. `home`/`tmpdir` are the child's.
pub fn build(
    policy: &Env,
    host_path: Option<&str>,
    home: &str,
    tmpdir: Option<&str>,
    extra: &[(String, String)],
    grants: &[(PathBuf, Access)],
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
    let check = |name: &str, key: String, value: Option<&str>| -> Result<(), EnvError> {
        let why = if is_search_path(name) {
            match value.map(|v| check_search_path(v, grants)) {
                None | Some(Ok(())) => return Ok(()),
                Some(Err(why)) => why,
            }
        } else if is_refused_env(name) {
            REFUSED_WHY.to_string()
        } else {
            return Ok(());
        };
        Err(EnvError {
            name: name.to_string(),
            key,
            why,
        })
    };
    for (i, name) in policy.pass.iter().enumerate() {
        let v = std::env::var(name).ok();
        check(name, format!("env.pass[{i}]"), v.as_deref())?;
        if let Some(v) = v {
            put(&mut env, name, v);
        }
    }
    for (name, value) in &policy.set {
        check(name, format!("env.set.{name}"), Some(value))?;
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
        let env = build(&p, Some("/bin"), "/h", Some("/t"), &[], &[]).unwrap();
        assert!(env.iter().all(|(k, _)| k != "CAPSULE_ENV_TEST_SECRET"));
        assert!(env.contains(&("CAPSULE_ENV_TEST_PASS".into(), "ok".into())));
        assert!(env.contains(&("LANG".into(), "C.UTF-8".into())));
        let mut bad = Env::default();
        bad.set.insert("LD_PRELOAD".into(), "/x.so".into());
        assert!(build(&bad, None, "/h", None, &[], &[]).is_err());
    }

    #[test]
    fn search_paths_only_in_read_only_places() {
        let g = vec![
            (PathBuf::from("/opt/pack"), Access::READ),
            (PathBuf::from("/opt/pack/cache"), Access::WRITE),
            (PathBuf::from("/srv/lib"), Access::EXEC),
            (PathBuf::from("/work"), Access::WRITE),
        ];
        assert!(check_search_path("/srv/lib", &g).is_ok());
        assert!(check_search_path("/srv/lib/a:/srv/lib/b", &g).is_ok());
        for bad in [
            "/work/lib",
            "/opt/pack",
            "/opt/pack/cache/x",
            "/srv/lib:",
            "",
            "srv/lib",
            "/srv/lib/../../work",
            "/etc",
        ] {
            assert!(check_search_path(bad, &g).is_err(), "{bad}");
        }
        let mut p = Env::default();
        p.set.insert("PYTHONPATH".into(), "/work/evil".into());
        let e = build(&p, None, "/h", None, &[], &g).unwrap_err();
        assert!(e.to_string().contains("env.set.PYTHONPATH"), "{e}");
        assert!(e.to_string().contains("writable"), "{e}");
        p.set.insert("PYTHONPATH".into(), "/srv/lib".into());
        p.set.insert("NODE_PATH".into(), "/srv/lib/node".into());
        let env = build(&p, None, "/h", None, &[], &g).unwrap();
        assert!(env.contains(&("PYTHONPATH".into(), "/srv/lib".into())));
    }
}

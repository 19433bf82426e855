//! The egress keys of contract section 8: `network.allow_hosts` entries
//! given as maps (TLS terminated, method/path rules and budgets),
//! `network.upstream_ca`, and `credentials:` (a value the proxy injects,
//! which the run only ever sees as a placeholder).
//!
//! These are plain types and their checks; the proxy (`crate::proxy::egress`)
//! enforces them and the supervisor reads each credential's value on the host.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One `network.allow_hosts` entry: a host (spliced end to end), or a map
/// whose host is TLS-terminated by the proxy so that its rules apply.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum AllowHost {
    /// `api.github.com`, `*.example.org`, `127.0.0.1:8080`, `[::1]:443`.
    Host(String),
    /// `{host: ..., methods: [...], paths: [...], ...}`.
    Rules(HostRules),
}

impl AllowHost {
    /// The host as written (every form a string entry takes).
    pub fn host(&self) -> &str {
        match self {
            AllowHost::Host(h) => h,
            AllowHost::Rules(r) => &r.host,
        }
    }
    /// The rules of a map entry.
    pub fn rules(&self) -> Option<&HostRules> {
        match self {
            AllowHost::Host(_) => None,
            AllowHost::Rules(r) => Some(r),
        }
    }
}

/// A string or a map, and a map's own errors (an unknown key names itself
/// and the keys expected), not serde's "no variant matched".
impl<'de> Deserialize<'de> for AllowHost {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = AllowHost;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a host (`api.github.com`) or a map `{host: ..., methods: [...], paths: [...]}`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AllowHost, E> {
                Ok(AllowHost::Host(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<AllowHost, A::Error> {
                HostRules::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(AllowHost::Rules)
            }
        }
        d.deserialize_any(V)
    }
}

impl From<&str> for AllowHost {
    fn from(s: &str) -> Self {
        AllowHost::Host(s.to_string())
    }
}

impl From<String> for AllowHost {
    fn from(s: String) -> Self {
        AllowHost::Host(s)
    }
}

impl PartialEq<String> for AllowHost {
    fn eq(&self, other: &String) -> bool {
        matches!(self, AllowHost::Host(h) if h == other)
    }
}

impl PartialEq<&str> for AllowHost {
    fn eq(&self, other: &&str) -> bool {
        matches!(self, AllowHost::Host(h) if h == other)
    }
}

/// A map entry of `network.allow_hosts`: TLS is terminated for this host and
/// each request is checked against these rules (403 outside them, 429 past a budget).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostRules {
    /// The host, in every form a string entry takes (name, `*.suffix`, IP literal, `:PORT`).
    pub host: String,
    /// Methods allowed (upper case, e.g. GET, POST); default: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// Paths allowed: `/repos/acme/*/issues`, `/repos/acme/widget/**`, `/v1/*.json`
    /// (`*` any characters within one segment, `**` any number of segments); default: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// Requests to this entry in one run; past it, 429.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    /// Request body bytes sent to this entry in one run; past it, 429.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_upload_bytes: Option<u64>,
    /// Git smart-HTTP rules: only git fetches and pushes pass to this host,
    /// for the repositories named, and a push only to the refs named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitRules>,
}

/// `git: {fetch: [...], push: {...}}` on an `allow_hosts` map entry.
///
/// Repositories are the URL path before `/info/refs` or `/git-*-pack`, without
/// the leading `/` and an optional `.git` suffix (`acme/widget`), compared
/// case-sensitively, byte for byte (on a server that ignores case, write
/// them as the remote URL spells them); `*` matches within one segment,
/// `**` any number of segments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitRules {
    /// Repositories that may be cloned or fetched (`["**"]`: all); default: none.
    #[serde(default)]
    pub fetch: Vec<String>,
    /// What may be pushed; left out: no push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<GitPush>,
}

/// `push: {repos: [...], branches: [...], tags: [...], delete: false}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitPush {
    /// Repositories that may be pushed to.
    pub repos: Vec<String>,
    /// Branches (names under `refs/heads/`, e.g. `agent/*`) a push may update; default: none.
    #[serde(default)]
    pub branches: Vec<String>,
    /// Tags (names under `refs/tags/`) a push may create or update; default: none.
    #[serde(default)]
    pub tags: Vec<String>,
    /// May a push delete a branch or tag it may update (default false)?
    #[serde(default)]
    pub delete: bool,
}

/// Check a `git.fetch` / `git.push.repos` list: `acme/widget`, `acme/*`, `**`;
/// no leading `/`, no `.git` suffix (it is stripped from requests before comparing).
pub fn check_repo_patterns(repos: &[String]) -> Result<(), String> {
    for r in repos {
        if r.starts_with('/') || r.ends_with('/') {
            return Err(format!(
                "repository `{r}`: write it without a leading or trailing / (e.g. acme/widget)"
            ));
        }
        if r.ends_with(".git") {
            return Err(format!(
                "repository `{r}`: write it without `.git` (requests are compared with it stripped)"
            ));
        }
        check_path_pattern(&format!("/{r}")).map_err(|e| format!("repository `{r}`: {e}"))?;
    }
    Ok(())
}

/// Check a `git.push.branches` / `tags` list: names under `refs/heads/` or
/// `refs/tags/` (`agent/*`, `release/**`), without the `refs/...` prefix.
pub fn check_ref_patterns(names: &[String]) -> Result<(), String> {
    for n in names {
        if n.starts_with("refs/") {
            return Err(format!(
                "`{n}`: write the name without refs/heads/ or refs/tags/ (e.g. agent/*)"
            ));
        }
        if n.is_empty()
            || n.starts_with('/')
            || n.bytes()
                .any(|b| b.is_ascii_control() || b" ~^:?[\\".contains(&b) || b >= 0x7f)
        {
            return Err(format!(
                "`{n}` is not a ref name pattern (no leading /, spaces, ~ ^ : ? [ \\)"
            ));
        }
        check_path_pattern(&format!("/{n}")).map_err(|e| format!("`{n}`: {e}"))?;
    }
    Ok(())
}

/// One credential: read on the host, injected by the proxy into requests to
/// its hosts; the run sees only a per-run placeholder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// What the credential is called in results, audit records and refusals
    /// (the value never is).
    pub name: String,
    /// Where capsule reads the value on the host: exactly one of `env`, `file`, `command`.
    pub from: CredentialSource,
    /// Hosts it may go to (each covered by a `network.allow_hosts` entry).
    pub hosts: Vec<String>,
    /// Methods it may go with; default: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// Paths it may go to (`*` one segment, `**` any); default: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// How the proxy puts it in a request; default `{header: Authorization, format: "Bearer {}"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject: Option<Inject>,
    /// Variables that hold the run's placeholder (`capsule-phantom-...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placeholder_env: Vec<String>,
    /// Also over cleartext `http://` (default false: never).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_plaintext: bool,
}

/// Where a credential's value comes from (exactly one key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialSource {
    /// A variable of capsule's own environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A file read at start (relative to the policy's directory); refused
    /// when the run could read or write it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// A host program and its arguments, run at start; its standard output
    /// (one trailing newline removed) is the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

/// Where the proxy puts a credential (exactly one form).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Inject {
    /// A header, with `format` (default `{}`): `{header: Authorization, format: "Bearer {}"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The header value, `{}` standing for the credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// `Authorization: Basic` with this user name and the credential as password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicInject>,
    /// A query parameter of this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// `inject: {basic: {username: x-access-token}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicInject {
    pub username: String,
}

/// The injection form, checked: what the proxy is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InjectForm {
    Header { name: String, format: String },
    Basic { username: String },
    Query { param: String },
}

/// The source, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceForm {
    Env(String),
    File(PathBuf),
    Command(Vec<String>),
}

impl SourceForm {
    /// `env`, `file` or `command`: what `capsule check` shows (never the value).
    pub fn kind(&self) -> &'static str {
        match self {
            SourceForm::Env(_) => "env",
            SourceForm::File(_) => "file",
            SourceForm::Command(_) => "command",
        }
    }
    /// The source as a user would name it (a variable, a path, a program).
    pub fn describe(&self) -> String {
        match self {
            SourceForm::Env(v) => format!("env {v}"),
            SourceForm::File(p) => format!("file {}", p.display()),
            SourceForm::Command(c) => format!("command {}", c.first().map_or("", |s| s.as_str())),
        }
    }
}

impl CredentialSource {
    /// Exactly one of the three keys.
    pub fn form(&self) -> Result<SourceForm, String> {
        match (&self.env, &self.file, &self.command) {
            (Some(v), None, None) => {
                if !is_env_name(v) {
                    return Err(format!("`{v}` is not a variable name"));
                }
                Ok(SourceForm::Env(v.clone()))
            }
            (None, Some(p), None) => {
                if p.as_os_str().is_empty() {
                    return Err("empty file path".into());
                }
                Ok(SourceForm::File(p.clone()))
            }
            (None, None, Some(c)) => {
                if c.first().is_none_or(|p| p.is_empty()) {
                    return Err("the command is empty: give [program, args...]".into());
                }
                Ok(SourceForm::Command(c.clone()))
            }
            (None, None, None) => {
                Err("give one of env: VAR, file: PATH, command: [prog, args...]".into())
            }
            _ => Err("give only one of env, file, command".into()),
        }
    }
}

impl Credential {
    /// The injection form in force (the default is a bearer token).
    pub fn inject_form(&self) -> Result<InjectForm, String> {
        let Some(i) = &self.inject else {
            return Ok(InjectForm::Header {
                name: "Authorization".into(),
                format: "Bearer {}".into(),
            });
        };
        match (&i.header, &i.basic, &i.query) {
            (Some(h), None, None) => {
                if h.is_empty() || !h.bytes().all(is_tchar) {
                    return Err(format!("inject.header `{h}` is not a header name"));
                }
                let format = i.format.clone().unwrap_or_else(|| "{}".into());
                if format.matches("{}").count() != 1 {
                    return Err(format!("inject.format `{format}` must hold `{{}}` exactly once (where the value goes)"));
                }
                if format.bytes().any(|b| b.is_ascii_control()) {
                    return Err("inject.format holds a control character".into());
                }
                Ok(InjectForm::Header {
                    name: h.clone(),
                    format,
                })
            }
            (None, Some(b), None) if i.format.is_none() => {
                if b.username.contains(':') || b.username.bytes().any(|c| c.is_ascii_control()) {
                    return Err(
                        "inject.basic.username must not hold ':' or control characters".into(),
                    );
                }
                Ok(InjectForm::Basic {
                    username: b.username.clone(),
                })
            }
            (None, None, Some(q)) if i.format.is_none() => {
                if q.is_empty()
                    || !q
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"-_.~".contains(&c))
                {
                    return Err(format!(
                        "inject.query `{q}` must be a plain parameter name (letters, digits, -_.~)"
                    ));
                }
                Ok(InjectForm::Query { param: q.clone() })
            }
            (None, None, None) => Err("inject needs one of header, basic, query".into()),
            _ => Err("inject takes one of header (with format), basic, query".into()),
        }
    }
}

/// RFC 9110 token characters (header names, methods).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A POSIX-ish variable name: letters, digits, `_`, not starting with a digit.
pub fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.as_bytes()[0].is_ascii_digit()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Check a `methods:` list: upper-case tokens, not empty.
pub fn check_methods(methods: &[String]) -> Result<(), String> {
    if methods.is_empty() {
        return Err(
            "an empty list would allow nothing; leave the key out to allow any method".into(),
        );
    }
    for m in methods {
        if m.is_empty()
            || !m
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "`{m}` is not a method: write it in upper case, e.g. GET, POST"
            ));
        }
    }
    Ok(())
}

/// Check a `paths:` list: each starts with `/`, segments are literal, `*` or
/// `**`, no `.`/`..`/empty segments, no `?`/`#`/`;`/`%`.
pub fn check_paths(paths: &[String]) -> Result<(), String> {
    if paths.is_empty() {
        return Err(
            "an empty list would allow nothing; leave the key out to allow any path".into(),
        );
    }
    for p in paths {
        check_path_pattern(p)?;
    }
    Ok(())
}

fn check_path_pattern(p: &str) -> Result<(), String> {
    let Some(rest) = p.strip_prefix('/') else {
        return Err(format!("path `{p}` must start with /"));
    };
    if p.bytes()
        .any(|b| b.is_ascii_control() || b" ?#;%\\".contains(&b))
    {
        return Err(format!(
            "path `{p}` holds a character rules cannot name (space, ?, #, ;, %, \\): paths are compared decoded"
        ));
    }
    if rest.is_empty() {
        return Ok(());
    }
    let segs: Vec<&str> = rest.split('/').collect();
    for (i, s) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        match *s {
            "" if last => {}
            "" => return Err(format!("path `{p}` has an empty segment (//)")),
            "." | ".." => return Err(format!("path `{p}` has a `{s}` segment")),
            "**" => {}
            s if s.contains("**") => {
                return Err(format!(
                    "path `{p}`: `**` stands for any number of whole segments (`/a/**`); `*` matches within one segment"
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_patterns() {
        for ok in [
            "/",
            "/repos/acme/widget/**",
            "/a/*/b",
            "/a/",
            "/**",
            "/a/b*",
            "/v1/*.json",
        ] {
            assert!(check_path_pattern(ok).is_ok(), "{ok}");
        }
        for bad in [
            "repos", "/a//b", "/a/../b", "/a/./b", "/a/b**", "/a?x", "/a;b", "/%2e", "/a\\b",
        ] {
            assert!(check_path_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn inject_forms() {
        let mut c = Credential {
            name: "t".into(),
            from: CredentialSource {
                env: Some("T".into()),
                ..Default::default()
            },
            hosts: vec!["h".into()],
            methods: None,
            paths: None,
            inject: None,
            placeholder_env: vec![],
            allow_plaintext: false,
        };
        assert_eq!(
            c.inject_form().unwrap(),
            InjectForm::Header {
                name: "Authorization".into(),
                format: "Bearer {}".into()
            }
        );
        c.inject = Some(Inject {
            header: Some("X-Token".into()),
            ..Default::default()
        });
        assert_eq!(
            c.inject_form().unwrap(),
            InjectForm::Header {
                name: "X-Token".into(),
                format: "{}".into()
            }
        );
        c.inject = Some(Inject {
            header: Some("X".into()),
            format: Some("a {} {}".into()),
            ..Default::default()
        });
        assert!(c.inject_form().is_err());
        c.inject = Some(Inject {
            query: Some("access_token".into()),
            header: Some("X".into()),
            ..Default::default()
        });
        assert!(c.inject_form().is_err());
        c.inject = Some(Inject {
            basic: Some(BasicInject {
                username: "a:b".into(),
            }),
            ..Default::default()
        });
        assert!(c.inject_form().is_err());
    }

    #[test]
    fn sources() {
        let s = CredentialSource {
            env: Some("1X".into()),
            ..Default::default()
        };
        assert!(s.form().is_err());
        let s = CredentialSource::default();
        assert!(s.form().is_err());
        let s = CredentialSource {
            env: Some("X".into()),
            file: Some("f".into()),
            ..Default::default()
        };
        assert!(s.form().is_err());
        let s = CredentialSource {
            command: Some(vec![]),
            ..Default::default()
        };
        assert!(s.form().is_err());
    }
}

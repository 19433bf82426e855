//! Reading a policy file (YAML or JSON) into [`Policy`], with errors that name
//! `file:line:column`, the key path and what to do.

use std::path::{Path, PathBuf};

use serde_saphyr::MessageFormatter;
use sha2::{Digest, Sha256};

use super::error::one_line;
pub use super::error::{PolicyError, Position};
use super::lines::{self, LineCol};
use super::{LoadedPolicy, Policy};

/// The largest policy file we read (a policy is a few hundred lines at most).
const MAX_POLICY_BYTES: u64 = 1 << 20;

/// Read, parse and fingerprint a policy file. YAML or JSON is chosen by the
/// extension (`.json`, `.yaml`, `.yml`), else by content (`{` first → JSON).
///
/// This only parses (unknown keys, types, `version`); paths are resolved by
/// [`super::resolve::resolve_fs`] and the fail-closed rules are applied by
/// [`super::validate::validate`].
pub fn load_file(path: &Path) -> Result<LoadedPolicy, PolicyError> {
    let file = path.display().to_string();
    let read_err = |source| PolicyError::Read {
        file: file.clone(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if !meta.is_file() {
        return Err(syntax(
            &file,
            None,
            "",
            "not a regular file (give the path of a .yaml or .json policy)",
        ));
    }
    if meta.len() > MAX_POLICY_BYTES {
        return Err(syntax(&file, None, "", "policy file larger than 1 MiB"));
    }
    let bytes = std::fs::read(path).map_err(read_err)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| syntax(&file, None, "", &format!("not UTF-8 text ({e})")))?;
    let json = match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("json") => Some(true),
        Some(e) if e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml") => Some(false),
        _ => None,
    };
    let base_dir = base_dir_of(path).map_err(read_err)?;
    let mut lp = load_str(text, &file, json, &base_dir)?;
    lp.source = Some(path.to_path_buf());
    // load_str already hashed `text`, which is `bytes`.
    Ok(lp)
}

/// Parse policy text that did not come from a file of its own (a starter, a
/// test, stdin). `name` labels errors; relative paths will resolve against
/// `base_dir`. `source` is left `None` and `sha256` is that of `text`.
pub fn load_str(
    text: &str,
    name: &str,
    json: Option<bool>,
    base_dir: &Path,
) -> Result<LoadedPolicy, PolicyError> {
    let json = json.unwrap_or_else(|| looks_like_json(text));
    let policy = parse_str(text, name, Some(json))?;
    let lines = lines::scan(text, json)
        .into_iter()
        .map(|(k, (line, _))| (k, line))
        .collect();
    Ok(LoadedPolicy {
        policy,
        source: None,
        base_dir: base_dir.to_path_buf(),
        sha256: sha256_hex(text.as_bytes()),
        lines,
    })
}

/// Parse policy text. `name` labels errors (usually the file name);
/// `json`: `Some(true)` JSON, `Some(false)` YAML, `None` guess from content.
pub fn parse_str(text: &str, name: &str, json: Option<bool>) -> Result<Policy, PolicyError> {
    let json = json.unwrap_or_else(|| looks_like_json(text));
    if is_blank(text, json) {
        return Err(syntax(
            name,
            None,
            "",
            "empty policy (a policy starts with `version: 1`)",
        ));
    }
    let policy = if json {
        parse_json(text, name)?
    } else {
        parse_yaml(text, name)?
    };
    if policy.version != 1 {
        let at = lines::lookup_col(&lines::scan(text, json), "version");
        return Err(PolicyError::Invalid {
            at: position(name, at),
            key: "version".into(),
            message: format!(
                "unsupported version {} (only `version: 1` exists)",
                policy.version
            ),
        });
    }
    Ok(policy)
}

/// `{` as the first non-space character means JSON.
pub fn looks_like_json(text: &str) -> bool {
    text.trim_start_matches('\u{feff}')
        .trim_start()
        .starts_with('{')
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn base_dir_of(path: &Path) -> std::io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let dir = abs
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    // Canonical when possible, so relative grants resolve the same way whatever the cwd.
    Ok(dir.canonicalize().unwrap_or(dir))
}

fn is_blank(text: &str, json: bool) -> bool {
    if json {
        return text.trim().is_empty();
    }
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
    })
}

fn syntax(file: &str, at: Option<LineCol>, key: &str, message: &str) -> PolicyError {
    PolicyError::Syntax {
        at: position(file, at),
        key: if key.is_empty() || key == "." || key == "?" {
            "(top level)".into()
        } else {
            key.into()
        },
        message: message.into(),
    }
}

pub(crate) fn position(file: &str, at: Option<LineCol>) -> Position {
    Position {
        file: Some(file.to_string()),
        line: at.map(|a| a.0),
        column: at.map(|a| a.1),
    }
}

fn parse_yaml(text: &str, name: &str) -> Result<Policy, PolicyError> {
    // The success path skips serde_path_to_error (its wrappers cost start-up
    // time); an error is re-parsed with it to name the key path.
    if let Ok(p) = serde_saphyr::with_deserializer_from_str(text, |de| {
        <Policy as serde::Deserialize>::deserialize(de)
    }) {
        return Ok(p);
    }
    let mut path: Option<String> = None;
    let res = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    let err = match res {
        Ok(p) => return Ok(p),
        Err(e) => e,
    };
    let inner = err.without_snippet();
    let at = inner
        .location()
        .filter(|l| l.line() > 0)
        .map(|l| (l.line() as usize, l.column() as usize));
    let path = path.unwrap_or_default();
    let message = match inner {
        serde_saphyr::Error::SerdeUnknownField {
            field, expected, ..
        } => {
            let key = unknown_key_path(&path, field);
            return Err(syntax(name, at, &key, &unknown_key_message(expected)));
        }
        serde_saphyr::Error::SerdeMissingField { field, .. } => {
            let key = if path == "." {
                field.to_string()
            } else {
                format!("{path}.{field}")
            };
            return Err(syntax(name, at, &key, &missing_key_message(field)));
        }
        other => one_line(&serde_saphyr::UserMessageFormatter.format_message(other)),
    };
    let mut message = friendly(&path, &message);
    if let Some(hint) = yaml_hint(text, &message, at.map(|a| a.0)) {
        message = format!("{message} ({hint})");
    }
    Err(syntax(name, at, &path, &message))
}

/// A hint for YAML syntax errors that the parser reports where it gave up,
/// often a line or more after the mistake: an unclosed `[`/`{`/quote is
/// named with its own line.
fn yaml_hint(text: &str, message: &str, err_line: Option<usize>) -> Option<String> {
    if message.contains("did not find expected ','")
        || message.contains("flow sequence")
        || message.contains("flow mapping")
    {
        // The last line, up to the error, that leaves a bracket open.
        let mut open: Vec<(char, usize)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            if err_line.is_some_and(|e| n > e) {
                break;
            }
            let mut quote: Option<char> = None;
            for c in line.chars() {
                match (quote, c) {
                    (Some(q), c) if c == q => quote = None,
                    (Some(_), _) => {}
                    (None, '#') => break,
                    (None, '"' | '\'') => quote = Some(c),
                    (None, '[' | '{') => open.push((c, n)),
                    (None, ']' | '}') => {
                        open.pop();
                    }
                    _ => {}
                }
            }
        }
        return Some(match open.first() {
            Some((c, n)) => format!(
                "the `{c}` opened on line {n} is not closed: YAML notices only where it gives up; close it with `{}`",
                if *c == '[' { ']' } else { '}' }
            ),
            None => "an unclosed `[`, `{` or quote above this line: YAML notices only where it gives up".into(),
        });
    }
    if message.contains("mapping values are not allowed")
        || message.contains("did not find expected key")
    {
        return Some(
            "check the indentation of this line and the one above: keys of one mapping line up, \
             and a value after `key:` needs a space"
                .into(),
        );
    }
    // `read:["."]` is one plain scalar to YAML, not a key and a value.
    let line = err_line.and_then(|n| text.lines().nth(n.saturating_sub(1)));
    if let Some((key, rest)) = line.and_then(|l| l.trim_start().split_once(':')) {
        let bare = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if bare && rest.starts_with(|c: char| !c.is_whitespace()) {
            return Some(format!(
                "a space is missing after `{key}:` (write `{key}: {rest}`)"
            ));
        }
    }
    if text.contains('\t') && message.contains("tab") {
        return Some("YAML indents with spaces, not tabs".into());
    }
    None
}

fn parse_json(text: &str, name: &str) -> Result<Policy, PolicyError> {
    // As for YAML: no serde_path_to_error on the success path.
    {
        let mut de = serde_json::Deserializer::from_str(text);
        if let Ok(p) = <Policy as serde::Deserialize>::deserialize(&mut de) {
            if de.end().is_ok() {
                return Ok(p);
            }
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let (path, inner) = match serde_path_to_error::deserialize::<_, Policy>(&mut de) {
        Ok(p) => match de.end() {
            Ok(()) => return Ok(p),
            Err(e) => (".".to_string(), e),
        },
        Err(e) => (e.path().to_string(), e.into_inner()),
    };
    let at = (inner.line() > 0).then(|| (inner.line(), inner.column().max(1)));
    let full = inner.to_string();
    // serde_json appends " at line N column M"; we print the position up front.
    let message = match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    };
    if let Some(field) = between(&message, "unknown field `", "`") {
        let expected: Vec<&str> = match message.split_once("expected one of ") {
            Some((_, list)) => list.split(", ").map(|s| s.trim_matches('`')).collect(),
            None => vec![],
        };
        let key = unknown_key_path(&path, field);
        return Err(syntax(name, at, &key, &unknown_key_message(&expected)));
    }
    if let Some(field) = between(&message, "missing field `", "`") {
        let key = if path == "." {
            field.to_string()
        } else {
            format!("{path}.{field}")
        };
        return Err(syntax(name, at, &key, &missing_key_message(field)));
    }
    Err(syntax(
        name,
        at,
        &path,
        &friendly(&path, &one_line(&message)),
    ))
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = &s[s.find(start)? + start.len()..];
    Some(&rest[..rest.find(end)?])
}

/// serde_path_to_error's path may or may not already end with the unknown key.
fn unknown_key_path(path: &str, field: &str) -> String {
    if path == "." || path.is_empty() {
        field.to_string()
    } else if path == field || path.ends_with(&format!(".{field}")) {
        path.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn unknown_key_message<S: AsRef<str>>(expected: &[S]) -> String {
    if expected.is_empty() {
        "unknown key (this section takes no keys)".into()
    } else {
        let list: Vec<&str> = expected.iter().map(AsRef::as_ref).collect();
        format!("unknown key (expected one of {})", list.join(", "))
    }
}

fn missing_key_message(field: &str) -> String {
    if field == "version" {
        "missing required key `version` (start the policy with `version: 1`)".into()
    } else {
        format!("missing required key `{field}`")
    }
}

/// Reword messages that talk about Rust types into policy terms.
fn friendly(path: &str, message: &str) -> String {
    if message.contains("untagged enum PathEntry") {
        return "expected a path string or a mapping {path: ..., optional: true|false} (a bare `~` is YAML null: write \"~\")".into();
    }
    if (path == "." || path.is_empty())
        && (message.contains("struct Policy") || message.contains("mapping"))
    {
        return format!("a policy must be a mapping that starts with `version: 1` ({message})");
    }
    let plain = match message {
        "expected sequence start" => Some("expected a list, e.g. [a, b]"),
        "expected mapping start" => Some("expected a mapping of key: value"),
        "invalid floating point" => Some("expected a number"),
        "invalid boolean" => Some("expected true or false"),
        m if m.starts_with("invalid u") => Some("expected a whole number >= 0"),
        _ => None,
    };
    if let Some(p) = plain {
        return p.to_string();
    }
    message
        .replace("struct Policy", "a policy mapping")
        .replace("struct Filesystem", "a mapping")
        .replace("struct Network", "a mapping")
        .replace("struct Env", "a mapping")
        .replace("struct Limits", "a mapping")
        .replace("struct Tools", "a mapping")
        .replace("struct Tool", "a mapping")
        .replace("struct LlmAccess", "a mapping")
}

impl LoadedPolicy {
    /// Line of a key path (`filesystem.write[1]`), or of its closest recorded ancestor.
    pub fn line_of(&self, key: &str) -> Option<usize> {
        lines::lookup(&self.lines, key)
    }

    /// The label errors use for this policy's file.
    pub fn file_label(&self) -> String {
        match &self.source {
            Some(p) => p.display().to_string(),
            None => "<policy>".to_string(),
        }
    }

    /// file:line:column of a key, best effort. The column comes from a re-scan
    /// of the source file (only on error paths; a missing file just loses it).
    pub fn position_of(&self, key: &str) -> Position {
        let mut pos = Position {
            file: Some(self.file_label()),
            line: self.line_of(key),
            column: None,
        };
        if let Some(src) = &self.source {
            if let Ok(text) = std::fs::read_to_string(src) {
                let json = match src.extension().and_then(|e| e.to_str()) {
                    Some("json") => true,
                    Some("yaml" | "yml") => false,
                    _ => looks_like_json(&text),
                };
                if let Some((line, col)) = lines::lookup_col(&lines::scan(&text, json), key) {
                    if Some(line) == pos.line {
                        pos.column = Some(col);
                    }
                }
            }
        }
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{NetMode, PathEntry};

    fn err(text: &str) -> String {
        parse_str(text, "agent.yaml", None).unwrap_err().to_string()
    }

    #[test]
    fn parses_the_contract_example() {
        let text = "\
version: 1
filesystem:
  read:  [./data]
  write: [./out]
  exec:  [/usr/bin/python3]
  deny:  [./data/secrets]
  system: true
  tmp: true
network:
  mode: proxy
  allow_hosts: [\"api.github.com\", \"*.pythonhosted.org\"]
  allow_unix_sockets: false
env:
  pass: [LANG, TERM, TZ]
  set: {PYTHONUNBUFFERED: \"1\"}
limits:
  timeout_seconds: 60
  max_output_bytes: 1048576
  memory_mb: 512
  cpu_seconds: 60
  max_processes: 64
  max_file_size_mb: 1024
  max_open_files: 1024
tools:
  max_calls: 40
  allow:
    - name: search
      command: [/usr/bin/python3, tools/search.py]
      policy: tools/search.yaml
      timeout_seconds: 30
    - name: lookup
      forward: true
llm_access:
  enabled: false
  max_calls: 20
  max_input_chars: 24000
  max_output_chars: 24000
  allowed_models: [gpt-4o-mini]
";
        let p = parse_str(text, "a.yaml", None).unwrap();
        assert_eq!(p.network.mode, NetMode::Proxy);
        assert_eq!(p.filesystem.read, vec![PathEntry::from("./data")]);
        assert_eq!(p.limits.memory_mb, Some(512));
        let tools = p.tools.unwrap();
        assert_eq!(tools.allow.len(), 2);
        assert!(tools.allow[1].forward);
        assert_eq!(p.env.set["PYTHONUNBUFFERED"], "1");
        // The same policy as JSON parses to the same value.
        let json = serde_json::to_string_pretty(&parse_str(text, "a.yaml", None).unwrap()).unwrap();
        assert_eq!(
            parse_str(&json, "a.json", None).unwrap(),
            parse_str(text, "a", None).unwrap()
        );
    }

    #[test]
    fn unknown_key_names_file_line_column_key_and_choices() {
        let e = err("version: 1\nfilesystem:\n  read: [.]\n  wirte: [./out]\n");
        assert_eq!(
            e,
            "agent.yaml:4:3: filesystem.wirte: unknown key (expected one of read, write, exec, deny, system, tmp)"
        );
        let e = err("version: 1\nnetwrk: {}\n");
        assert!(
            e.starts_with("agent.yaml:2:1: netwrk: unknown key (expected one of version,"),
            "{e}"
        );
        let e = err("version: 1\ntools:\n  allow:\n    - name: a\n      forward: true\n    - name: b\n      comand: [x]\n");
        assert!(
            e.starts_with("agent.yaml:7:7: tools.allow[1].comand: unknown key"),
            "{e}"
        );
    }

    #[test]
    fn wrong_type_names_the_key() {
        let e = err("version: 1\nlimits:\n  timeout_seconds: soon\n");
        assert!(
            e.starts_with("agent.yaml:3:20: limits.timeout_seconds: "),
            "{e}"
        );
        let e = err("version: 1\nfilesystem:\n  write: [./a, [x]]\n");
        assert!(e.starts_with("agent.yaml:3:"), "{e}");
        assert!(
            e.contains("filesystem.write[1]: expected a path string"),
            "{e}"
        );
        let e = err("version: 1\nnetwork:\n  mode: open\n");
        assert!(e.contains("agent.yaml:3:9: network.mode: "), "{e}");
        assert!(e.contains("none") && e.contains("unrestricted"), "{e}");
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn version_is_required_and_must_be_1() {
        let e = err("filesystem: {}\n");
        assert!(e.contains("version: missing required key `version`"), "{e}");
        assert!(e.starts_with("agent.yaml:"), "{e}");
        let e = err("version: 2\n");
        assert_eq!(
            e,
            "agent.yaml:1:1: version: unsupported version 2 (only `version: 1` exists)"
        );
        let e = err("version: one\n");
        assert!(e.starts_with("agent.yaml:1:10: version: "), "{e}");
        let e = err("version: 1\nversion: 1\n");
        assert!(
            e.starts_with("agent.yaml:2:") && e.contains("duplicate"),
            "{e}"
        );
    }

    #[test]
    fn empty_and_non_mapping_are_clear() {
        assert_eq!(
            err(""),
            "agent.yaml: (top level): empty policy (a policy starts with `version: 1`)"
        );
        assert!(err("# only a comment\n---\n").contains("empty policy"));
        let e = err("- a\n- b\n");
        assert!(e.contains("must be a mapping"), "{e}");
        let e = err("just a string\n");
        assert!(e.contains("must be a mapping"), "{e}");
        assert!(err("version: 1\n---\nversion: 1\n").starts_with("agent.yaml:"));
    }

    #[test]
    fn json_errors_have_position_and_key() {
        let text =
            "{\n  \"version\": 1,\n  \"network\": {\"mode\": \"none\", \"allow_host\": []}\n}\n";
        let e = parse_str(text, "p.json", None).unwrap_err().to_string();
        assert!(e.starts_with("p.json:3:"), "{e}");
        assert!(e.contains("network.allow_host: unknown key (expected one of mode, allow_hosts, upstream_ca, allow_unix_sockets, loopback, max_connections)"), "{e}");
        let e = parse_str(
            "{\"version\": 1, \"limits\": {\"memory_mb\": -1}}",
            "p.json",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("p.json:1:") && e.contains("limits.memory_mb: "),
            "{e}"
        );
        let e = parse_str("{\"version\": 1,}", "p.json", None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.json:1:"), "{e}");
        let e = parse_str("{\"filesystem\": {}}", "p.json", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("version: missing required key"), "{e}");
    }

    #[test]
    fn yaml_syntax_error_has_position() {
        let e = err("version: 1\nfilesystem:\n  read: [a, b\n");
        assert!(e.starts_with("agent.yaml:"), "{e}");
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn load_file_fills_sha_lines_and_base_dir() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yml");
        let text = "version: 1\nfilesystem:\n  write:\n    - ./out\n";
        std::fs::write(&path, text).unwrap();
        let lp = load_file(&path).unwrap();
        assert_eq!(lp.sha256, sha256_hex(text.as_bytes()));
        assert_eq!(lp.sha256.len(), 64);
        assert_eq!(lp.base_dir, dir.path().canonicalize().unwrap());
        assert_eq!(lp.line_of("filesystem.write[0]"), Some(4));
        assert_eq!(lp.source.as_deref(), Some(path.as_path()));
        // Content sniffing for an extension-less file.
        let path = dir.path().join("policy");
        std::fs::write(&path, "{\"version\": 1}").unwrap();
        assert_eq!(load_file(&path).unwrap().policy.version, 1);
        // Missing file.
        let e = load_file(&dir.path().join("nope.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope.yaml: cannot read policy file"), "{e}");
    }
}

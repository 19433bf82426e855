//! The host's LLM binding and ceiling: `$XDG_CONFIG_HOME/capsule/config.yaml`
//! (else `~/.config/capsule/config.yaml`), overridden by `CAPSULE_LLM_*`.
//!
//! ```yaml
//! llm:
//!   provider: openai            # openai | anthropic | openai-compatible
//!   base_url: https://api.openai.com/v1
//!   model: gpt-4o-mini
//!   api_key_env: OPENAI_API_KEY # the NAME of the variable holding the key
//!   anthropic_version: "2023-06-01"
//!   max_tokens: 1024
//!   timeout_seconds: 60
//!   ceiling:                    # always wins over any policy
//!     enabled: true
//!     max_calls: 20
//!     max_input_chars: 24000
//!     max_output_chars: 24000
//!     allowed_models: [gpt-4o-mini]
//! ```
//!
//! Keys in the `llm` section are checked (a typo in a ceiling must not
//! silently lift it); other top-level sections are left to their owners.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum HostConfigError {
    #[error("cannot read host config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid host config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid {var}: {message}")]
    Env { var: &'static str, message: String },
}

/// LLM provider kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    Openai,
    Anthropic,
    OpenaiCompatible,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
            Provider::OpenaiCompatible => "openai-compatible",
        }
    }
    fn parse(s: &str) -> Option<Provider> {
        match s {
            "openai" => Some(Provider::Openai),
            "anthropic" => Some(Provider::Anthropic),
            "openai-compatible" => Some(Provider::OpenaiCompatible),
            _ => None,
        }
    }
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::Openai => Some("https://api.openai.com/v1"),
            Provider::Anthropic => Some("https://api.anthropic.com"),
            Provider::OpenaiCompatible => None,
        }
    }
    pub fn default_api_key_env(self) -> Option<&'static str> {
        match self {
            Provider::Openai => Some("OPENAI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            Provider::OpenaiCompatible => None,
        }
    }
}

/// The host's ceiling over every policy's `llm_access`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ceiling {
    /// `false` disables LLM access for every run; absent = does not disable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_chars: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_chars: Option<u64>,
    /// Absent = any; `[]` = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_models: Option<Vec<String>>,
}

/// The `llm` section as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSection {
    #[serde(default)]
    pub provider: Option<Provider>,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub anthropic_version: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    #[serde(default)]
    pub ceiling: Option<Ceiling>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct FileConfig {
    #[serde(default)]
    llm: Option<LlmSection>,
}

/// A provider the parent can call.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmBinding {
    pub provider: Provider,
    /// Without a trailing slash.
    pub base_url: String,
    pub model: String,
    /// Name of the environment variable that holds the key (never the key).
    pub api_key_env: Option<String>,
    pub anthropic_version: String,
    pub max_tokens: u32,
    pub timeout_seconds: f64,
}

/// What the broker needs from the host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostConfig {
    /// None: no provider configured (every `llm/complete` is refused).
    pub llm: Option<LlmBinding>,
    pub ceiling: Ceiling,
    /// Where it was read from, if a file existed.
    pub source: Option<PathBuf>,
}

pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";
pub const DEFAULT_MAX_TOKENS: u32 = 1024;
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 60.0;

/// The default config path: `$XDG_CONFIG_HOME/capsule/config.yaml`, else
/// `~/.config/capsule/config.yaml`.
pub fn default_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(x) = env("XDG_CONFIG_HOME").filter(|s| !s.is_empty()) {
        return Some(PathBuf::from(x).join("capsule/config.yaml"));
    }
    env("HOME")
        .filter(|s| !s.is_empty())
        .map(|h| PathBuf::from(h).join(".config/capsule/config.yaml"))
}

/// Load from the default place and the process environment.
pub fn load() -> Result<HostConfig, HostConfigError> {
    let env = |k: &str| std::env::var(k).ok();
    let path = default_path(&env);
    load_with(path.as_deref(), &env)
}

/// Load from `path` (a missing file is an empty config) and `env`.
pub fn load_with(
    path: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<HostConfig, HostConfigError> {
    let (mut section, source) = read_file(path)?;
    apply_env(&mut section, env)?;
    let ceiling = section.ceiling.clone().unwrap_or_default();
    let origin = || {
        source
            .clone()
            .unwrap_or_else(|| PathBuf::from("CAPSULE_LLM_* environment"))
    };
    let llm = match section.provider {
        None => None,
        Some(provider) => {
            let base_url = section
                .base_url
                .clone()
                .or_else(|| provider.default_base_url().map(str::to_string))
                .ok_or_else(|| HostConfigError::Parse {
                    path: origin(),
                    message: format!(
                        "llm.base_url is required for provider {}",
                        provider.as_str()
                    ),
                })?;
            if !(base_url.starts_with("https://") || base_url.starts_with("http://")) {
                return Err(HostConfigError::Parse {
                    path: origin(),
                    message: "llm.base_url must start with https:// or http://".into(),
                });
            }
            let model = section
                .model
                .clone()
                .ok_or_else(|| HostConfigError::Parse {
                    path: origin(),
                    message: "llm.model is required when llm.provider is set".into(),
                })?;
            let timeout_seconds = section.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
            if !(timeout_seconds.is_finite() && timeout_seconds > 0.0) {
                return Err(HostConfigError::Parse {
                    path: origin(),
                    message: "llm.timeout_seconds must be > 0".into(),
                });
            }
            Some(LlmBinding {
                provider,
                base_url: base_url.trim_end_matches('/').to_string(),
                model,
                api_key_env: section
                    .api_key_env
                    .clone()
                    .or_else(|| provider.default_api_key_env().map(str::to_string)),
                anthropic_version: section
                    .anthropic_version
                    .clone()
                    .unwrap_or_else(|| DEFAULT_ANTHROPIC_VERSION.into()),
                max_tokens: section.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                timeout_seconds,
            })
        }
    };
    Ok(HostConfig {
        llm,
        ceiling,
        source,
    })
}

/// The `llm:` section of the host config file at `path` (empty when
/// there is none), and the file when it exists.
fn read_file(path: Option<&Path>) -> Result<(LlmSection, Option<PathBuf>), HostConfigError> {
    let mut section = LlmSection::default();
    let mut source = None;
    if let Some(p) = path {
        match std::fs::read_to_string(p) {
            Ok(text) => {
                source = Some(p.to_path_buf());
                if !text.trim().is_empty() {
                    let fc: FileConfig =
                        serde_saphyr::from_str(&text).map_err(|e| HostConfigError::Parse {
                            path: p.to_path_buf(),
                            message: e.to_string(),
                        })?;
                    section = fc.llm.unwrap_or_default();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(HostConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })
            }
        }
    }
    Ok((section, source))
}

/// `CAPSULE_LLM_*` variables (non-empty) override the file's settings.
fn apply_env(
    section: &mut LlmSection,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), HostConfigError> {
    let var = |k: &str| env(k).filter(|s| !s.is_empty());
    if let Some(p) = var("CAPSULE_LLM_PROVIDER") {
        section.provider = Some(Provider::parse(&p).ok_or_else(|| HostConfigError::Env {
            var: "CAPSULE_LLM_PROVIDER",
            message: format!("unknown provider '{p}' (openai | anthropic | openai-compatible)"),
        })?);
    }
    if let Some(u) = var("CAPSULE_LLM_BASE_URL") {
        section.base_url = Some(u);
    }
    if let Some(m) = var("CAPSULE_LLM_MODEL") {
        section.model = Some(m);
    }
    if let Some(k) = var("CAPSULE_LLM_API_KEY_ENV") {
        section.api_key_env = Some(k);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn file_then_env_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        std::fs::write(
            &p,
            "other: {x: 1}\nllm:\n  provider: anthropic\n  model: claude-x\n  ceiling:\n    max_calls: 3\n    allowed_models: []\n",
        )
        .unwrap();
        let c = load_with(Some(&p), &env_of(&[])).unwrap();
        let b = c.llm.unwrap();
        assert_eq!(b.provider, Provider::Anthropic);
        assert_eq!(b.base_url, "https://api.anthropic.com");
        assert_eq!(b.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        assert_eq!(b.anthropic_version, "2023-06-01");
        assert_eq!(c.ceiling.max_calls, Some(3));
        assert_eq!(c.ceiling.allowed_models, Some(vec![]));

        let c = load_with(
            Some(&p),
            &env_of(&[
                ("CAPSULE_LLM_PROVIDER", "openai-compatible"),
                ("CAPSULE_LLM_BASE_URL", "http://127.0.0.1:9/v1/"),
                ("CAPSULE_LLM_MODEL", "llama"),
                ("CAPSULE_LLM_API_KEY_ENV", "MY_KEY"),
            ]),
        )
        .unwrap();
        let b = c.llm.unwrap();
        assert_eq!(b.provider, Provider::OpenaiCompatible);
        assert_eq!(b.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(b.model, "llama");
        assert_eq!(b.api_key_env.as_deref(), Some("MY_KEY"));
    }

    #[test]
    fn missing_file_is_empty_and_typos_fail() {
        let dir = tempfile::tempdir().unwrap();
        let c = load_with(Some(&dir.path().join("nope.yaml")), &env_of(&[])).unwrap();
        assert!(c.llm.is_none());
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, "llm:\n  ceiling:\n    max_cals: 3\n").unwrap();
        assert!(matches!(
            load_with(Some(&p), &env_of(&[])),
            Err(HostConfigError::Parse { .. })
        ));
        assert!(matches!(
            load_with(None, &env_of(&[("CAPSULE_LLM_PROVIDER", "nope")])),
            Err(HostConfigError::Env { .. })
        ));
        assert_eq!(
            default_path(&env_of(&[("HOME", "/h")])),
            Some(PathBuf::from("/h/.config/capsule/config.yaml"))
        );
    }
}

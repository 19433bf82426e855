//! Effective LLM caps: the policy's request, lowered by the host ceiling.

use super::super::counters::LlmCaps;
use super::super::host_config::{Ceiling, HostConfig};
use crate::policy::LlmAccess;

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (x, None) | (None, x) => x,
    }
}

/// Both lists must allow a model: absent = any, `[]` = none.
fn intersect(a: Option<&Vec<String>>, b: Option<&Vec<String>>) -> Option<Vec<String>> {
    match (a, b) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x.clone()),
        (Some(x), Some(y)) => Some(x.iter().filter(|m| y.contains(m)).cloned().collect()),
    }
}

/// Default-deny: enabled only when the policy says so, the ceiling does not
/// say `enabled: false`, and the host has a provider.
pub fn effective(policy: Option<&LlmAccess>, host: &HostConfig) -> LlmCaps {
    let c: &Ceiling = &host.ceiling;
    let Some(p) = policy else {
        return LlmCaps {
            enabled: false,
            ..Default::default()
        };
    };
    LlmCaps {
        enabled: p.enabled && c.enabled != Some(false) && host.llm.is_some(),
        max_calls: min_opt(p.max_calls, c.max_calls),
        max_input_chars: min_opt(p.max_input_chars, c.max_input_chars),
        max_output_chars: min_opt(p.max_output_chars, c.max_output_chars),
        allowed_models: intersect(p.allowed_models.as_ref(), c.allowed_models.as_ref()),
    }
}

pub fn model_allowed(caps: &LlmCaps, model: &str) -> bool {
    caps.allowed_models
        .as_ref()
        .is_none_or(|l| l.iter().any(|m| m == model))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::host_config::{LlmBinding, Provider};

    fn host(c: Ceiling) -> HostConfig {
        HostConfig {
            llm: Some(LlmBinding {
                provider: Provider::Openai,
                base_url: "http://127.0.0.1:1".into(),
                model: "m1".into(),
                api_key_env: None,
                anthropic_version: "v".into(),
                max_tokens: 10,
                timeout_seconds: 1.0,
            }),
            ceiling: c,
            source: None,
        }
    }

    #[test]
    fn ceiling_wins() {
        let p = LlmAccess {
            enabled: true,
            max_calls: Some(5),
            max_input_chars: None,
            max_output_chars: Some(9),
            allowed_models: None,
        };
        let e = effective(
            Some(&p),
            &host(Ceiling {
                max_calls: Some(2),
                max_input_chars: Some(7),
                ..Default::default()
            }),
        );
        assert!(e.enabled);
        assert_eq!(
            (e.max_calls, e.max_input_chars, e.max_output_chars),
            (Some(2), Some(7), Some(9))
        );
        let e = effective(
            Some(&p),
            &host(Ceiling {
                enabled: Some(false),
                ..Default::default()
            }),
        );
        assert!(!e.enabled);
        assert!(!effective(None, &host(Ceiling::default())).enabled);
        assert!(
            !effective(
                Some(&LlmAccess {
                    enabled: false,
                    ..p.clone()
                }),
                &host(Ceiling::default())
            )
            .enabled
        );
        let mut nohost = host(Ceiling::default());
        nohost.llm = None;
        assert!(!effective(Some(&p), &nohost).enabled);
    }

    #[test]
    fn model_lists() {
        let v = |l: &[&str]| Some(l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let caps = |a, b| {
            let p = LlmAccess {
                enabled: true,
                allowed_models: a,
                ..Default::default()
            };
            effective(
                Some(&p),
                &host(Ceiling {
                    allowed_models: b,
                    ..Default::default()
                }),
            )
        };
        assert!(model_allowed(&caps(None, None), "m1"));
        assert!(!model_allowed(&caps(v(&[]), None), "m1"));
        assert!(!model_allowed(&caps(None, v(&[])), "m1"));
        assert!(model_allowed(&caps(v(&["m1", "x"]), v(&["m1"])), "m1"));
        assert!(!model_allowed(&caps(v(&["m1"]), v(&["x"])), "m1"));
        assert!(!model_allowed(&caps(v(&["x"]), None), "m1"));
    }
}

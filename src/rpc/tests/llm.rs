//! `llm/complete` against fake OpenAI and Anthropic servers on loopback.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::fake_provider::{self, anthropic_answer, openai_answer, Canned, FakeProvider};
use super::{assert_error, config, start, Peer};
use crate::policy::LlmAccess;
use crate::rpc::host_config::{Ceiling, HostConfig, LlmBinding, Provider};

fn ok(body: String) -> Canned {
    Canned {
        status: 200,
        body,
        delay: Duration::ZERO,
    }
}

/// A unique key in a unique variable, as a host would hold it.
fn key(tag: &str) -> (String, String) {
    let var = format!("CAPSULE_TEST_KEY_{tag}_{}", std::process::id());
    let value = format!("sk-secret-{tag}-9f8e7d6c5b4a");
    std::env::set_var(&var, &value);
    (var, value)
}

fn host(provider: Provider, base: &str, key_var: Option<&str>, ceiling: Ceiling) -> HostConfig {
    HostConfig {
        llm: Some(LlmBinding {
            provider,
            base_url: base.to_string(),
            model: "model-a".into(),
            api_key_env: key_var.map(str::to_string),
            anthropic_version: "2023-06-01".into(),
            max_tokens: 1024,
            timeout_seconds: 10.0,
        }),
        ceiling,
        source: None,
    }
}

fn allow() -> LlmAccess {
    LlmAccess {
        enabled: true,
        ..Default::default()
    }
}

fn peer(dir: &std::path::Path, llm: Option<LlmAccess>, host: HostConfig) -> Peer {
    let mut c = config(dir);
    c.llm = llm;
    c.host = host;
    start(c)
}

fn hi() -> Value {
    json!({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]})
}

fn no_secret(v: &impl ToString, secret: &str) {
    let s = v.to_string();
    assert!(!s.contains(secret), "secret leaked: {s}");
}

#[tokio::test]
async fn openai_completion_with_bearer_key() {
    let dir = tempfile::tempdir().unwrap();
    let srv = fake_provider::start(ok(openai_answer("Hi there"))).await;
    let (var, secret) = key("OA");
    let mut p = peer(
        dir.path(),
        Some(allow()),
        host(
            Provider::Openai,
            &format!("{}/v1", srv.base),
            Some(&var),
            Ceiling::default(),
        ),
    );
    let v = p.call(1, "llm/complete", hi()).await;
    assert_eq!(
        v["result"],
        json!({"message": {"role": "assistant", "content": "Hi there"}, "model": "gpt-test-2024",
               "finish_reason": "stop", "usage": {"input_tokens": 11, "output_tokens": 3}})
    );
    no_secret(&v, &secret);
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        r.headers.get("authorization"),
        Some(&format!("Bearer {secret}"))
    );
    assert!(!r.headers.contains_key("x-api-key"));
    assert_eq!(
        r.body["model"], "model-a",
        "the host's model, never the child's"
    );
    assert_eq!(
        r.body["messages"][1],
        json!({"role": "user", "content": "hello"})
    );
    assert_eq!(r.body["max_tokens"], 1024);
    let c = p.broker.counters();
    assert_eq!((c.llm.calls, c.llm.ok), (1, 1));
    assert_eq!(c.llm.model.as_deref(), Some("model-a"));
    assert!(c.llm.caps.enabled);
    no_secret(&serde_json::to_value(&c).unwrap(), &secret);
}

#[tokio::test]
async fn anthropic_completion_with_x_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let srv = fake_provider::start(ok(anthropic_answer("Bonjour"))).await;
    let (var, secret) = key("AN");
    let mut h = host(
        Provider::Anthropic,
        &srv.base,
        Some(&var),
        Ceiling::default(),
    );
    if let Some(b) = h.llm.as_mut() {
        b.anthropic_version = "2024-01-01".into();
    }
    let mut p = peer(dir.path(), Some(allow()), h);
    let mut params = hi();
    params["max_tokens"] = json!(50);
    let v = p.call(1, "llm/complete", params).await;
    assert_eq!(
        v["result"]["message"],
        json!({"role": "assistant", "content": "Bonjour"})
    );
    assert_eq!(v["result"]["finish_reason"], "stop");
    assert_eq!(
        v["result"]["usage"],
        json!({"input_tokens": 9, "output_tokens": 4})
    );
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.headers.get("x-api-key"), Some(&secret));
    assert_eq!(
        r.headers.get("anthropic-version").map(String::as_str),
        Some("2024-01-01")
    );
    assert!(!r.headers.contains_key("authorization"));
    assert_eq!(r.body["system"], "be brief");
    assert_eq!(
        r.body["messages"],
        json!([{"role": "user", "content": "hello"}])
    );
    assert_eq!(r.body["max_tokens"], 50);
    assert_eq!(r.body["model"], "model-a");
}

#[tokio::test]
async fn openai_compatible_without_key() {
    let dir = tempfile::tempdir().unwrap();
    let srv = fake_provider::start(ok(openai_answer("local"))).await;
    let mut p = peer(
        dir.path(),
        Some(allow()),
        host(
            Provider::OpenaiCompatible,
            &srv.base,
            None,
            Ceiling::default(),
        ),
    );
    let v = p.call(1, "llm/complete", hi()).await;
    assert_eq!(v["result"]["message"]["content"], "local");
    let reqs = srv.requests();
    assert_eq!(reqs[0].path, "/chat/completions");
    assert!(!reqs[0].headers.contains_key("authorization"));
}

async fn refused_without_requests(
    llm: Option<LlmAccess>,
    ceiling: Ceiling,
    code: i64,
    reason: &str,
) -> FakeProvider {
    let dir = tempfile::tempdir().unwrap();
    let srv = fake_provider::start(ok(openai_answer("x"))).await;
    let (var, _) = key("RF");
    let mut p = peer(
        dir.path(),
        llm,
        host(Provider::Openai, &srv.base, Some(&var), ceiling),
    );
    for id in 0..3 {
        assert_error(&p.call(id, "llm/complete", hi()).await, code, reason);
    }
    assert_eq!(
        srv.requests().len(),
        0,
        "a refusal never reaches the provider"
    );
    let c = p.broker.counters();
    assert_eq!(c.llm.calls, 0);
    srv
}

#[tokio::test]
async fn default_deny_and_disabled_never_reach_the_provider() {
    refused_without_requests(None, Ceiling::default(), -32001, "not_allowed").await;
    let off = LlmAccess {
        enabled: false,
        ..Default::default()
    };
    refused_without_requests(Some(off), Ceiling::default(), -32001, "not_allowed").await;
    let ceiling_off = Ceiling {
        enabled: Some(false),
        ..Default::default()
    };
    refused_without_requests(Some(allow()), ceiling_off, -32001, "not_allowed").await;
}

#[tokio::test]
async fn no_provider_on_the_host_is_not_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = peer(dir.path(), Some(allow()), HostConfig::default());
    assert_error(
        &p.call(1, "llm/complete", hi()).await,
        -32001,
        "not_allowed",
    );
    assert_eq!(p.broker.counters().llm.refused_not_allowed, 1);
}

#[tokio::test]
async fn model_lists_refuse_without_requests() {
    let only_other = LlmAccess {
        allowed_models: Some(vec!["other".into()]),
        ..allow()
    };
    refused_without_requests(
        Some(only_other),
        Ceiling::default(),
        -32001,
        "model_not_allowed",
    )
    .await;
    let none = LlmAccess {
        allowed_models: Some(vec![]),
        ..allow()
    };
    refused_without_requests(Some(none), Ceiling::default(), -32001, "model_not_allowed").await;
    // both lists set: both must allow
    let policy_ok = LlmAccess {
        allowed_models: Some(vec!["model-a".into()]),
        ..allow()
    };
    let ceiling_no = Ceiling {
        allowed_models: Some(vec!["other".into()]),
        ..Default::default()
    };
    refused_without_requests(Some(policy_ok), ceiling_no, -32001, "model_not_allowed").await;
}

#[tokio::test]
async fn max_calls_and_the_ceiling_lowering_it() {
    for (policy_max, ceiling_max) in [(Some(2), None), (Some(5), Some(2)), (None, Some(2))] {
        let dir = tempfile::tempdir().unwrap();
        let srv = fake_provider::start(ok(openai_answer("x"))).await;
        let (var, _) = key("MC");
        let llm = LlmAccess {
            max_calls: policy_max,
            ..allow()
        };
        let ceiling = Ceiling {
            max_calls: ceiling_max,
            ..Default::default()
        };
        let mut p = peer(
            dir.path(),
            Some(llm),
            host(Provider::Openai, &srv.base, Some(&var), ceiling),
        );
        assert!(p
            .call(1, "llm/complete", hi())
            .await
            .get("result")
            .is_some());
        assert!(p
            .call(2, "llm/complete", hi())
            .await
            .get("result")
            .is_some());
        assert_error(
            &p.call(3, "llm/complete", hi()).await,
            -32002,
            "limit_reached",
        );
        assert_eq!(srv.requests().len(), 2);
        let c = p.broker.counters();
        assert_eq!(
            (c.llm.calls, c.llm.ok, c.llm.refused_limit_reached),
            (2, 2, 1)
        );
        assert_eq!(c.llm.caps.max_calls, Some(2));
    }
}

#[tokio::test]
async fn input_and_output_caps() {
    let dir = tempfile::tempdir().unwrap();
    let srv = fake_provider::start(ok(openai_answer("0123456789"))).await;
    let (var, _) = key("IO");
    // input = "be brief" (8) + "hello" (5) = 13 characters
    let llm = LlmAccess {
        max_input_chars: Some(20),
        max_output_chars: Some(9),
        ..allow()
    };
    let ceiling = Ceiling {
        max_input_chars: Some(12),
        ..Default::default()
    };
    let mut p = peer(
        dir.path(),
        Some(llm),
        host(Provider::Openai, &srv.base, Some(&var), ceiling),
    );
    assert_error(
        &p.call(1, "llm/complete", hi()).await,
        -32004,
        "input_too_large",
    );
    assert_eq!(srv.requests().len(), 0, "input is checked before any call");
    // multi-byte characters count as characters, not bytes
    let small = json!({"messages": [{"role": "user", "content": "ééééé"}]});
    assert_error(
        &p.call(2, "llm/complete", small).await,
        -32004,
        "output_too_large",
    );
    assert_eq!(srv.requests().len(), 1);
    let c = p.broker.counters();
    assert_eq!(
        (
            c.llm.refused_input_too_large,
            c.llm.refused_output_too_large,
            c.llm.calls,
            c.llm.ok
        ),
        (1, 1, 1, 0)
    );
    assert_eq!(c.llm.caps.max_input_chars, Some(12));
}

#[tokio::test]
async fn bad_params_are_refused_before_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let srv = fake_provider::start(ok(openai_answer("x"))).await;
    let (var, _) = key("BP");
    let mut p = peer(
        dir.path(),
        Some(allow()),
        host(Provider::Openai, &srv.base, Some(&var), Ceiling::default()),
    );
    for (id, params) in [
        json!({}),
        json!({"messages": []}),
        json!({"messages": [{"role": "tool", "content": "x"}]}),
        json!({"messages": [{"role": "user", "content": 5}]}),
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}),
        json!({"messages": [{"role": "user", "content": "x"}], "model": "gpt-5"}),
    ]
    .into_iter()
    .enumerate()
    {
        let v = p.call(id as i64, "llm/complete", params.clone()).await;
        if params.get("model").is_some() {
            // extra keys are ignored: the child never picks the model
            assert!(v.get("result").is_some(), "{v}");
        } else {
            assert_error(&v, -32602, "bad_request");
        }
    }
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["model"], "model-a");
}

#[tokio::test]
async fn provider_error_never_carries_key_body_or_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let (var, secret) = key("PE");
    let body = format!(
        "{{\"error\": {{\"message\": \"Incorrect API key provided: {secret}\", \"prompt\": \"TOP-SECRET-PROMPT\"}}}}"
    );
    let srv = fake_provider::start(Canned {
        status: 500,
        body,
        delay: Duration::ZERO,
    })
    .await;
    let mut p = peer(
        dir.path(),
        Some(allow()),
        host(Provider::Openai, &srv.base, Some(&var), Ceiling::default()),
    );
    let prompt = json!({"messages": [{"role": "user", "content": "TOP-SECRET-PROMPT"}]});
    let line = {
        p.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "llm/complete", "params": prompt}))
            .await;
        p.recv_line().await
    };
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_error(&v, -32003, "provider_error");
    for s in [
        secret.as_str(),
        "Incorrect API key",
        "TOP-SECRET-PROMPT",
        "127.0.0.1",
    ] {
        assert!(!line.contains(s), "{s} leaked in {line}");
    }
    assert_eq!(p.broker.counters().llm.provider_errors, 1);
}

#[tokio::test]
async fn unreachable_provider_is_a_provider_error() {
    let dir = tempfile::tempdir().unwrap();
    // a loopback port with nothing listening
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1?token=QUERYSECRET", l.local_addr().unwrap());
    drop(l);
    let (var, secret) = key("UR");
    let mut p = peer(
        dir.path(),
        Some(allow()),
        host(Provider::Openai, &base, Some(&var), Ceiling::default()),
    );
    let v = p.call(1, "llm/complete", hi()).await;
    assert_error(&v, -32003, "provider_error");
    no_secret(&v, &secret);
    no_secret(&v, "QUERYSECRET");
}

#[tokio::test]
async fn missing_key_is_a_provider_error_without_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let srv = fake_provider::start(ok(openai_answer("x"))).await;
    let mut p = peer(
        dir.path(),
        Some(allow()),
        host(
            Provider::Openai,
            &srv.base,
            Some("CAPSULE_TEST_KEY_NEVER_SET_424242"),
            Ceiling::default(),
        ),
    );
    assert_error(
        &p.call(1, "llm/complete", hi()).await,
        -32003,
        "provider_error",
    );
    assert_eq!(srv.requests().len(), 0);
}

#[tokio::test]
async fn slow_provider_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let srv = fake_provider::start(Canned {
        status: 200,
        body: openai_answer("late"),
        delay: Duration::from_secs(30),
    })
    .await;
    let (var, _) = key("SL");
    let mut h = host(Provider::Openai, &srv.base, Some(&var), Ceiling::default());
    if let Some(b) = h.llm.as_mut() {
        b.timeout_seconds = 0.4;
    }
    let mut p = peer(dir.path(), Some(allow()), h);
    let t0 = Instant::now();
    assert_error(&p.call(1, "llm/complete", hi()).await, -32003, "timeout");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // the connection is still usable while the provider hangs
    assert_eq!(p.call(2, "ping", json!({})).await["result"], json!({}));
    let c = p.broker.counters();
    assert_eq!((c.llm.calls, c.llm.timeouts, c.llm.ok), (1, 1, 0));
}

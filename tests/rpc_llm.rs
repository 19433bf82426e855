//! `llm/complete` end to end against fake OpenAI and Anthropic servers on
//! 127.0.0.1: the host binding comes from CAPSULE_LLM_* and a config.yaml in
//! a temp `XDG_CONFIG_HOME`; the key is held by capsule only.

mod rpc_common;

use std::time::Duration;

use rpc_common::*;
use serde_json::json;

const KEY: &str = "sk-test-SECRET-key-0123456789";

fn policy(w: &World, llm: &str) -> String {
    w.write("policy.yaml", &format!("version: 1\n{llm}"))
        .to_string_lossy()
        .into_owned()
}

fn openai(status: u16, body: String, delay: Duration) -> (World, FakeProvider) {
    let fake = FakeProvider::start(status, body, delay);
    let mut w = World::new();
    bind_llm(
        &mut w,
        "openai",
        &format!("{}/v1", fake.base),
        "gpt-test",
        KEY,
    );
    (w, fake)
}

#[test]
fn openai_completion_sends_the_key_as_bearer() {
    let (w, fake) = openai(200, openai_answer("hi there"), Duration::ZERO);
    let p = policy(&w, "llm_access:\n  enabled: true\n  max_calls: 3\n");
    let (r, a) = w.drive(&["--policy", &p], &[complete("say hi")]);
    let res = &a[0]["result"];
    assert_eq!(
        res["message"],
        json!({"role": "assistant", "content": "hi there"}),
        "{}",
        a[0]
    );
    assert_eq!(res["model"], "gpt-test");
    assert_eq!(res["finish_reason"], "stop");
    assert_eq!(
        res["usage"],
        json!({"input_tokens": 11, "output_tokens": 3})
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(
        reqs[0].headers.get("authorization").map(String::as_str),
        Some(&*format!("Bearer {KEY}"))
    );
    assert_eq!(
        reqs[0].body["model"], "gpt-test",
        "the host picks the model"
    );
    assert_eq!(
        reqs[0].body["messages"],
        json!([{"role": "user", "content": "say hi"}])
    );
    assert_eq!(r["llm_calls"], 1);
    assert_eq!(r["usage"]["llm"]["ok"], 1);
    assert!(!r.to_string().contains(KEY));
}

#[test]
fn anthropic_completion_sends_x_api_key_and_version() {
    let fake = FakeProvider::start(200, anthropic_answer("bonjour"), Duration::ZERO);
    let mut w = World::new();
    bind_llm(&mut w, "anthropic", &fake.base, "claude-test", KEY);
    w.host_config("llm:\n  anthropic_version: \"2023-06-01\"\n  max_tokens: 77\n");
    let p = policy(&w, "llm_access:\n  enabled: true\n");
    let (_, a) = w.drive(
        &["--policy", &p],
        &[json!({"method": "llm/complete", "params": {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]}})],
    );
    let res = &a[0]["result"];
    assert_eq!(res["message"]["content"], "bonjour", "{}", a[0]);
    assert_eq!(
        res["finish_reason"], "stop",
        "normalised to OpenAI's vocabulary"
    );
    assert_eq!(res["usage"], json!({"input_tokens": 9, "output_tokens": 4}));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(
        reqs[0].headers.get("x-api-key").map(String::as_str),
        Some(KEY)
    );
    assert_eq!(
        reqs[0].headers.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert!(!reqs[0].headers.contains_key("authorization"));
    assert_eq!(reqs[0].body["model"], "claude-test");
    assert_eq!(reqs[0].body["max_tokens"], 77);
    assert_eq!(reqs[0].body["system"], "be brief");
    assert_eq!(
        reqs[0].body["messages"],
        json!([{"role": "user", "content": "hello"}])
    );
}

/// The host's `llm.max_tokens` is a ceiling on what reaches the provider, not
/// a default the run may raise: a request for more is sent capped (a request
/// for less is sent as asked).
#[test]
fn the_hosts_max_tokens_caps_what_the_run_asks_for() {
    let fake = FakeProvider::start(200, anthropic_answer("ok"), Duration::ZERO);
    let mut w = World::new();
    bind_llm(&mut w, "anthropic", &fake.base, "claude-test", KEY);
    w.host_config("llm:\n  anthropic_version: \"2023-06-01\"\n  max_tokens: 77\n");
    let p = policy(&w, "llm_access:\n  enabled: true\n  max_calls: 5\n");
    let ask = |n: u64| json!({"method": "llm/complete", "params": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": n}});
    let (_, a) = w.drive(&["--policy", &p], &[ask(1_000_000), ask(78), ask(20)]);
    for x in &a {
        assert!(x.get("result").is_some(), "{x}");
    }
    let sent: Vec<_> = fake
        .requests()
        .iter()
        .map(|r| r.body["max_tokens"].clone())
        .collect();
    assert_eq!(
        sent,
        vec![json!(77), json!(77), json!(20)],
        "the host's max_tokens is a ceiling"
    );
}

#[test]
fn absent_or_disabled_llm_access_is_not_allowed_and_sends_nothing() {
    let (w, fake) = openai(200, openai_answer("x"), Duration::ZERO);
    for llm in ["", "llm_access:\n  enabled: false\n  max_calls: 5\n"] {
        let p = policy(&w, llm);
        let (r, a) = w.drive(&["--policy", &p], &[complete("hello"), complete("again")]);
        assert_error(&a[0], -32001, "not_allowed");
        assert_error(&a[1], -32001, "not_allowed");
        assert_eq!(r["llm_calls"], 0);
        assert_eq!(r["usage"]["llm"]["refused_not_allowed"], 2);
    }
    assert_eq!(fake.requests().len(), 0);
}

#[test]
fn max_calls_is_enforced() {
    let (w, fake) = openai(200, openai_answer("ok"), Duration::ZERO);
    let p = policy(&w, "llm_access:\n  enabled: true\n  max_calls: 2\n");
    let (r, a) = w.drive(
        &["--policy", &p],
        &[complete("1"), complete("2"), complete("3")],
    );
    assert_eq!(a[0]["result"]["message"]["content"], "ok");
    assert_eq!(a[1]["result"]["message"]["content"], "ok");
    assert_error(&a[2], -32002, "limit_reached");
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(r["llm_calls"], 2);
    assert_eq!(r["usage"]["llm"]["refused_limit_reached"], 1);
}

#[test]
fn allowed_models_refusal_never_reaches_the_provider() {
    let (w, fake) = openai(200, openai_answer("x"), Duration::ZERO);
    let p = policy(
        &w,
        "llm_access:\n  enabled: true\n  allowed_models: [gpt-other]\n",
    );
    let (r, a) = w.drive(&["--policy", &p], &[complete("hello")]);
    assert_error(&a[0], -32001, "model_not_allowed");
    let p = policy(&w, "llm_access:\n  enabled: true\n  allowed_models: []\n");
    let (_, b) = w.drive(&["--policy", &p], &[complete("hello")]);
    assert_error(&b[0], -32001, "model_not_allowed");
    assert_eq!(fake.requests().len(), 0);
    assert_eq!(r["usage"]["llm"]["refused_model_not_allowed"], 1);
    assert_eq!(r["usage"]["llm"]["calls"], 0);
}

#[test]
fn input_and_output_caps() {
    let (w, fake) = openai(200, openai_answer("a rather long answer"), Duration::ZERO);
    let p = policy(
        &w,
        "llm_access:\n  enabled: true\n  max_input_chars: 10\n  max_output_chars: 5\n",
    );
    let (r, a) = w.drive(
        &["--policy", &p],
        &[complete("this prompt is too long"), complete("short")],
    );
    assert_error(&a[0], -32004, "input_too_large");
    assert_error(&a[1], -32004, "output_too_large");
    assert_eq!(
        fake.requests().len(),
        1,
        "only the short prompt reached the provider"
    );
    assert_eq!(r["usage"]["llm"]["refused_input_too_large"], 1);
    assert_eq!(r["usage"]["llm"]["refused_output_too_large"], 1);
}

#[test]
fn host_ceiling_lowers_caps_restricts_models_and_disables() {
    let (w, fake) = openai(200, openai_answer("ok"), Duration::ZERO);
    let p = policy(
        &w,
        "llm_access:\n  enabled: true\n  max_calls: 10\n  max_input_chars: 1000\n",
    );
    w.host_config("llm:\n  ceiling:\n    max_calls: 1\n    max_input_chars: 8\n");
    let (r, a) = w.drive(
        &["--policy", &p],
        &[complete("0123456789"), complete("ok"), complete("ok")],
    );
    assert_error(&a[0], -32004, "input_too_large");
    assert_eq!(a[1]["result"]["message"]["content"], "ok");
    assert_error(&a[2], -32002, "limit_reached");
    assert_eq!(r["usage"]["llm"]["caps"]["max_calls"], 1);
    assert_eq!(r["usage"]["llm"]["caps"]["max_input_chars"], 8);
    assert_eq!(fake.requests().len(), 1);

    // Both lists set: both must allow.
    w.host_config("llm:\n  ceiling:\n    allowed_models: [gpt-other]\n");
    let p = policy(
        &w,
        "llm_access:\n  enabled: true\n  allowed_models: [gpt-test]\n",
    );
    let (_, a) = w.drive(&["--policy", &p], &[complete("x")]);
    assert_error(&a[0], -32001, "model_not_allowed");

    w.host_config("llm:\n  ceiling:\n    enabled: false\n");
    let (r, a) = w.drive(&["--policy", &p], &[complete("x")]);
    assert_error(&a[0], -32001, "not_allowed");
    assert_eq!(r["usage"]["llm"]["caps"]["enabled"], false);
    assert_eq!(
        fake.requests().len(),
        1,
        "nothing more reached the provider"
    );
}

#[test]
fn provider_error_never_carries_the_key_or_the_body() {
    let body = format!("{{\"error\": \"invalid api key {KEY} for prompt PROMPT-MARKER\"}}");
    let (w, fake) = openai(500, body, Duration::ZERO);
    let p = policy(&w, "llm_access:\n  enabled: true\n");
    let (r, a) = w.drive(&["--policy", &p], &[complete("PROMPT-MARKER please")]);
    assert_error(&a[0], -32003, "provider_error");
    let all = r.to_string();
    assert!(!all.contains(KEY), "{all}");
    assert!(!all.contains("invalid api key"), "{all}");
    assert!(!a[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("PROMPT-MARKER"));
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(r["usage"]["llm"]["provider_errors"], 1);
    assert!(!w.audit_text().contains(KEY));
}

#[test]
fn slow_provider_times_out() {
    let (w, fake) = openai(200, openai_answer("late"), Duration::from_secs(5));
    w.host_config("llm:\n  timeout_seconds: 0.5\n");
    let p = policy(&w, "llm_access:\n  enabled: true\n");
    let t0 = std::time::Instant::now();
    let (r, a) = w.drive(
        &["--policy", &p],
        &[complete("hello"), json!({"method": "ping"})],
    );
    assert_error(&a[0], -32003, "timeout");
    assert_eq!(a[1]["result"], json!({}));
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(r["usage"]["llm"]["timeouts"], 1);
}

#[test]
fn no_provider_configured_is_not_allowed() {
    let w = World::new();
    let p = policy(&w, "llm_access:\n  enabled: true\n");
    let (r, a) = w.drive(&["--policy", &p], &[complete("hello")]);
    assert_error(&a[0], -32001, "not_allowed");
    assert_eq!(r["usage"]["llm"]["model"], serde_json::Value::Null);
}

/// With LLM access off, the child learns nothing about the host: the
/// refusal is the same, byte for byte (apart from the request id), whether
/// or not a provider is configured.
#[test]
fn disabled_llm_refusal_does_not_reveal_whether_a_provider_is_configured() {
    let (with, fake) = openai(200, openai_answer("x"), Duration::ZERO);
    let without = World::new();
    for llm in ["", "llm_access:\n  enabled: false\n"] {
        let (_, a) = with.drive(&["--policy", &policy(&with, llm)], &[complete("hi")]);
        let (_, b) = without.drive(&["--policy", &policy(&without, llm)], &[complete("hi")]);
        assert_error(&a[0], -32001, "not_allowed");
        assert_eq!(
            a[0]["error"], b[0]["error"],
            "LEAK: the refusal tells the child whether the host has a provider"
        );
    }
    assert_eq!(fake.requests().len(), 0);
}

/// The host's LLM config is read only when the policy enables LLM access:
/// an unreadable config (here a directory where the file should be, which
/// fails even for root) does not fail a run that uses no LLM.
#[test]
fn unreadable_host_config_fails_only_runs_that_use_the_llm() {
    let w = World::new();
    let cfg_dir = w.path().join("config/capsule/config.yaml");
    std::fs::create_dir_all(&cfg_dir).expect("mkdir");
    for llm in ["", "llm_access:\n  enabled: false\n"] {
        let (r, a) = w.drive(&["--policy", &policy(&w, llm)], &[complete("hi")]);
        assert_eq!(r["termination_reason"], "exited", "{r}");
        assert_error(&a[0], -32001, "not_allowed");
    }
    // Fail closed where the config is needed.
    let p = policy(&w, "llm_access:\n  enabled: true\n");
    let r = run(&mut w.exec(&["--policy", &p], &["/bin/true"]));
    assert_eq!(r["exit_code"], 125, "{r}");
}

#[test]
fn explain_names_the_refused_model_and_the_key_to_add() {
    let (w, fake) = openai(200, openai_answer("x"), Duration::ZERO);
    let p = policy(
        &w,
        "llm_access:\n  enabled: true\n  allowed_models: [gpt-other]\n",
    );
    let (r, a) = w.drive(&["--explain", "--policy", &p], &[complete("hello")]);
    assert_error(&a[0], -32001, "model_not_allowed");
    assert_eq!(fake.requests().len(), 0);
    let d = r["denials"].as_array().expect("denials with --explain");
    let m = d
        .iter()
        .find(|x| x["question"] == "model gpt-test")
        .unwrap_or_else(|| panic!("the model is not explained: {r}"));
    assert_eq!(m["layer"], "broker", "{m}");
    assert_eq!(m["key"], "llm_access.allowed_models", "{m}");
    assert!(m["change"].as_str().unwrap().contains("gpt-test"), "{m}");
}

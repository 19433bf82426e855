//! Keys never enter the sandbox, and the audit record holds counters only:
//! checked field by field, and for the absence of every secret, prompt,
//! argument and output string the run used.

mod rpc_common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use rpc_common::*;
use serde_json::{json, Value};

const KEY: &str = "sk-live-TOPSECRET-9f8e7d6c5b4a";

#[test]
fn the_key_is_not_in_the_childs_environment_or_any_readable_proc_environ() {
    let fake = FakeProvider::start(200, openai_answer("fine"), Duration::ZERO);
    let mut w = World::new();
    bind_llm(
        &mut w,
        "openai",
        &format!("{}/v1", fake.base),
        "gpt-test",
        KEY,
    );
    let policy = w.write("policy.yaml", "version: 1\nllm_access:\n  enabled: true\n");
    let piddir = w.path().join("pid");
    std::fs::create_dir(&piddir).unwrap();
    let script = format!(
        r#"
import json, os, socket, time
key = {KEY:?}
s = socket.socket(fileno=int(os.environ["CAPSULE_RPC_FD"]))
f = s.makefile("rb")
s.sendall(b'{{"jsonrpc":"2.0","id":1,"method":"llm/complete","params":{{"messages":[{{"role":"user","content":"hi"}}]}}}}\n')
answer = json.loads(f.readline())
report = {{"answer_ok": "result" in answer}}
report["env_has_key"] = any(key in v for v in os.environ.values())
report["env_names"] = sorted(os.environ)
report["self_environ_has_key"] = key.encode() in open("/proc/self/environ", "rb").read()
pidfile = {pidfile:?}
for _ in range(500):
    if os.path.exists(pidfile) and open(pidfile).read().strip(): break
    time.sleep(0.01)
capsule_pid = int(open(pidfile).read())
try:
    open("/proc/%d/environ" % capsule_pid, "rb").read()
    report["capsule_environ"] = "readable"
except OSError as e:
    report["capsule_environ"] = "denied"
readable = []
try:
    entries = os.listdir("/proc")
except OSError:
    entries = []
    report["proc_listing"] = "denied"
# Whatever /proc listing allows, also try the low pids and the capsule's neighbours.
entries = set(entries) | {{str(p) for p in range(1, 200)}} | {{str(p) for p in range(capsule_pid - 50, capsule_pid + 50)}}
for d in sorted(entries):
    if d.isdigit():
        try:
            data = open("/proc/%s/environ" % d, "rb").read()
            readable.append(d)
            if key.encode() in data:
                report["leak_in"] = d
        except OSError:
            pass
report["readable_environs"] = len(readable)
for root in [os.environ.get("HOME", "/nonexistent"), os.environ.get("TMPDIR", "/nonexistent")]:
    for dirpath, _, files in os.walk(root):
        for n in files:
            try:
                if key.encode() in open(os.path.join(dirpath, n), "rb").read():
                    report["leak_in_file"] = n
            except OSError:
                pass
print(json.dumps(report))
"#,
        pidfile = piddir.join("capsule.pid").display().to_string()
    );
    let mut cmd = w.exec(
        &[
            "--policy",
            &policy.to_string_lossy(),
            "--allow-read",
            &piddir.to_string_lossy(),
        ],
        &[PYTHON, "-c", &script],
    );
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    std::fs::write(piddir.join("capsule.pid.tmp"), child.id().to_string()).unwrap();
    std::fs::rename(piddir.join("capsule.pid.tmp"), piddir.join("capsule.pid")).unwrap();
    let out = child.wait_with_output().unwrap();
    let r = parse_result(&out);
    assert_eq!(r["exit_code"], 0, "{r}");
    let rep: Value = serde_json::from_str(r["stdout"].as_str().unwrap().trim()).unwrap();
    assert_eq!(rep["answer_ok"], true, "{rep}");
    assert_eq!(rep["env_has_key"], false);
    assert!(
        !rep["env_names"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "TEST_LLM_KEY"),
        "{rep}"
    );
    assert_eq!(rep["self_environ_has_key"], false);
    assert_eq!(rep["capsule_environ"], "denied", "{rep}");
    assert!(rep.get("leak_in").is_none(), "{rep}");
    assert!(rep.get("leak_in_file").is_none(), "{rep}");
    assert_eq!(
        fake.requests()[0].headers["authorization"],
        format!("Bearer {KEY}"),
        "the parent did use the key"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(KEY));
}

#[test]
fn audit_record_has_the_counters_and_none_of_the_secrets() {
    let fake = FakeProvider::start(200, openai_answer("COMPLETION-TEXT-77"), Duration::ZERO);
    let mut w = World::new();
    bind_llm(
        &mut w,
        "openai",
        &format!("{}/v1", fake.base),
        "gpt-test",
        KEY,
    );
    w.host_config("llm:\n  ceiling:\n    max_input_chars: 50\n");
    let policy = w.write(
        "policy.yaml",
        r#"version: 1
tools:
  max_calls: 2
  allow:
    - name: echo
      command: [/bin/sh, -c, "cat; echo TOOL-OUTPUT-33 >&2"]
llm_access:
  enabled: true
  max_calls: 1
  max_input_chars: 1000
  allowed_models: [gpt-test]
"#,
    );
    let secret_prompt = "PROMPT-SECRET-abc";
    let secret_arg = "ARGUMENT-SECRET-xyz";
    let (r, a) = w.drive(
        &[
            "--policy",
            &policy.to_string_lossy(),
            "--agent-id",
            "agent-7",
        ],
        &[
            call("echo", json!({"token": secret_arg})),
            call("echo", json!({"again": secret_arg})),
            call("echo", json!({"third": secret_arg})),
            call("unknown-tool", json!({"x": secret_arg})),
            complete(secret_prompt),
            complete(&format!("{secret_prompt} {}", "long ".repeat(20))),
            complete(secret_prompt),
        ],
    );
    assert_eq!(a[0]["result"]["structuredContent"]["token"], secret_arg);
    assert_error(&a[2], -32002, "limit_reached");
    assert_error(&a[3], -32602, "not_allowed");
    assert_eq!(a[4]["result"]["message"]["content"], "COMPLETION-TEXT-77");
    assert_error(&a[5], -32004, "input_too_large");
    assert_error(&a[6], -32002, "limit_reached");

    let records = w.audit();
    assert_eq!(records.len(), 1, "one record a run");
    let rec = &records[0];
    assert_eq!(rec["run_id"], r["run_id"]);
    assert_eq!(rec["agent_id"], "agent-7");
    assert_eq!(rec["outcome"], "completed");
    assert_eq!(rec["exit_code"], 0);
    assert_eq!(rec["policy_sha256"], r["policy_sha256"]);
    assert_eq!(rec["tool_calls"], 2);
    assert_eq!(rec["tool_refusals"], 2);
    assert_eq!(
        rec["tool_refusals_by_reason"],
        json!({"limit_reached": 1, "not_allowed": 1})
    );
    let llm = &rec["llm"];
    assert_eq!(llm["calls"], 1);
    assert_eq!(llm["ok"], 1);
    assert_eq!(llm["refused_limit_reached"], 1);
    assert_eq!(llm["refused_input_too_large"], 1);
    assert_eq!(llm["refused_not_allowed"], 0);
    assert_eq!(llm["refused_model_not_allowed"], 0);
    assert_eq!(llm["provider_errors"], 0);
    assert_eq!(llm["model"], "gpt-test");
    assert_eq!(
        llm["caps"],
        json!({"enabled": true, "max_calls": 1, "max_input_chars": 50, "max_output_chars": null, "allowed_models": ["gpt-test"]})
    );
    // The result carries the same counters.
    assert_eq!(r["tool_calls"], 2);
    assert_eq!(r["tool_refusals"], 2);
    assert_eq!(r["llm_calls"], 1);

    let text = w.audit_text();
    for s in [
        KEY,
        secret_prompt,
        secret_arg,
        "TOOL-OUTPUT-33",
        "COMPLETION-TEXT-77",
        "TEST_LLM_KEY",
        "unknown-tool",
        &fake.base,
    ] {
        assert!(!text.contains(s), "the audit log holds {s:?}: {text}");
    }
    let mode = std::fs::metadata(w.audit_path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

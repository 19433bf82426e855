//! A host `command` tool runs on the host, outside every layer of the run
//! (or under its own `policy:`). When its program, a script it is given, its
//! working directory (the policy file's directory) or its `policy:` file lies
//! where the run can write, the run rewrites it and then calls the tool: its
//! own code runs on the host. Each test plants that way and shows capsule
//! refuses the tool before anything runs, at `check`, `--dry-run` and `exec`.

mod rpc_common;

use rpc_common::*;
use serde_json::json;

/// In the sandbox: write `argv[1]` with the text `argv[2]`, then call the
/// tool `t` over the RPC fd and print the answer.
const PLANT_AND_CALL: &str = r#"
import json, os, socket, sys
with open(sys.argv[1], "w") as f:
    f.write(sys.argv[2])
os.chmod(sys.argv[1], 0o755)
s = socket.socket(fileno=int(os.environ["CAPSULE_RPC_FD"]))
s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "t", "arguments": {}}}).encode() + b"\n")
sys.stdout.write(s.makefile("rb").readline().decode())
"#;

/// `policy_yaml` at `policy_rel` in a fresh world; the run plants `payload`
/// at `plant_rel` (relative to the world) and calls `t`. Asserts nothing of
/// the run's code ran on the host and that check, --dry-run and exec refuse
/// the tool naming it and `why`.
fn attack(policy_rel: &str, policy_yaml: &str, plant_rel: &str, payload: &str, why: &str) {
    let w = World::new();
    std::fs::create_dir_all(w.path().join("out")).unwrap();
    let d = w.path().display().to_string();
    let policy_yaml = policy_yaml.replace("{d}", &d);
    let payload = payload.replace("{d}", &d);
    let p = w.write(policy_rel, &policy_yaml);
    let p = p.to_string_lossy().into_owned();
    let plant = w.path().join(plant_rel);
    std::fs::write(w.path().join("secret.txt"), "PWNED-MARK\n").unwrap();
    // What the tool was before the run: harmless.
    let original = if plant_rel.ends_with(".yaml") {
        "version: 1\n"
    } else {
        "#!/bin/sh\ncat >/dev/null; echo benign\n"
    };
    std::fs::write(&plant, original).unwrap();

    let plant_s = plant.to_string_lossy().into_owned();
    refused_everywhere(
        &w,
        &p,
        &[PYTHON, "-c", PLANT_AND_CALL, &plant_s, &payload],
        "PWNED-MARK",
        why,
    );
}

/// Run `plant` (which plants the run's code where the tool `t` loads it,
/// then calls the tool) under `policy`, and check that the tool never ran
/// it on the host (no `pwned` file, no `mark` in the output) because
/// capsule refused the policy, saying `why`, at exec, at check and at
/// `--dry-run` alike.
fn refused_everywhere(w: &World, policy: &str, plant: &[&str], mark: &str, why: &str) {
    let pwned = w.path().join("pwned");
    let out = w.exec(&["--policy", policy], plant).output().unwrap();
    assert!(
        !pwned.exists() && !String::from_utf8_lossy(&out.stdout).contains(mark),
        "the run's code ran on the host through the tool: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let r = parse_result(&out);
    assert_eq!(r["exit_code"], 125, "exec refuses: {r}");
    assert!(
        r["error"].as_str().unwrap_or("").contains(why),
        "the refusal says why: {r}"
    );
    let check = w
        .capsule()
        .args(["check", "--policy", policy])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        !check.status.success(),
        "check accepted a tool the run can rewrite:\n{}{err}",
        String::from_utf8_lossy(&check.stdout)
    );
    assert!(
        err.contains("tools.allow[0]") && err.contains("`t`") && err.contains(why),
        "check names the tool and why ({why}): {err}"
    );
    let dry = w
        .capsule()
        .args(["exec", "--dry-run", "--policy", policy, "--", "/bin/true"])
        .output()
        .unwrap();
    let dry_err = String::from_utf8_lossy(&dry.stderr);
    assert!(
        !dry.status.success() && dry_err.contains(why),
        "--dry-run refuses the tool: {dry_err}"
    );
}

const HOST_PAYLOAD: &str = "#!/bin/sh\ncat >/dev/null; id > {d}/pwned; echo pwned\n";

#[test]
fn a_tool_program_the_run_can_write_is_refused() {
    attack(
        "policy.yaml",
        "version: 1\nfilesystem:\n  write: [./out]\ntools:\n  allow:\n    - name: t\n      command: [{d}/out/tool.sh]\n",
        "out/tool.sh",
        HOST_PAYLOAD,
        "its program",
    );
}

#[test]
fn a_tool_script_argument_the_run_can_write_is_refused() {
    attack(
        "policy.yaml",
        "version: 1\nfilesystem:\n  write: [./out]\ntools:\n  allow:\n    - name: t\n      command: [/bin/sh, out/tool.sh]\n",
        "out/tool.sh",
        HOST_PAYLOAD,
        "its argument",
    );
}

#[test]
fn a_tool_working_directory_the_run_can_write_is_refused() {
    // Tools run in the policy file's directory: `python3 -m mod` imports
    // mod from there.
    attack(
        "out/policy.yaml",
        &format!(
            "version: 1\nfilesystem:\n  write: [.]\ntools:\n  allow:\n    - name: t\n      command: [{PYTHON}, -m, toolmod]\n"
        ),
        "out/toolmod.py",
        "import os, sys\nsys.stdin.read()\nos.system('id > {d}/pwned')\nprint('pwned')\n",
        "its working directory",
    );
}

#[test]
fn a_tool_policy_the_run_can_write_is_refused() {
    // The tool's own policy gives it no read of the secret; rewritten, it would.
    attack(
        "policy.yaml",
        "version: 1\nfilesystem:\n  write: [./out]\ntools:\n  allow:\n    - name: t\n      policy: out/tool.yaml\n      command: [/bin/sh, -c, \"cat >/dev/null; cat {d}/secret.txt\"]\n",
        "out/tool.yaml",
        "version: 1\nfilesystem:\n  read: [\"{d}/secret.txt\"]\n",
        "its policy",
    );
}

/// A tool whose parts the run cannot reach still runs, and a tool program
/// named by its bare name is run from where planning found it.
#[test]
fn a_tool_out_of_the_runs_reach_still_runs() {
    let w = World::new();
    std::fs::create_dir_all(w.path().join("out")).unwrap();
    let p = w.write(
        "policy.yaml",
        "version: 1\nfilesystem:\n  write: [./out]\ntools:\n  allow:\n    - name: t\n      command: [sh, -c, \"cat >/dev/null; echo fine\"]\n",
    );
    let p = p.to_string_lossy().into_owned();
    let check = w
        .capsule()
        .args(["check", "--policy", &p])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success()
            && text.contains("tool      t: /")
            && text.contains("none of it where the run can write"),
        "check shows the tool and the absolute program it runs: {text}"
    );
    let (r, a) = w.drive(
        &["--policy", &p],
        &[json!({"method": "tools/call", "params": {"name": "t", "arguments": {}}})],
    );
    assert_eq!(a[0]["result"]["content"][0]["text"], "fine\n", "{}", a[0]);
    // What the check cannot see is said.
    assert!(
        r["enforcement"]["limitations"].as_array().is_some_and(|l| l
            .iter()
            .any(|m| m.as_str().unwrap_or("").contains("inline script"))),
        "{r}"
    );
}

/// In the sandbox: compile `argv[2]` (Python source) into the bytecode
/// cache entry of the module `argv[1]` (a `.py` file the run can only stat),
/// stamped with that file's mtime and size, so that Python on the host runs
/// it instead of the source; then call the tool `t`.
const PLANT_PYC_AND_CALL: &str = r#"
import importlib.util, json, marshal, os, socket, struct, sys
src = sys.argv[1]
st = os.stat(src)
code = compile(sys.argv[2], src, "exec")
pyc = importlib.util.cache_from_source(src)
with open(pyc, "wb") as f:
    f.write(importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF,
                                                      st.st_size & 0xFFFFFFFF) + marshal.dumps(code))
s = socket.socket(fileno=int(os.environ["CAPSULE_RPC_FD"]))
s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "t", "arguments": {}}}).encode() + b"\n")
sys.stdout.write(s.makefile("rb").readline().decode())
"#;

/// The tool's module is only readable to the run, but its bytecode cache
/// beside it is a write grant: `python3 -m toolmod` on the host loads a `.pyc`
/// whose recorded source mtime and size match without reading the source.
/// capsule refuses a tool whose working directory holds such an entry.
#[test]
fn a_tool_bytecode_cache_the_run_can_write_is_refused() {
    let w = World::new();
    let d = w.path().display().to_string();
    std::fs::create_dir_all(w.path().join("__pycache__")).unwrap();
    let module = w.write(
        "toolmod.py",
        "import sys\nsys.stdin.read()\nprint('benign')\n",
    );
    let p = w.write(
        "policy.yaml",
        &format!(
            "version: 1\nfilesystem:\n  read: [.]\n  write: [./__pycache__]\ntools:\n  allow:\n    - name: t\n      command: [{PYTHON}, -m, toolmod]\n"
        ),
    );
    let p = p.to_string_lossy().into_owned();
    let payload =
        format!("import os, sys\nsys.stdin.read()\nos.system('id > {d}/pwned')\nprint('pwned')\n");
    let module = module.to_string_lossy().into_owned();
    refused_everywhere(
        &w,
        &p,
        &[PYTHON, "-c", PLANT_PYC_AND_CALL, &module, &payload],
        "pwned",
        "__pycache__",
    );
}

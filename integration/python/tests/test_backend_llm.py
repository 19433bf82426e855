"""agentnode's llm_access block, mapped onto capsule's own key-holding broker.

A fake OpenAI-compatible provider listens on loopback; capsule (the parent)
holds its key and calls it; the agent inside the sandbox asks over its RPC
fd and never sees the key. agentnode's default-deny and host ceiling apply.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading

import pytest

from capsule_sandbox.backend import CapsuleBackend, ProcessSpec

KEY = "sk-fake-capsule-test-key-4242"

CHILD = r"""
import json, os, socket, sys
s = socket.socket(fileno=int(os.environ["CAPSULE_RPC_FD"]))
f = s.makefile("rwb")
def call(i, method, params):
    f.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
    f.flush()
    return json.loads(f.readline())
for i in range(3):
    r = call(i, "llm/complete", {"messages": [{"role": "user", "content": "hi"}]})
    print(json.dumps(r.get("result", {}).get("message", {}).get("content") or r.get("error", {}).get("data", {}).get("reason")))
print("key-visible" if any("sk-fake" in v for v in os.environ.values()) else "key-hidden")
"""


class _Fake(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_POST(self):  # noqa: N802
        n = int(self.headers.get("content-length", "0"))
        self.rfile.read(n)
        _Fake.seen.append(self.headers.get("authorization", ""))
        body = json.dumps({
            "model": "fake-model",
            "choices": [{"message": {"role": "assistant", "content": "hello from the host"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 3},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def provider(monkeypatch, tmp_path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("CAPSULE_LLM_PROVIDER", "openai-compatible")
    monkeypatch.setenv("CAPSULE_LLM_BASE_URL", f"http://127.0.0.1:{srv.server_address[1]}/v1")
    monkeypatch.setenv("CAPSULE_LLM_MODEL", "fake-model")
    monkeypatch.setenv("CAPSULE_LLM_API_KEY_ENV", "CAPSULE_TEST_FAKE_KEY")
    monkeypatch.setenv("CAPSULE_TEST_FAKE_KEY", KEY)
    _Fake.seen.clear()
    yield srv
    srv.shutdown()


def test_llm_access_for_is_default_deny_and_clamped_by_the_host():
    assert CapsuleBackend.llm_access_for({}) == {"enabled": False}
    assert CapsuleBackend.llm_access_for({"llm_access": {"enabled": "yes"}}) == {"enabled": False}
    host_off = {"agent_sandbox": {"llm": {"enabled": False}}}
    assert CapsuleBackend.llm_access_for({"llm_access": {"enabled": True}}, host_off) == {"enabled": False}
    got = CapsuleBackend.llm_access_for(
        {"llm_access": {"enabled": True, "max_calls": 50, "allowed_models": ["a", "b"]}},
        {"agent_sandbox": {"llm": {"max_calls": 2, "allowed_models": ["b", "c"]}}},
    )
    assert got["enabled"] is True and got["max_calls"] == 2 and got["allowed_models"] == ["b"]


def test_capsules_broker_serves_the_agent_and_keeps_the_key(capsule_bin, audit_log, provider):
    access = CapsuleBackend.llm_access_for({"llm_access": {"enabled": True, "max_calls": 2}})
    b = CapsuleBackend(capsule_bin, audit_log=audit_log, llm_access=access)
    try:
        out = b.run_process(ProcessSpec(command=[sys.executable, "-c", CHILD]), timeout=60)
    finally:
        b.close()
    rc, stdout, stderr = out
    assert rc == 0, stderr
    assert stdout.count("hello from the host") == 2, stdout  # max_calls 2, then refused
    assert "limit_reached" in stdout, stdout
    assert "key-hidden" in stdout, stdout
    assert _Fake.seen and all(h == f"Bearer {KEY}" for h in _Fake.seen)


def test_without_llm_access_the_agent_is_refused(capsule_bin, audit_log, provider):
    b = CapsuleBackend(capsule_bin, audit_log=audit_log)
    try:
        rc, stdout, stderr = b.run_process(ProcessSpec(command=[sys.executable, "-c", CHILD]), timeout=60)
    finally:
        b.close()
    assert rc == 0, stderr
    assert "hello from the host" not in stdout and "not_allowed" in stdout, stdout
    assert not _Fake.seen

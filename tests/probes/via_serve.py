"""Test shim: run one `capsule exec ARGS` through `capsule serve`.

    python3 via_serve.py CAPSULE_BIN exec ARGS...

tests/common routes every `capsule exec` of the integration tests here when
CAPSULE_TEST_VIA_SERVE=1, so the same escape, workload and exit-code tests
run through the warm parent: the shim starts `capsule serve`, sends one
request with this process's environment, working directory and stdin, and
replays the response as `capsule exec` would have printed it (stdout, the
result object for --json, stderr, exit status).
"""
import base64
import json
import os
import subprocess
import sys


def main() -> int:
    binary, sub, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if sub != "exec":
        os.execv(binary, [binary, sub, *args])
    data = b"" if os.isatty(0) else sys.stdin.buffer.read()
    req = {
        "id": 1,
        "args": args,
        "env": dict(os.environ),
        "clear_env": True,
        "cwd": os.getcwd(),
        "stdin_base64": base64.b64encode(data).decode(),
    }
    server = subprocess.Popen([binary, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    server.stdin.write(json.dumps(req).encode() + b"\n")
    server.stdin.close()
    line = server.stdout.readline()
    server.wait()
    if not line:
        sys.stderr.write(f"via_serve: capsule serve exited {server.returncode} without a response\n")
        return 125
    resp = json.loads(line)
    if resp.get("id") != 1:
        sys.stderr.write(f"via_serve: unexpected response {line!r}\n")
        return 125
    out = sys.stdout.buffer
    if "result" in resp:
        out.write(json.dumps(resp["result"], separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    elif "stdout_base64" in resp:
        out.write(base64.b64decode(resp["stdout_base64"]))
    else:
        out.write(resp.get("stdout", "").encode())
    out.flush()
    err = sys.stderr.buffer
    if "stderr_base64" in resp:
        err.write(base64.b64decode(resp["stderr_base64"]))
    else:
        err.write(resp.get("stderr", "").encode())
    if "exit_code" not in resp:
        err.write(f"via_serve: {resp.get('error')}\n".encode())
        return 125
    err.flush()
    return resp["exit_code"]


if __name__ == "__main__":
    sys.exit(main())

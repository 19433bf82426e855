"""capsule_sandbox.ray against the real Ray, installed from PyPI (pinned), on a
local multi-node cluster (issue 22).

Builds (once, cached, like the other conformance venvs) a virtualenv with
``ray==RAY_PINNED`` and runs ``tests/conformance/ray_check.py`` inside it,
once; each of its tests is reported here under its own name. Ray that cannot
be installed or imported FAILS these tests in CI (``CAPSULE_CONFORMANCE_REQUIRED=1``,
set by .ci/run, or ``CI=true``); locally they skip, printing why. Then
``examples/ray`` runs end to end with a plain ``ray.init()``.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import _conformance
from _conformance import CONFORMANCE, run_pytest

# Keep in step with the `ray` extra in integration/python/pyproject.toml.
RAY_PINNED = "2.60.0"
CHECK = CONFORMANCE / "ray_check.py"


def _required() -> bool:
    return _conformance.required() or os.environ.get("CI", "").lower() == "true"


def _inner_tests() -> list[str]:
    """The test ids of ray_check.py (parametrized ones expanded by hand)."""
    tree = ast.parse(CHECK.read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            params = None
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize":
                    params = ast.literal_eval(deco.args[1])
            names += [f"{node.name}[{p}]" for p in params] if params else [node.name]
    return names


def _ray_python() -> Path:
    try:
        python = _conformance.venv(f"ray-{RAY_PINNED}", [f"ray=={RAY_PINNED}"])
    except pytest.skip.Exception as exc:
        if _required():
            pytest.fail(f"Ray is required here (CI) and its venv cannot be built: {exc}", pytrace=False)
        raise
    done = subprocess.run([str(python), "-c", "import ray; print(ray.__version__)"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or done.stdout.strip() != RAY_PINNED:
        msg = f"ray {RAY_PINNED} does not import in {python}: {(done.stderr or done.stdout).strip()[-800:]}"
        if _required():
            pytest.fail(msg, pytrace=False)
        print(f"SKIP: {msg}")
        pytest.skip(msg)
    return python


@pytest.fixture(scope="module")
def ray_python():
    return _ray_python()


def _no_registry(tmp_path, monkeypatch):
    # pip with no index and nothing to find: the install fails, fast, offline.
    monkeypatch.setenv("CAPSULE_CONFORMANCE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.delenv("CAPSULE_CONFORMANCE_REQUIRED", raising=False)


def test_ray_that_cannot_be_installed_fails_in_ci(tmp_path, monkeypatch):
    _no_registry(tmp_path, monkeypatch)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=f"Ray is required here.*ray=={RAY_PINNED}"):
        _ray_python()


def test_ray_that_cannot_be_installed_skips_locally(tmp_path, monkeypatch):
    _no_registry(tmp_path, monkeypatch)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"ray=={RAY_PINNED}"):
        _ray_python()


@pytest.fixture(scope="module")
def ray_run(ray_python, capsule_bin):
    """ray_check.py, run once in the Ray venv: {test id: (outcome, text)}."""
    with tempfile.TemporaryDirectory(prefix="capsule-ray-junit-") as tmp:
        xml = Path(tmp) / "junit.xml"
        done = run_pytest(ray_python, ["-p", "no:randomly", "--junitxml", str(xml), str(CHECK)],
                          capsule_bin=capsule_bin, timeout=900)
        out = done.stdout + done.stderr
        if not xml.exists():
            pytest.fail(f"ray_check.py did not run (exit {done.returncode}):\n{out[-6000:]}", pytrace=False)
        results = {}
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome, text = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = child.tag
                    text = (child.get("message") or "") + "\n" + (child.text or "")
            results[case.get("name")] = (outcome, text)
        return results, out


@pytest.mark.parametrize("name", _inner_tests())
def test_ray(ray_run, name):
    results, out = ray_run
    assert name in results, f"{name} did not run in ray_check.py:\n{out[-4000:]}"
    outcome, text = results[name]
    assert outcome == "passed", f"{name}: {outcome}\n{text[-6000:]}"


def _example() -> Path | None:
    roots = [Path(__file__).resolve().parents[3]]
    if os.environ.get("CAPSULE_TEST_ROOT"):
        roots.insert(0, Path(os.environ["CAPSULE_TEST_ROOT"]))
    for root in roots:
        candidate = root / "examples" / "ray" / "fanout.py"
        if candidate.is_file():
            return candidate
    return None


def test_the_ray_example_runs_unchanged_with_ray_init(ray_python, capsule_bin, tmp_path):
    example = _example()
    if example is None:
        msg = "examples/ray/fanout.py is not in this copy of the tests"
        print(f"SKIP: {msg}")
        pytest.skip(msg)
    base = tempfile.gettempdir()
    ray_tmp = tempfile.mkdtemp(prefix="r", dir=base) if len(base) <= 30 else base
    env = dict(os.environ, CAPSULE_BIN=capsule_bin, RAY_TMPDIR=ray_tmp, CAPSULE_RAY_EXAMPLE_STEPS="60",
               PYTHONPATH=str(_conformance.PACKAGE_ROOT), PYTHONDONTWRITEBYTECODE="1")
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run([str(ray_python), str(example)], env=env, capture_output=True, text=True,
                              timeout=600, cwd=str(tmp_path))
    finally:
        if ray_tmp != base:
            shutil.rmtree(ray_tmp, ignore_errors=True)  # Ray's session logs
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    for row in ("ok", "timeout", "pids limit", "denied", "network refused"):
        assert f"\n{row} " in done.stdout or done.stdout.startswith(f"{row} "), done.stdout
    assert "all 60 steps confined" in done.stdout, done.stdout


# Red team 6: what a step can set on the output/ directory itself (its
# user xattrs and times: Landlock has no hook for them, and output/ is inside
# the step's write grant) must not reach the next step, which a worker gives
# the same emptied workspace.
_LEAVE_ON_OUTPUT = r"""
import json, os, sys
sys.path.insert(0, os.environ["CAPSULE_PKG"])
from capsule_sandbox import ray as cray
binary, root = os.environ["CAPSULE_BIN"], os.environ["CAPSULE_WS_ROOT"]
leave = '''
import os
xattr = True
try:
    os.setxattr(".", "user.secret", b"agent-a-secret")
except OSError:
    xattr = False
os.utime(".", ns=(1234567890123456789, 987654321987654321))
print("xattr" if xattr else "no-xattr")
'''
read = '''
import json, os
try:
    x = os.getxattr(".", "user.secret").decode()
except OSError:
    x = None
st = os.stat(".")
print(json.dumps({"xattr": x, "atime": st.st_atime_ns, "mtime": st.st_mtime_ns, "cwd": os.getcwd()}))
'''
a = cray._run_step(leave, binary=binary, agent_id="agent-a", workspace_root=root)
b = cray._run_step(read, binary=binary, agent_id="agent-b", workspace_root=root)
print(json.dumps({"a": [a.success, a.stdout, a.stderr[-2000:]], "b": [b.success, b.stdout, b.stderr[-2000:]]}))
"""


def test_a_step_leaves_nothing_on_the_output_directory_for_the_next(ray_python, capsule_bin, tmp_path):
    import json

    root = tmp_path / "workers"
    root.mkdir()
    env = dict(os.environ, CAPSULE_BIN=capsule_bin, CAPSULE_WS_ROOT=str(root),
               CAPSULE_PKG=str(_conformance.PACKAGE_ROOT), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([str(ray_python), "-c", _LEAVE_ON_OUTPUT], env=env, capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    a_ok, a_out, a_err = out["a"]
    b_ok, b_out, b_err = out["b"]
    assert a_ok and b_ok, out
    seen = json.loads(b_out)
    assert seen["xattr"] is None, f"agent-b read agent-a's xattr on output/: {seen}"
    assert seen["mtime"] != 987654321987654321, f"agent-b read the mtime agent-a set on output/: {seen}"
    assert seen["atime"] != 1234567890123456789, f"agent-b read the atime agent-a set on output/: {seen}"


# Red team 6: a session's step shapes what the host reads back with
# read_output(): a FIFO (the open blocked the actor for good) or a sparse
# file far larger than the disk it takes (read whole into the actor's memory).
_READ_BACK = r"""
import json, os, sys, threading
sys.path.insert(0, os.environ["CAPSULE_PKG"])
from capsule_sandbox import ray as cray
s = cray._SessionImpl("agent-x", binary=os.environ["CAPSULE_BIN"], workspace_root=os.environ["CAPSULE_WS_ROOT"])
r = s.execute(
    "import os\n"
    "os.mkfifo('fifo')\n"
    "fd = os.open('sparse', os.O_WRONLY | os.O_CREAT, 0o600)\n"
    "os.ftruncate(fd, 300 << 20)\n"
    "open('small', 'w').write('42')\n"
)
out = {"step": [r.success, r.stderr[-2000:]]}
def read(name, **kw):
    try:
        got = s.read_output(name, **kw)
        out[name] = ["read", len(got)]
    except Exception as exc:
        out[name] = ["raised", type(exc).__name__, str(exc)]
for name in ("fifo", "sparse", "small"):
    t = threading.Thread(target=read, args=(name,), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        out[name] = ["hung"]
print(json.dumps(out), flush=True)
s.close()
os._exit(0)
"""


def test_read_output_refuses_what_is_not_a_bounded_regular_file(ray_python, capsule_bin, tmp_path):
    import json

    root = tmp_path / "workers"
    root.mkdir()
    env = dict(os.environ, CAPSULE_BIN=capsule_bin, CAPSULE_WS_ROOT=str(root),
               CAPSULE_PKG=str(_conformance.PACKAGE_ROOT), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([str(ray_python), "-c", _READ_BACK], env=env, capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["step"][0], out
    assert out["fifo"][:2] == ["raised", "ValueError"], f"a FIFO in output/: {out['fifo']}"
    assert out["sparse"][:2] == ["raised", "ValueError"], f"a 300 MiB sparse file: {out['sparse']}"
    assert out["small"] == ["read", 2], out


# Red team 6: read_output() resolved the name, checked it was inside
# output/, then opened the resolved path by name (O_NOFOLLOW on the last
# component only). A step still running (an actor with max_concurrency > 1,
# or a read while a step runs) swaps a directory on that path for a symlink
# to a host directory between the check and the open: the host reads its
# own file and hands it back as the step's output.
_SWAP_RACE = r"""
import json, os, sys, threading, time
sys.path.insert(0, os.environ["CAPSULE_PKG"])
from capsule_sandbox import ray as cray
secret = os.environ["RT6_SECRET_DIR"]
s = cray._SessionImpl("agent-x", binary=os.environ["CAPSULE_BIN"], workspace_root=os.environ["CAPSULE_WS_ROOT"])
step = (
    "import os, time\n"
    "os.makedirs('real', exist_ok=True)\n"
    "open('real/f', 'w').write('inside')\n"
    "os.symlink(%r, 'evil')\n"
    "os.rename('real', 'd')\n"
    "open('ready', 'w').write('1')\n"
    "end = time.time() + 6\n"
    "while time.time() < end:\n"
    "    os.rename('d', 'real'); os.rename('evil', 'd')\n"
    "    os.rename('d', 'evil'); os.rename('real', 'd')\n"
) % secret
done = {}
t = threading.Thread(target=lambda: done.setdefault("r", s.execute(step)), daemon=True)
t.start()
ws = s.workspace()
while not os.path.exists(os.path.join(ws, "output", "ready")) and t.is_alive():
    time.sleep(0.01)
seen = {}
end = time.time() + 5
while time.time() < end and t.is_alive():
    try:
        got = s.read_output("d/f")
        seen[got.decode()] = seen.get(got.decode(), 0) + 1
    except Exception as exc:
        seen[type(exc).__name__] = seen.get(type(exc).__name__, 0) + 1
t.join(30)
r = done.get("r")
print(json.dumps({"seen": seen, "step": [bool(r and r.success), (r.stderr[-1000:] if r else "")]}), flush=True)
s.close()
os._exit(0)
"""


def test_read_output_never_follows_a_link_swapped_in_while_a_step_runs(ray_python, capsule_bin, tmp_path):
    import json

    root = tmp_path / "workers"
    root.mkdir()
    secret = tmp_path / "host-secret"
    secret.mkdir()
    (secret / "f").write_text("SECRET")
    env = dict(os.environ, CAPSULE_BIN=capsule_bin, CAPSULE_WS_ROOT=str(root), RT6_SECRET_DIR=str(secret),
               CAPSULE_PKG=str(_conformance.PACKAGE_ROOT), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([str(ray_python), "-c", _SWAP_RACE], env=env, capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["step"][0], out
    assert out["seen"].get("inside"), f"the race never read the step's own file: {out}"
    assert "SECRET" not in out["seen"], f"read_output followed a swapped-in link to a host file: {out}"

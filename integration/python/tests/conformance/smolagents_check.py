"""capsule's smolagents executor against the installed, pinned smolagents (issue 48).

Run inside the smolagents conformance venv by
``tests/test_conformance_smolagents.py`` (``$CAPSULE_BIN``: the capsule under
test; ``$SMOLAGENTS_TESTS``: the ``tests`` directory of the smolagents sdist).

* smolagents' own ``CommonDockerExecutorIntegration`` (its
  ``tests/test_remote_executors.py``, unmodified: the checks its Docker and
  Modal executors pass) with ``CapsuleExecutor`` as the executor. The sdist
  lacks the ``tests/utils/markers.py`` that file imports: a stand-in gives
  its ``require_run_all`` (skip unless ``RUN_ALL``, as upstream), which only
  marks the Docker and Modal classes, not the one run here.
* capsule's own checks: state between steps, files, errors and timeouts as
  smolagents' ``AgentError``, the confinement (reads outside the work dir and
  the home directory, writes outside it, the network: each fails and the host
  is unchanged), and a ``CodeAgent`` driven by a scripted local ``Model``.
"""

from __future__ import annotations

import importlib
import io
import os
import socket
import sys
import threading
import types
from pathlib import Path

import pytest
from rich.console import Console
from smolagents import CodeAgent
from smolagents.default_tools import FinalAnswerTool
from smolagents.models import ChatMessage, MessageRole, Model
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.utils import AgentError

from capsule_sandbox.smolagents import CapsuleExecutor

BIN = os.environ["CAPSULE_BIN"]


def _load_upstream():
    tests = Path(os.environ["SMOLAGENTS_TESTS"])
    pkg = types.ModuleType("smolagents_upstream_tests")
    pkg.__path__ = [str(tests)]
    utils = types.ModuleType("smolagents_upstream_tests.utils")
    utils.__path__ = []
    markers = types.ModuleType("smolagents_upstream_tests.utils.markers")
    markers.require_run_all = pytest.mark.skipif(not os.getenv("RUN_ALL"), reason="test requires RUN_ALL environment variable")
    sys.modules.update({pkg.__name__: pkg, utils.__name__: utils, markers.__name__: markers})
    return importlib.import_module("smolagents_upstream_tests.test_remote_executors")


_upstream = _load_upstream()


def quiet_logger() -> AgentLogger:
    return AgentLogger(LogLevel.INFO, Console(force_terminal=False, file=io.StringIO()))


def make(**kwargs) -> CapsuleExecutor:
    kwargs.setdefault("audit_log", False)
    kwargs.setdefault("logger", quiet_logger())
    return CapsuleExecutor(binary=BIN, **kwargs)


class TestCapsuleExecutorUpstream(_upstream.CommonDockerExecutorIntegration):
    """smolagents' own checks of a remote executor, on capsule's."""

    @pytest.fixture
    def custom_executor(self):
        executor = make(additional_imports=["pillow", "numpy"])
        yield executor
        executor.delete()


@pytest.fixture
def executor(tmp_path):
    ex = make(work_dir=tmp_path / "work", timeout=5)
    ex.send_tools({"final_answer": FinalAnswerTool()})
    yield ex
    ex.cleanup()


def test_is_a_remote_python_executor(executor):
    assert isinstance(executor, RemotePythonExecutor)


def test_state_files_and_results_between_steps(executor, tmp_path):
    executor.send_variables({"given": [3, 4, 5]})
    out = executor("total = sum(given)\nprint('total is', total)\nopen('total.txt', 'w').write(str(total))\ntotal * 2")
    assert out.logs == "total is 12\n" and out.output == "24" and not out.is_final_answer
    assert (tmp_path / "work" / "total.txt").read_text() == "12"
    out = executor("import math\ndef halve(x):\n    return x / 2\nhalve(total) + math.sqrt(16)")
    assert out.output == "10.0"
    out = executor("final_answer({'total': total, 'halved': halve(total)})")
    assert out.is_final_answer and out.output == {"total": 12, "halved": 6.0}


def test_errors_are_agent_errors_and_state_survives_them(executor):
    executor("kept = 'still here'")
    with pytest.raises(AgentError, match="ZeroDivisionError") as info:
        executor("print('before the error')\n1 / 0")
    assert "before the error" in str(info.value)
    assert executor("kept").output == "'still here'"
    with pytest.raises(AgentError, match="SystemExit"):
        executor("import sys; sys.exit(3)")
    assert executor("kept").output == "'still here'"


def test_timeout_is_an_agent_error_and_the_next_step_starts_afresh(executor):
    executor("kept = 1")
    with pytest.raises(AgentError, match="timed out after 5 seconds"):
        executor("import time\nwhile True: time.sleep(0.1)")
    out = executor("print('alive'); 'kept' in dir()")
    assert "variables from earlier steps are gone" in out.logs and "alive" in out.logs and out.output == "False"
    out = executor("final_answer('tools are back')")  # final_answer came back with the new interpreter
    assert out.is_final_answer and out.output == "tools are back"


def test_a_step_killed_by_a_limit_is_an_agent_error(tmp_path):
    ex = make(work_dir=tmp_path / "work", memory_mb=128)
    try:
        # Killed (cgroup memory.max) or refused the memory (RLIMIT_DATA, where
        # capsule has no cgroup, e.g. unprivileged): either way a failed step.
        with pytest.raises(AgentError, match="interpreter ended|MemoryError"):
            ex("block = bytearray(1024 * 1024 * 1024)\nblock[::4096] = b'x' * len(block[::4096])")
        assert ex("6 * 7").output == "42"
    finally:
        ex.cleanup()


def test_confined_reads_fail_and_the_host_is_unchanged(executor, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    home = Path.home()
    with pytest.raises(AgentError) as info:
        executor(f"print(open({str(secret)!r}).read())")
    assert "host secret" not in str(info.value)
    assert "PermissionError" in str(info.value) or "FileNotFoundError" in str(info.value)
    # Refused (Landlock), or not there at all (a home under /tmp: the run's /tmp is its own).
    with pytest.raises(AgentError, match="PermissionError|FileNotFoundError"):
        executor(f"import os; os.listdir({str(home)!r})")


def test_confined_writes_outside_the_work_dir_fail(executor, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("unchanged")
    home = Path.home()
    before = sorted(os.listdir(home))
    for target in (outside / "keep.txt", outside / "new.txt", home / ".capsule-smolagents-probe"):
        with pytest.raises(AgentError, match="PermissionError|FileNotFoundError|OSError"):
            executor(f"open({str(target)!r}, 'w').write('x')")
    assert (outside / "keep.txt").read_text() == "unchanged" and sorted(os.listdir(outside)) == ["keep.txt"]
    assert sorted(os.listdir(home)) == before


def test_confined_network_fails(executor):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    hits = []

    def accept():
        srv.settimeout(10)
        try:
            while True:
                hits.append(srv.accept()[0].close())
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        with pytest.raises(AgentError, match="Error"):
            executor(f"import socket\ns = socket.socket(); s.settimeout(3)\ns.connect(('127.0.0.1', {srv.getsockname()[1]}))")
        assert not hits
    finally:
        srv.close()


class ScriptedModel(Model):
    """A local model that answers from a script: no network, no weights."""

    def __init__(self, replies):
        super().__init__(model_id="scripted")
        self.replies = list(replies)
        self.prompts = []

    def generate(self, messages, stop_sequences=None, **kwargs):
        self.prompts.append(str(messages))
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.replies.pop(0))


def test_code_agent_with_a_scripted_model_end_to_end(tmp_path):
    home = Path.home()
    model = ScriptedModel([
        "Thought: first the primes.\n<code>\nprimes = [n for n in range(2, 30) if all(n % d for d in range(2, n))]\n"
        "open('primes.txt', 'w').write(' '.join(map(str, primes)))\nprint(len(primes), 'primes')\n</code>",
        "Thought: primes is still defined: sum it.\n<code>\nfinal_answer(sum(primes))\n</code>",
    ])
    executor = make(work_dir=tmp_path / "work")
    agent = CodeAgent(tools=[], model=model, executor=executor, max_steps=4, verbosity_level=0)
    try:
        assert agent.run("Sum the primes below 30, keeping them in primes.txt.") == 129
        assert "10 primes" in model.prompts[1]
        assert (tmp_path / "work" / "primes.txt").read_text().startswith("2 3 5 7")
        # The same agent tries to look at the home directory: smolagents' normal
        # error for a failed code action, shown to the model at the next step.
        before = sorted(os.listdir(home))
        model.replies = [
            f"Thought: look around.\n<code>\nimport os\nprint(os.listdir({str(home)!r}))\n</code>",
            "Thought: not allowed.\n<code>\nfinal_answer('refused')\n</code>",
        ]
        assert agent.run("What is in my home directory?") == "refused"
        assert "PermissionError" in model.prompts[-1] or "FileNotFoundError" in model.prompts[-1]
        assert sorted(os.listdir(home)) == before
    finally:
        agent.cleanup()


def test_the_confined_code_cannot_flood_the_hosts_memory(tmp_path):
    # The code may write anything on the kernel's answer pipe: a line over the
    # host's bound fails the step (the interpreter goes on), and a flood of
    # lines waits in the pipe, not in the host's memory.
    import resource

    find = ("import os, stat\n"
            "def fifo(fd):\n"
            "    try:\n"
            "        return stat.S_ISFIFO(os.fstat(fd).st_mode)\n"
            "    except OSError:\n"
            "        return False\n"
            "channel = next(fd for fd in range(3, 256) if fifo(fd))\n")
    executor = make(work_dir=tmp_path / "work", timeout=30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(AgentError, match="longer than"):
        executor(find + "os.write(channel, b'{' + b'a' * (6 << 20) + b'}\\n')")
    assert executor("'still here'").output == "'still here'"
    out = executor(find + "for _ in range(20000): os.write(channel, b'{}\\n')\n'flooded'")
    assert out.output == "'flooded'"
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    executor.cleanup()
    assert grown_mib < 64, grown_mib


def test_an_executor_dropped_without_cleanup_leaves_nothing(tmp_path):
    import gc
    import time

    ex = make()  # its own temporary work dir
    ex("import os\nos.makedirs('d/e')\nopen('d/e/f', 'w').write('x')\nos.chmod('d', 0)")  # not removable as is
    proc, private, work = ex._session._proc, ex._private, ex.work_dir
    del ex
    gc.collect()
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is not None, "the interpreter's capsule is still running"
    assert not private.exists() and not work.exists()

"""capsule's AutoGen executor against the installed, pinned AutoGen (issue 48).

Run inside the AutoGen conformance venv by ``tests/test_conformance_autogen.py``
(``$CAPSULE_BIN`` is the capsule under test). What AutoGen's own Docker
executor tests do not check: shell blocks, exit codes, files in the work dir,
the confinement (a block reading outside its work dir or the home directory,
writing outside it, reaching the network: each fails as a failed block and
the host is unchanged), ``functions``, the policy arguments, the component
round trip, and AutoGen's ``CodeExecutorAgent`` driven by AutoGen's own
scripted model client (``ReplayChatCompletionClient``), end to end.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import warnings
from pathlib import Path

import pytest
from autogen_agentchat.agents import CodeExecutorAgent
from autogen_agentchat.messages import CodeExecutionEvent, TextMessage
from autogen_core import CancellationToken
from autogen_core.code_executor import CodeBlock, CodeExecutor, with_requirements
from autogen_ext.code_executors._common import CommandLineCodeResult
from autogen_ext.models.replay import ReplayChatCompletionClient

from capsule_sandbox.autogen import CapsuleCommandLineCodeExecutor

BIN = os.environ["CAPSULE_BIN"]


def make(work_dir, **kwargs) -> CapsuleCommandLineCodeExecutor:
    kwargs.setdefault("audit_log", False)
    return CapsuleCommandLineCodeExecutor(work_dir=work_dir, binary=BIN, **kwargs)


def run(coro):
    return asyncio.run(coro)


async def _stream(agent, task):
    """Everything the agent's run emits (its events too) and its TaskResult."""
    seen = [m async for m in agent.run_stream(task=task)]
    return seen[:-1], seen[-1]


async def _blocks(executor, *blocks) -> CommandLineCodeResult:
    async with executor:
        return await executor.execute_code_blocks([CodeBlock(code=c, language=l) for l, c in blocks],
                                                  CancellationToken())


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_is_autogens_code_executor(tmp_path):
    ex = make(tmp_path)
    assert isinstance(ex, CodeExecutor)
    config = ex.dump_component()
    assert config.provider == "capsule_sandbox.autogen.CapsuleCommandLineCodeExecutor"
    loaded = CapsuleCommandLineCodeExecutor.load_component(config)
    assert loaded.timeout == ex.timeout and loaded.work_dir == ex.work_dir


def test_credentials_and_host_rules_survive_dump_and_load(tmp_path):
    from capsule_sandbox import Credential, HostRule, _policy

    ex = make(tmp_path, network_allowlist=["pypi.org", HostRule(host="api.github.com", methods=["GET"])],
              credentials=[Credential(name="gh", env="GITHUB_TOKEN", hosts=["api.github.com"],
                                      placeholder_env=["GITHUB_TOKEN"])])
    loaded = CapsuleCommandLineCodeExecutor.load_component(ex.dump_component())
    policy = _policy.build(loaded._config(), base=loaded._base_policy, python_tools={})
    assert policy == _policy.build(ex._config(), base=ex._base_policy, python_tools={})
    assert policy["network"]["allow_hosts"] == ["pypi.org", {"host": "api.github.com", "methods": ["GET"]}]
    assert [c["name"] for c in policy["credentials"]] == ["gh"]


def test_python_and_shell_blocks_outputs_exit_codes_and_files(tmp_path):
    result = run(_blocks(make(tmp_path),
                         ("python", "open('data.txt', 'w').write('6 7\\n'); print('wrote')"),
                         ("sh", "read a b < data.txt; echo \"product $((a * b))\"; pwd"),
                         ("bash", "echo bash-ok >&2")))
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "product 42" in result.output and "bash-ok" in result.output
    assert str(tmp_path.resolve()) in result.output  # the block's cwd is the work dir
    assert (tmp_path / "data.txt").read_text() == "6 7\n"
    assert result.code_file and Path(result.code_file).parent == tmp_path and Path(result.code_file).exists()
    # The blocks stop at the first that fails; its exit code is the result's.
    result = run(_blocks(make(tmp_path), ("python", "import sys; print('before'); sys.exit(3)"),
                         ("sh", "touch never-made")))
    assert result.exit_code == 3 and "before" in result.output
    assert not (tmp_path / "never-made").exists()
    result = run(_blocks(make(tmp_path), ("sh", "exit 7")))
    assert result.exit_code == 7
    result = run(_blocks(make(tmp_path), ("python", "raise ValueError('boom')")))
    assert result.exit_code == 1 and "ValueError: boom" in result.output
    result = run(_blocks(make(tmp_path), ("javascript", "console.log(1)")))
    assert result.exit_code == 1 and "unknown language" in result.output


def test_timeout_is_the_docker_executors_shape(tmp_path):
    result = run(_blocks(make(tmp_path, timeout=1), ("python", "print('started', flush=True)\nimport time; time.sleep(30)")))
    assert result.exit_code == 124, result
    assert result.output.endswith("Timeout") and "started" in result.output
    result = run(_blocks(make(tmp_path, timeout=1), ("sh", "sleep 30 & wait")))
    assert result.exit_code == 124 and "Timeout" in result.output


def test_confined_reads_outside_the_work_dir_and_home_fail(tmp_path):
    work = tmp_path / "work"
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    home = Path.home()
    result = run(_blocks(make(work), ("python", f"print(open({str(secret)!r}).read())")))
    assert result.exit_code != 0 and "host secret" not in result.output
    # Refused (Landlock), or not there at all (the run's /tmp is its own).
    assert "PermissionError" in result.output or "FileNotFoundError" in result.output, result.output
    result = run(_blocks(make(work), ("python", f"import os; print(os.listdir({str(home)!r}))")))
    # Refused (Landlock), or not there (a home under /tmp: the run's /tmp is its own).
    assert result.exit_code != 0, result.output
    assert "PermissionError" in result.output or "FileNotFoundError" in result.output, result.output
    result = run(_blocks(make(work), ("sh", f"cat {secret}")))
    assert result.exit_code != 0 and "host secret" not in result.output


def test_confined_writes_outside_the_work_dir_fail_and_the_host_is_unchanged(tmp_path):
    work = tmp_path / "work"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("unchanged")
    home = Path.home()
    before_out, before_home = _snapshot(outside), sorted(os.listdir(home))
    code = (
        "import os\n"
        f"for path in [{str(outside / 'keep.txt')!r}, {str(outside / 'new.txt')!r},"
        f" {str(home / '.capsule-autogen-probe')!r}, '/tmp/capsule-autogen-probe-{os.getpid()}']:\n"
        "    try:\n"
        "        open(path, 'w').write('x'); print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, exc.errno)\n"
    )
    result = run(_blocks(make(work), ("python", code)))
    assert result.exit_code == 0, result.output
    assert "WROTE" not in result.output.replace("/tmp/capsule-autogen-probe", "") or \
        result.output.count("WROTE") <= 1, result.output
    assert _snapshot(outside) == before_out
    assert sorted(os.listdir(home)) == before_home
    # /tmp inside is the run's own (private) directory, never the host's.
    assert not Path(f"/tmp/capsule-autogen-probe-{os.getpid()}").exists()
    result = run(_blocks(make(work), ("sh", f"echo x > {outside / 'sh.txt'}")))
    assert result.exit_code != 0 and not (outside / "sh.txt").exists()


def _listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    hits = []

    def accept():
        srv.settimeout(15)
        try:
            while True:
                conn, _ = srv.accept()
                hits.append(1)
                conn.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    return srv, hits


def test_confined_network_fails(tmp_path):
    srv, hits = _listener()
    port = srv.getsockname()[1]
    try:
        code = (
            "import socket\n"
            "s = socket.socket(); s.settimeout(3)\n"
            f"s.connect(('127.0.0.1', {port}))\n"
            "print('CONNECTED')\n"
        )
        result = run(_blocks(make(tmp_path), ("python", code)))
        assert result.exit_code != 0 and "CONNECTED" not in result.output, result.output
        assert not hits
    finally:
        srv.close()


def test_filename_comment_and_delete_tmp_files(tmp_path):
    result = run(_blocks(make(tmp_path), ("python", "# filename: sub/named.py\nprint('named')")))
    assert result.exit_code == 0 and "named" in result.output
    assert result.code_file == str(tmp_path / "sub" / "named.py")
    result = run(_blocks(make(tmp_path), ("python", "# filename: ../escape.py\nprint(1)")))
    assert result.exit_code == 1 and "Filename is not in the workspace" in result.output
    assert not (tmp_path.parent / "escape.py").exists()
    result = run(_blocks(make(tmp_path, delete_tmp_files=True), ("python", "print('gone')")))
    assert result.exit_code == 0 and not Path(result.code_file).exists()


def add_two(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@with_requirements(python_packages=["capsule-no-such-package-for-test"], global_imports=[])
def needs_a_package() -> int:
    return 1


def test_functions_are_importable_from_blocks(tmp_path):
    ex = make(tmp_path, functions=[add_two])
    result = run(_blocks(ex, ("python", "from functions import add_two\nprint(add_two(40, 2))")))
    assert result.exit_code == 0 and "42" in result.output, result.output
    # A function that needs a package: pip runs confined, with no network, and fails.
    ex = make(tmp_path / "pkg", functions=[needs_a_package], timeout=60)
    with pytest.raises(ValueError, match="Pip install failed"):
        run(_blocks(ex, ("python", "print(1)")))


def test_policy_arguments(tmp_path):
    result = run(_blocks(make(tmp_path, env_vars={"GREETING": "hello from the policy"}),
                         ("python", "import os; print(os.environ['GREETING'])")))
    assert result.exit_code == 0 and "hello from the policy" in result.output
    # A base policy that grants a directory to read.
    data = tmp_path.parent / f"{tmp_path.name}-data"
    data.mkdir()
    (data / "in.txt").write_text("granted")
    policy = {"version": 1, "filesystem": {"read": [str(data)]}}
    result = run(_blocks(make(tmp_path, policy=policy), ("sh", f"cat {data / 'in.txt'}")))
    assert result.exit_code == 0 and "granted" in result.output, result.output
    # A memory limit ends a block that exceeds it (a failed block, not an exception).
    # (Killed through the cgroup, or MemoryError under RLIMIT_DATA where capsule has no cgroup.)
    result = run(_blocks(make(tmp_path, memory_mb=64), ("python", "b = bytearray(512 * 1024 * 1024); print(len(b))")))
    assert result.exit_code != 0 and "536870912" not in result.output
    # A policy capsule refuses fails the block, with capsule's reason, and nothing runs.
    result = run(_blocks(make(tmp_path, policy={"version": 1, "filesystem": {"write": ["/etc"]}}),
                         ("sh", "echo RAN")))
    assert result.exit_code == 125 and "RAN" not in result.output and "capsule:" in result.output, result.output


def test_restart_and_cancellation(tmp_path):
    async def go():
        async with make(tmp_path) as ex:
            await ex.restart()
            token = CancellationToken()
            task = asyncio.create_task(ex.execute_code_blocks(
                [CodeBlock(code="import time; time.sleep(10); open('late.txt', 'w').write('x')", language="python")],
                token))
            await asyncio.sleep(1.5)
            token.cancel()
            result = await task
            assert result.exit_code == 1 and "Code execution was cancelled" in result.output
            await asyncio.sleep(0.5)
            assert not (tmp_path / "late.txt").exists()
            after = await ex.execute_code_blocks([CodeBlock(code="print('still works')", language="python")],
                                                 CancellationToken())
            assert after.exit_code == 0 and "still works" in after.output
        with pytest.raises(ValueError, match="not running"):
            await ex.execute_code_blocks([CodeBlock(code="print(1)", language="python")], CancellationToken())
    run(go())


TASK_REPLY = """I will compute it.

```python
primes = [n for n in range(2, 30) if all(n % d for d in range(2, n))]
open("primes.txt", "w").write(" ".join(map(str, primes)))
print("sum of primes below 30:", sum(primes))
```
"""

# The host's home by its path: inside, HOME (and ``~``) is the run's own
# private directory.
SNOOP_REPLY = f"""Let me look around first.

```python
import os
print(os.listdir({str(Path.home())!r}))
```
"""


def test_code_executor_agent_with_a_scripted_model_end_to_end(tmp_path):
    async def go():
        model = ReplayChatCompletionClient([TASK_REPLY, "The sum is 129.", SNOOP_REPLY, "I could not list it."])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # no approval_func: the sandbox is the guard here
            executor = make(tmp_path / "work")
            agent = CodeExecutorAgent("coder", code_executor=executor, model_client=model)
        async with executor:
            seen, done = await _stream(agent, "Write the primes below 30 to primes.txt and print their sum.")
            runs = [m for m in seen if isinstance(m, CodeExecutionEvent)]
            assert runs and runs[0].result.exit_code == 0, done.messages
            assert "sum of primes below 30: 129" in runs[0].result.output
            assert (tmp_path / "work" / "primes.txt").read_text().startswith("2 3 5 7 11")
            assert isinstance(done.messages[-1], TextMessage) and "129" in done.messages[-1].content
            before = sorted(os.listdir(Path.home()))
            seen, done = await _stream(agent, "What is in my home directory?")
            runs = [m for m in seen if isinstance(m, CodeExecutionEvent)]
            assert runs and runs[0].result.exit_code != 0
            assert "PermissionError" in runs[0].result.output or "FileNotFoundError" in runs[0].result.output, \
                runs[0].result.output
            assert sorted(os.listdir(Path.home())) == before
        # The classic use, without a model: the agent runs the code it is sent.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            executor = make(tmp_path / "plain")
            terminal = CodeExecutorAgent("terminal", code_executor=executor)
        async with executor:
            done = await terminal.run(task=TextMessage(content="```python\nprint(6 * 7)\n```", source="user"))
            assert done.messages[-1].content.strip() == "42"
    run(go())


def test_a_dead_capsule_serve_is_replaced(tmp_path):
    async def go():
        async with make(tmp_path) as ex:
            first = await ex.execute_code_blocks([CodeBlock(code="print('one')", language="python")],
                                                 CancellationToken())
            assert first.exit_code == 0
            serve = ex._serve
            if serve is None:  # CAPSULE_SANDBOX_WARM=0: a fresh capsule exec per block, nothing to replace
                return
            os.kill(serve.pid, 9)
            serve._proc.wait()
            second = await ex.execute_code_blocks([CodeBlock(code="print('two')", language="python")],
                                                  CancellationToken())
            assert second.exit_code == 0 and "two" in second.output, second
            assert ex._serve is not serve and ex._serve.alive
    run(go())

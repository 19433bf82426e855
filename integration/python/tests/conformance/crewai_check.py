"""capsule's CrewAI code interpreter tool against the installed, pinned crewai (issue 48).

Run inside the crewai conformance venv by ``tests/test_conformance_crewai.py``.
crewai 1.x no longer ships crewai-tools' ``CodeInterpreterTool`` (the Docker
one), so there is no upstream test to point at it: this checks the Docker
mode's arguments and answers, the confinement, and a CrewAI ``Agent`` in a
``Crew`` driven by a scripted local LLM (a ``BaseLLM`` subclass, crewai's own
seam for custom models) that uses the tool end to end.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402

from capsule_sandbox.crewai import CapsuleCodeInterpreterTool  # noqa: E402

BIN = os.environ["CAPSULE_BIN"]
FAILED = "Something went wrong while running the code: \n"


def make(work_dir, **kwargs) -> CapsuleCodeInterpreterTool:
    kwargs.setdefault("audit_log", False)
    return CapsuleCodeInterpreterTool(work_dir=str(work_dir), binary=BIN, **kwargs)


def test_is_a_crewai_tool_with_the_code_interpreters_arguments(tmp_path):
    tool = make(tmp_path)
    assert isinstance(tool, BaseTool) and tool.name == "Code Interpreter"
    assert set(tool.args_schema.model_json_schema()["properties"]) == {"code", "libraries_used"}


def test_output_files_and_failures_as_the_docker_mode(tmp_path):
    tool = make(tmp_path)
    out = tool.run(code="open('made.txt', 'w').write('6 7')\nprint(6 * 7)", libraries_used=[])
    assert out == "42\n"
    assert (tmp_path / "made.txt").read_text() == "6 7"
    out = tool.run(code="print('before')\nraise ValueError('boom')", libraries_used=[])
    assert out.startswith(FAILED) and "before" in out and "ValueError: boom" in out
    out = tool.run(code="import sys; sys.exit(3)", libraries_used=[])
    assert out.startswith(FAILED)
    out = tool.run(code="import json; print(json.dumps([1]))", libraries_used=["capsule-no-such-lib"])
    assert out.startswith("[1]") and "not importable here: capsule_no_such_lib" in out


def test_timeout(tmp_path):
    out = make(tmp_path, timeout=1).run(code="import time; print('started', flush=True); time.sleep(30)",
                                         libraries_used=[])
    assert out.startswith(FAILED) and "started" in out and out.rstrip().endswith("Timeout after 1 seconds")


def test_confined_reads_writes_and_network_fail_and_the_host_is_unchanged(tmp_path):
    work = tmp_path / "work"
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    home = Path.home()
    before = sorted(os.listdir(home))
    tool = make(work)
    out = tool.run(code=f"print(open({str(secret)!r}).read())", libraries_used=[])
    assert out.startswith(FAILED) and "host secret" not in out.replace(str(secret), "")
    out = tool.run(code=f"import os; print(os.listdir({str(home)!r}))", libraries_used=[])
    assert out.startswith(FAILED) and ("PermissionError" in out or "FileNotFoundError" in out), out
    for target in (outside / "new.txt", home / ".capsule-crewai-probe"):
        out = tool.run(code=f"open({str(target)!r}, 'w').write('x')", libraries_used=[])
        assert out.startswith(FAILED), out
    assert os.listdir(outside) == [] and sorted(os.listdir(home)) == before
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
        out = tool.run(code=f"import socket\ns = socket.socket(); s.settimeout(3)\n"
                            f"s.connect(('127.0.0.1', {srv.getsockname()[1]}))\nprint('CONNECTED')",
                       libraries_used=[])
        assert out.startswith(FAILED) and "CONNECTED" not in out and not hits
    finally:
        srv.close()


class ScriptedLLM(BaseLLM):
    """A local model that answers from a script: no network, no weights."""

    replies: list = []
    seen: list = []

    def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None,
             from_agent=None, response_model=None):
        self.seen.append(str(messages))
        return self.replies.pop(0)

    def supports_function_calling(self) -> bool:
        return False


def _action(code: str) -> str:
    return ("Thought: I will run code.\nAction: Code Interpreter\nAction Input: "
            + json.dumps({"code": code, "libraries_used": []}))


def test_crew_agent_with_a_scripted_llm_end_to_end(tmp_path):
    home = Path.home()
    code = ("primes = [n for n in range(2, 30) if all(n % d for d in range(2, n))]\n"
            "open('primes.txt', 'w').write(' '.join(map(str, primes)))\nprint('sum of primes:', sum(primes))")
    llm = ScriptedLLM(model="scripted", replies=[_action(code), "Thought: I now know the final answer\nFinal Answer: 129"])
    tool = make(tmp_path / "work")
    agent = Agent(role="coder", goal="answer with code", backstory="writes Python", tools=[tool], llm=llm,
                  verbose=False, max_iter=3)
    task = Task(description="Sum the primes below 30, keeping them in primes.txt.", expected_output="a number",
                agent=agent)
    out = Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
    assert out.raw.strip() == "129"
    assert any("sum of primes: 129" in s for s in llm.seen)
    assert (tmp_path / "work" / "primes.txt").read_text().startswith("2 3 5 7")
    before = sorted(os.listdir(home))
    llm.replies = [_action(f"import os\nprint(os.listdir({str(home)!r}))"),
                   "Thought: I now know the final answer\nFinal Answer: refused"]
    llm.seen = []
    task = Task(description="What is in my home directory?", expected_output="a list", agent=agent)
    out = Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
    assert out.raw.strip() == "refused"
    assert any(FAILED.strip() in s and ("PermissionError" in s or "FileNotFoundError" in s) for s in llm.seen)
    assert sorted(os.listdir(home)) == before

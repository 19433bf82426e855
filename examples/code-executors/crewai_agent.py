"""A CrewAI agent with capsule's code interpreter tool, offline.

A scripted LLM (a crewai ``BaseLLM`` subclass) stands in for yours: its agent
uses the "Code Interpreter" tool to solve a small task in the work dir, then
to try to leave the sandbox (read the home directory, write outside the work
dir, reach a listener on this machine's loopback); each failed attempt is the
tool's normal failure answer. The exit status is 0 only when the task ran and
every escape failed.
Run: pip install 'capsule-sandbox[crewai]'; python crewai_agent.py
"""

import json
import os
import socket
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # offline: no telemetry
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402

from capsule_sandbox.crewai import CapsuleCodeInterpreterTool  # noqa: E402

FAILED = "Something went wrong while running the code"


class ScriptedLLM(BaseLLM):
    """Your LLM here; this one replays a script."""

    replies: list = []
    seen: list = []

    def call(self, messages, *args, **kwargs):
        self.seen.append(str(messages))
        return self.replies.pop(0)

    def supports_function_calling(self) -> bool:
        return False


def use_tool(code: str) -> str:
    return "Thought: run it.\nAction: Code Interpreter\nAction Input: " + json.dumps(
        {"code": code, "libraries_used": []})


def main() -> int:
    home = Path.home()
    outside = Path(tempfile.mkdtemp(prefix="capsule-example-outside-"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    attempts = {
        "task": "primes = [n for n in range(2, 30) if all(n % d for d in range(2, n))]\n"
                "open('primes.txt', 'w').write(' '.join(map(str, primes)))\nprint('sum', sum(primes))",
        "read home": f"import os\nprint(os.listdir({str(home)!r}))",
        "write outside": f"open({str(outside / 'escaped.txt')!r}, 'w').write('x')",
        "network": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')",
    }
    confined = True
    with tempfile.TemporaryDirectory() as work:
        llm = ScriptedLLM(model="scripted")
        # tools=[CodeInterpreterTool()]   (crewai-tools < 1.0, Docker)
        agent = Agent(role="coder", goal="answer with code", backstory="writes Python", llm=llm,
                      tools=[CapsuleCodeInterpreterTool(work_dir=work)], max_iter=3, verbose=False)
        for name, code in attempts.items():
            llm.replies, llm.seen = [use_tool(code), "Thought: I now know the final answer\nFinal Answer: done"], []
            Crew(agents=[agent], tasks=[Task(description=f"Step: {name}", expected_output="done", agent=agent)],
                 verbose=False).kickoff()
            answer = next((s for s in llm.seen[1:]), "")
            failed = FAILED in answer
            last = next((w for w in ("sum 129", "PermissionError", "FileNotFoundError", "ConnectionRefusedError")
                         if w in answer), "?")
            print(f"{name:14} {'failed' if failed else 'ran'}: {last}")
            if name == "task":
                confined &= not failed and "sum 129" in answer and (Path(work) / "primes.txt").exists()
            else:
                confined &= failed
    listener.close()
    confined &= not (outside / "escaped.txt").exists()
    outside.rmdir()
    print("all escapes failed, the task ran" if confined else "SOMETHING ESCAPED")
    return 0 if confined else 1


if __name__ == "__main__":
    sys.exit(main())

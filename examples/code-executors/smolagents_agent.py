"""smolagents' CodeAgent on capsule instead of Docker, offline.

A scripted model (a smolagents ``Model`` subclass) stands in for your LLM: it
solves a small task in two steps that share a variable (the confined
interpreter keeps its state between steps), then tries to leave the sandbox
(read the home directory, write outside the work dir, reach a listener on
this machine's loopback); each failed attempt comes back to the model as the
step's error, as any failed code action does. The exit status is 0 only when
the task ran and every escape failed.
Run: pip install 'capsule-sandbox[smolagents]'; python smolagents_agent.py
"""

import socket
import sys
import tempfile
from pathlib import Path

from smolagents import CodeAgent
from smolagents.models import ChatMessage, MessageRole, Model
from smolagents.monitoring import AgentLogger, LogLevel

from capsule_sandbox.smolagents import CapsuleExecutor


class ScriptedModel(Model):
    """Your model here (InferenceClientModel, LiteLLMModel...); this one replays a script."""

    def __init__(self, replies):
        super().__init__(model_id="scripted")
        self.replies = list(replies)
        self.seen = []

    def generate(self, messages, stop_sequences=None, **kwargs):
        self.seen.append(str(messages))
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.replies.pop(0))


def step(body: str) -> str:
    return f"Thought: next step.\n<code>\n{body}\n</code>"


def main() -> int:
    home = Path.home()
    outside = Path(tempfile.mkdtemp(prefix="capsule-example-outside-"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    model = ScriptedModel([
        step("primes = [n for n in range(2, 30) if all(n % d for d in range(2, n))]\nprint(len(primes), 'primes')"),
        step("open('primes.txt', 'w').write(' '.join(map(str, primes)))\nfinal_answer(sum(primes))"),
    ])
    # agent = CodeAgent(tools=[], model=model, executor_type="docker")
    executor = CapsuleExecutor(logger=AgentLogger(LogLevel.OFF))  # the steps' errors go to the model only
    agent = CodeAgent(tools=[], model=model, executor=executor, max_steps=3, verbosity_level=-1)  # -1: quiet
    confined = True
    try:
        answer = agent.run("Sum the primes below 30, keeping them in primes.txt.")
        print(f"{'task':14} answer {answer}, primes.txt: {(executor.work_dir / 'primes.txt').exists()}")
        confined &= answer == 129 and (executor.work_dir / "primes.txt").exists()
        attempts = {
            "read home": f"import os\nprint(os.listdir({str(home)!r}))",
            "write outside": f"open({str(outside / 'escaped.txt')!r}, 'w').write('x')",
            "network": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')",
        }
        for name, body in attempts.items():
            model.replies = [step(body), step("final_answer('gave up')")]
            agent.run(f"Step: {name}")
            error = next((s for s in reversed(model.seen) if "Error" in s), "")
            reason = next((w for w in ("PermissionError", "FileNotFoundError", "ConnectionRefusedError", "OSError")
                           if w in error), None)
            print(f"{name:14} {'failed: ' + reason if reason else 'NOT REFUSED'}")
            confined &= reason is not None
    finally:
        agent.cleanup()
        listener.close()
    confined &= not (outside / "escaped.txt").exists()
    outside.rmdir()
    print("all escapes failed, the task ran" if confined else "SOMETHING ESCAPED")
    return 0 if confined else 1


if __name__ == "__main__":
    sys.exit(main())

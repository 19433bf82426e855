"""AutoGen's CodeExecutorAgent on capsule instead of Docker, offline.

A scripted model (AutoGen's own ReplayChatCompletionClient) stands in for
your LLM: it writes code that solves a small task in the work dir, then code
that tries to leave it (read the home directory, write outside the work dir,
reach a listener on this machine's loopback). Each line printed says how the
attempt ended; the exit status is 0 only when the task ran and every escape
failed. Run: pip install 'capsule-sandbox[autogen]'; python autogen_agent.py
"""

import asyncio
import os
import socket
import sys
import tempfile
import warnings
from pathlib import Path

from autogen_agentchat.agents import CodeExecutorAgent
from autogen_agentchat.messages import CodeExecutionEvent
from autogen_ext.models.replay import ReplayChatCompletionClient

from capsule_sandbox.autogen import CapsuleCommandLineCodeExecutor


def code(body: str) -> str:
    return f"```python\n{body}\n```"


async def main() -> int:
    home = Path.home()
    outside = Path(tempfile.mkdtemp(prefix="capsule-example-outside-"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    attempts = {
        "task": code("primes = [n for n in range(2, 30) if all(n % d for d in range(2, n))]\n"
                     "open('primes.txt', 'w').write(' '.join(map(str, primes)))\nprint('sum', sum(primes))"),
        "read home": code(f"import os\nprint(os.listdir({str(home)!r}))"),
        "write outside": code(f"open({str(outside / 'escaped.txt')!r}, 'w').write('x')"),
        "network": code(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')"),
    }
    replies = []
    for text in attempts.values():
        replies += [text, "Done."]  # the code, then the model's reflection on its result
    model = ReplayChatCompletionClient(replies)
    with tempfile.TemporaryDirectory() as work:
        # executor = DockerCommandLineCodeExecutor(work_dir=work, timeout=30)
        executor = CapsuleCommandLineCodeExecutor(work_dir=work, timeout=30)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # no approval_func: the sandbox is the guard
            agent = CodeExecutorAgent("coder", code_executor=executor, model_client=model)
        confined = True
        async with executor:
            for name in attempts:
                events = [m async for m in agent.run_stream(task=f"Step: {name}")]
                result = next(m.result for m in events if isinstance(m, CodeExecutionEvent))
                last = (result.output.strip().splitlines() or [""])[-1]
                print(f"{name:14} exit {result.exit_code}: {last[:100]}")
                if name == "task":
                    confined &= result.exit_code == 0 and (Path(work) / "primes.txt").exists()
                else:
                    confined &= result.exit_code != 0
    listener.close()
    confined &= not (outside / "escaped.txt").exists()
    os.rmdir(outside)
    print("all escapes failed, the task ran" if confined else "SOMETHING ESCAPED")
    return 0 if confined else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

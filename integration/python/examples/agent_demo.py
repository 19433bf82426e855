"""An "agent" step run through capsule: read input, call a Python tool, write output.

    python3 integration/python/examples/agent_demo.py

Finds capsule as the provider does ($CAPSULE_BIN, the binary installed with the
package, PATH) and, run from a source checkout, the checkout's own build
(`cargo build` puts it under target/; the newest build wins). The sandboxed code can read only the
input directory, write only its session's output/ and the output directory,
has no network, and reaches the host only through the `word_count` tool that
this script serves from Python.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

try:
    from capsule_sandbox import CapsuleSandboxProvider, SandboxConfig, child_settable
except ImportError:  # running from a checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from capsule_sandbox import CapsuleSandboxProvider, SandboxConfig, child_settable


@child_settable("top")  # a defaulted parameter the sandboxed agent may set
def word_count(text: str, top: int = 3) -> dict:
    """Count words in a text; return the total and the most common words."""
    words = [w.strip(".,;:!?").lower() for w in text.split()]
    words = [w for w in words if w]
    return {"total": len(words), "top": Counter(words).most_common(top)}


AGENT_CODE = r'''
import json, os
from capsule_sandbox.client import call_tool

ctx = json.loads(os.environ["CAPSULE_CONTEXT"])
src = os.path.join(os.environ["CAPSULE_INPUT_DIR"], ctx["document"])
text = open(src, encoding="utf-8").read()

stats = call_tool("word_count", text=text, top=3)       # runs on the host, in Python

report = {"document": ctx["document"], "word_count": stats["total"], "top_words": stats["top"]}
with open("report.json", "w") as f:                      # cwd = the session's output/
    json.dump(report, f)
with open(os.path.join(os.environ["CAPSULE_OUTPUT_DIR"], "summary.txt"), "w") as f:
    f.write(f"{ctx['document']}: {stats['total']} words\n")

try:                                                     # what the sandbox forbids
    open(os.path.expanduser("~/.ssh/id_rsa")).read()
    print("read a private key?!")
except OSError:
    print("no access to ~/.ssh, as expected")
print("report written")
'''


def checkout_binary() -> str | None:
    """The newest capsule built in this source checkout (target/<triple>/<profile>/capsule)."""
    root = Path(__file__).resolve().parents[3]
    builds = [p for p in root.glob("target/*/*/capsule") if p.is_file() and p.stat().st_mode & 0o111]
    return str(max(builds, key=lambda p: p.stat().st_mtime)) if builds else None


def main() -> int:
    provider = CapsuleSandboxProvider(tools={"word_count": word_count})
    if not provider.is_available() and checkout_binary():
        provider = CapsuleSandboxProvider(checkout_binary(), tools={"word_count": word_count})
    if not provider.is_available():
        print(
            f"capsule is not available: {provider.unavailable_reason}\n"
            "Install the wheel (README.md, first lines), or from a source checkout build it first: cargo build",
            file=sys.stderr,
        )
        return 2

    with tempfile.TemporaryDirectory(prefix="agent-demo-") as tmp:
        inbox, outbox = Path(tmp, "in"), Path(tmp, "out")
        inbox.mkdir()
        (inbox / "notes.txt").write_text(
            "The sandbox reads the notes. The sandbox calls a tool. The tool counts the words.\n",
            encoding="utf-8",
        )
        config = SandboxConfig(
            timeout_seconds=30,
            input_dir=str(inbox),
            output_dir=str(outbox),
            tool_allowlist=["word_count"],
            tool_max_calls=5,
        )
        session = provider.create_session("demo-agent", config=config)
        try:
            ex = provider.execute_code(
                "demo-agent", session.session_id, AGENT_CODE, context={"document": "notes.txt"}
            )
            result = ex.result
            assert result is not None
            print(result.stdout, end="")
            if not result.success:
                print(f"agent failed (exit {result.exit_code}): {result.stderr}", file=sys.stderr)
                return 1
            report = json.loads(Path(session.workspace, "output", "report.json").read_text())
            print("report:", json.dumps(report))
            print("summary:", (outbox / "summary.txt").read_text(), end="")
            print(f"tool calls: {result.tool_calls}, duration: {result.duration_seconds:.3f}s")
        finally:
            provider.destroy_session("demo-agent", session.session_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())

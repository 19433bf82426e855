"""The long-lived confined interpreter of ``capsule_sandbox.smolagents``.

Runs INSIDE the sandbox (standard library only), as the one process of a
``capsule exec`` session: reads one JSON request per line on stdin
(``{"id": ..., "code": ...}``), runs the code in ONE namespace kept between
requests (the agent's variables survive from step to step, as in a Jupyter
kernel), and answers one JSON line on the channel that was stdout when it
started: ``{"id", "logs", "result"}`` (``result``: the ``repr`` of a last
bare expression, Jupyter's ``text/plain``, or None), or ``{"id", "logs",
"error": {"ename", "evalue", "traceback"}}``. What the code prints is
captured as its logs; fd 1 is pointed at stderr, so a subprocess writing to
its stdout cannot garble the channel.
"""

import ast
import io
import json
import linecache
import os
import sys
import traceback

# The host reads at most 4 MiB a line: a step's logs and result are cut
# well below that (JSON escapes a character in at most 6 bytes... or 12).
MAX_LOG_CHARS = 200_000
MAX_RESULT_CHARS = 100_000


def main():
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    channel.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    channel.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            rid, code = request["id"], request["code"]
        except (ValueError, KeyError, TypeError):
            continue
        logs = io.StringIO()
        reply = {"id": rid}
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = logs
        name = f"<code-{rid}>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # tracebacks show the lines
        try:
            tree = ast.parse(code, name, mode="exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, name, "exec"), namespace)
            value = eval(compile(last, name, "eval"), namespace) if last is not None else None
            text = None if value is None else repr(value)
            if text is not None and len(text) > MAX_RESULT_CHARS:
                text = text[:MAX_RESULT_CHARS] + "...[truncated]"
            reply["result"] = text
        except BaseException as exc:  # noqa: B036 - the agent's code may raise anything, even SystemExit
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                tb = tb.tb_next  # the kernel's own frame is not the agent's business
            reply["error"] = {
                "ename": type(exc).__name__,
                "evalue": str(exc),
                "traceback": traceback.format_exception(type(exc), exc, tb),
            }
        finally:
            sys.stdout, sys.stderr = saved
        text = logs.getvalue()
        if len(text) > MAX_LOG_CHARS:
            text = text[:MAX_LOG_CHARS] + "\n[...logs truncated]\n"
        reply["logs"] = text
        channel.write(json.dumps(reply, default=str) + "\n")
        channel.flush()


if __name__ == "__main__":
    main()

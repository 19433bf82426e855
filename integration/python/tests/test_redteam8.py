"""Red team 8: what a step can do to the Python side that reads its results.

A step of a session goes through the session's warm ``capsule serve``
(``_serve.ServeClient``): its whole result comes back as ONE response line,
which the client reads in 64 KiB chunks. The step chooses how long that line
is (its output, up to ``output_max_bytes`` per stream, grows six-fold when
every byte is a control character JSON escapes as ``\\u0001``).
"""

from __future__ import annotations

import time

from capsule_sandbox import SandboxConfig

_NOISE = "import sys; n = {n}; sys.stdout.write(chr(1) * n); sys.stderr.write(chr(1) * n)"


def _step_seconds(provider, agent: str, mib: int) -> tuple[float, object]:
    cfg = SandboxConfig(output_max_bytes=mib << 20, timeout_seconds=120)
    handle = provider.create_session(agent, config=cfg)
    try:
        start = time.monotonic()
        r = provider.execute_code(agent, handle.session_id, _NOISE.format(n=mib << 20)).result
        return time.monotonic() - start, r
    finally:
        provider.destroy_session(agent, handle.session_id)


def test_a_long_response_line_costs_the_reader_linear_time(make_provider, provider):
    """The client appended each chunk to an immutable ``bytes`` buffer and
    split the whole buffer again: quadratic in the line. A step writing 4 MiB
    of control characters per stream (a 48 MiB response line) held the
    session's reader for ~25 s where a fresh ``capsule exec`` of the same step
    took ~1 s; every other step waiting on that server (a Ray worker's steps
    share one) waited behind it, and could pass its own backstop and have the
    server, with all its steps, killed."""
    cold = make_provider()
    cold.warm_sessions = False  # a fresh `capsule exec` per step
    mib = 4
    warm_s, warm = _step_seconds(provider, "agent-rt8-warm", mib)
    assert warm.success, warm.stderr[-500:]
    assert len(warm.stdout) == mib << 20
    cold_s, cold_r = _step_seconds(cold, "agent-rt8-cold", mib)
    assert cold_r.success, cold_r.stderr[-500:]
    bound = 3 * cold_s + 5
    assert warm_s < bound, f"the warm step took {warm_s:.1f}s (bound {bound:.1f}s)"


#!/bin/bash
# Run inside one container shape by scripts/test-containers, as the shape's
# user, with the stage mounted read-only at /stage. Prints `@@NAME ...`
# records (one line each; JSON compacted) for check.py, then the output of
# each test binary between `@@test-begin NAME` and `@@test-end NAME rc=N`.
set -u
S=/stage
CAP=$S/bin/capsule
one_line() { python3 -c 'import json, sys
t = sys.stdin.read()
try:
    print(json.dumps(json.loads(t)))
except ValueError:
    print(json.dumps({"unparsed": t[-4000:]}))'; }
# `@@NAME rc=N <stdout as one JSON line> <stderr as a JSON string>`
record() { # NAME CMD...
    local name=$1 out err rc
    shift
    out=$("$@" 2>/tmp/ct-err)
    rc=$?
    err=$(python3 -c 'import json, sys; print(json.dumps(sys.stdin.read()[-4000:]))' </tmp/ct-err)
    printf '@@%s rc=%s %s %s\n' "$name" "$rc" "$(printf '%s' "$out" | one_line)" "$err"
}

cd /tmp || exit 1
echo "@@id uid=$(id -u) gid=$(id -g) home=${HOME:-} shape=${CT_SHAPE:-}"
if [ -n "${HOME:-}" ] && touch "$HOME/.ct-probe" 2>/dev/null; then
    rm -f "$HOME/.ct-probe"
    echo "@@home writable"
else
    echo "@@home unwritable"
fi
printf 'version: 1\n' >/tmp/ct-policy.yaml

# What capsule predicts, and what it does, for the default policy.
record doctor "$CAP" doctor --json
record check "$CAP" check --json --policy /tmp/ct-policy.yaml
record dryrun "$CAP" exec --dry-run --json --no-audit -- /bin/echo ok
record exec "$CAP" exec --json --no-audit -- /bin/echo ok
# The same for network mode proxy: the path exec takes to the proxy.
record dryrun_proxy "$CAP" exec --dry-run --json --no-audit --net proxy --allow-host example.org -- /bin/echo ok
record exec_proxy "$CAP" exec --json --no-audit --net proxy --allow-host example.org -- /bin/echo ok

# Credentials (issue 38): the proxy injects a credential into a TLS-terminated
# host on the pod's loopback; the run holds only a placeholder and trusts the
# run's CA through the variables capsule sets.
if [ -r $S/ct-tls/srv.pem ]; then
    python3 $S/ct-tls/origin.py 18943 $S/ct-tls/srv.pem $S/ct-tls/srv.key ct-cred-4711 >/tmp/ct-origin.out 2>&1 &
    origin_pid=$!
    for _ in $(seq 50); do grep -q ready /tmp/ct-origin.out 2>/dev/null && break; sleep 0.1; done
    printf '%s\n' 'version: 1' 'network:' '  mode: proxy' "  upstream_ca: $S/ct-tls/ca.pem" \
        '  allow_hosts: ["localhost:18943"]' 'credentials:' '  - name: ct' '    from: {env: CT_CRED}' \
        '    hosts: ["localhost:18943"]' '    placeholder_env: [CT_CRED]' >/tmp/ct-cred.yaml
    CT_CRED=ct-cred-4711 record credential "$CAP" exec --json --no-audit --policy /tmp/ct-cred.yaml -- \
        python3 -c 'import os, urllib.request
print(urllib.request.urlopen("https://localhost:18943/", timeout=20).read().decode())
print("placeholder=" + str(os.environ["CT_CRED"].startswith("capsule-phantom-")))'
    kill "$origin_pid" 2>/dev/null
    wait "$origin_pid" 2>/dev/null
fi

# The agent host beside the run (same uid) keeps a key in its environment:
# the run must not read it through /proc/<pid>/environ.
CT_SECRET_KEY=ct-secret-4711 /bin/sleep 120 &
host_pid=$!
record proc_environ "$CAP" exec --json --no-audit -- /bin/sh -c "cat /proc/$host_pid/environ; echo; echo rc=\$?"
kill "$host_pid" 2>/dev/null
wait "$host_pid" 2>/dev/null
# A descendant of the run reads its own /proc/self (status and fd).
record proc_self "$CAP" exec --json --no-audit -- /bin/sh -c \
    'head -n 1 /proc/self/status && ls /proc/self/fd >/dev/null && echo self-ok'

# What the pod's seccomp profile lets any process of the pod do, outside
# capsule: unshare(CLONE_NEWUSER) (capsule makes its namespaces by clone
# only, so the Localhost profile refuses every namespace flag to unshare).
record userns_outside python3 -c 'import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.unshare(0x10000000)
print(json.dumps({"rc": rc, "errno": ctypes.get_errno()}))'

# The audit record with the shape's own home (unwritable in a pod): the
# default must work, and `--audit-log -` writes the record to stderr.
record audit_default "$CAP" exec --json -- /bin/echo audited
record audit_stderr "$CAP" exec --json --audit-log - -- /bin/echo audited

# Start-up cost here: the median wall time of `capsule exec -- /bin/true`.
python3 - "$CAP" <<'PY'
import statistics, subprocess, sys, time
times = []
for _ in range(15):
    t = time.perf_counter()
    subprocess.run([sys.argv[1], "exec", "--no-audit", "--", "/bin/true"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times.append((time.perf_counter() - t) * 1000)
print("@@startup median_ms=%.1f min_ms=%.1f" % (statistics.median(times), min(times)))
PY

for t in ${CT_TESTS:-}; do
    echo "@@test-begin $t"
    (cd /tmp && timeout -k 5 300 "$S/tests-bin/$t" --test-threads=2 2>&1)
    echo "@@test-end $t rc=$?"
done
echo "@@done"

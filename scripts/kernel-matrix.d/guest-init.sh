#!/bin/sh
# The guest side of scripts/kernel-matrix (started by /sbin/km-init as PID 1):
# set the machine up like a plain host, apply the scenario, then run the checks
# (or the `boot` command) once as root and once as uid/gid 65534. Everything
# the host reads comes out on a second serial port between @@@ markers.
export PATH=/opt/capsule/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm; mount -t devpts -o gid=5,mode=620 devpts /dev/pts; mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp; mount -t tmpfs -o mode=0755 tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null; mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
busybox ip link set lo up; busybox hostname capsule-guest
# the results go to a second serial port: ttyS1 on x86 (the console is ttyS0); arm64's `virt`
# board has one PL011 for the console, so the host adds a PCI 16550 and says `km.out=ttyS0`
out=ttyS1
for a in $(cat /proc/cmdline); do case $a in km.out=*) out=${a#km.out=};; esac; done
busybox stty -F /dev/$out raw -echo 115200 2>/dev/null
exec 3>/dev/$out
say() { echo "$*" >&3; }
# `systemd-run --scope` as systemd does it, for a guest whose PID 1 is a shell (scenario `session`): the scope's
# cgroup under the slice (with -p Delegate=yes: memory+pids enabled on the slices above it and trusted.delegate=1, as
# systemd 251+ marks it), this process moved into it, then COMMAND exec'd in this same process (pid, stdio and
# environment kept). KM_FAKE_SYSTEMD_RUN=fail: as when D-Bus cannot be reached. Each call is logged as a JSON line
# in /run/km/systemd-run.log. Never removes a scope (systemd's --collect): the checks do, once they looked at it.
km_systemd_run() { cat <<'EOF'
#!/usr/bin/python3
import json, os, sys
args = sys.argv[1:]
opts, props, cmd, i = {}, [], [], 0
while i < len(args):
    a = args[i]
    if a == "--":
        cmd = args[i + 1:]
        break
    if a in ("-p", "--property"):
        props.append(args[i + 1])
        i += 2
        continue
    if a.startswith("--property="):
        props.append(a.split("=", 1)[1])
    elif a.startswith("--") and "=" in a:
        opts[a[2:].split("=", 1)[0]] = a.split("=", 1)[1]
    elif a.startswith("-"):
        opts[a.lstrip("-")] = True
    else:
        cmd = args[i:]
        break
    i += 1


def log(**kw):
    with open("/run/km/systemd-run.log", "a") as f:
        f.write(json.dumps(dict(argv=args, **kw)) + "\n")


def fail(msg):
    log(error=msg)
    print(msg, file=sys.stderr)
    sys.exit(1)


if os.environ.get("KM_FAKE_SYSTEMD_RUN") == "fail":
    fail("Failed to connect to bus: No such file or directory")
if not opts.get("scope") or not cmd:
    fail("this stand-in only runs --scope ... COMMAND")
if os.geteuid() != 0:
    fail("Failed to start transient scope unit: Access denied")
names = opts.get("slice", "system.slice")[:-len(".slice")].split("-")
slices = ["-".join(names[:n + 1]) + ".slice" for n in range(len(names))]
unit = opts.get("unit") or "run-km%d.scope" % os.getpid()
unit += "" if unit.endswith(".scope") else ".scope"
path = "/sys/fs/cgroup"
for sl in slices:
    if "Delegate=yes" in props:
        with open(os.path.join(path, "cgroup.subtree_control"), "w") as f:
            f.write("+memory +pids")
    path = os.path.join(path, sl)
    os.makedirs(path, exist_ok=True)
if "Delegate=yes" in props:
    with open(os.path.join(path, "cgroup.subtree_control"), "w") as f:
        f.write("+memory +pids")
scope = os.path.join(path, unit)
try:
    os.mkdir(scope)
except FileExistsError:
    fail("Failed to start transient scope unit: Unit %s was already loaded or has a fragment file." % unit)
if "Delegate=yes" in props:
    os.setxattr(scope, "trusted.delegate", b"1")
with open(os.path.join(scope, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
log(scope=scope)
os.execvp(cmd[0], cmd)
EOF
}
# `systemd-run --scope -p Delegate=yes capsule ARGS` as it leaves capsule (scenario `scope`): alone in a fresh scope
# under $KM_SCOPE_BASE, marked delegated (trusted.delegate by the system manager, user.delegate by a user's), owned
# by the caller; then capsule exec'd in this same process.
km_in_scope() { cat <<'EOF'
#!/usr/bin/python3
import os, sys
base, n = os.environ["KM_SCOPE_BASE"], 0
while True:
    d = os.path.join(base, "capsule-km-%d-%d.scope" % (os.getpid(), n))
    try:
        os.mkdir(d)
        break
    except FileExistsError:
        n += 1
os.setxattr(d, "trusted.delegate" if os.geteuid() == 0 else "user.delegate", b"1")
with open(os.path.join(d, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
os.execv("/opt/capsule/bin/capsule", ["capsule"] + sys.argv[1:])
EOF
}
mkdir -p /run/km && chmod 1777 /run/km
scenario=$(cat /opt/capsule/scenario 2>/dev/null || echo plain)
ptimeout=$(cat /opt/capsule/phase-timeout 2>/dev/null || echo 800)
case $scenario in
  nouserns)   # as `user.max_user_namespaces=0`, or a container runtime's seccomp profile: no user namespace for anyone
    echo 0 > /proc/sys/user/max_user_namespaces;;
  session)    # a systemd login session (Debian 12 / Ubuntu 22.04): unified cgroup v2, each user's shell in a
              # session scope owned by root, nothing delegated; systemd enables memory+pids on the slices above.
              # A systemd host also has /run/systemd/system and systemd-run: a stand-in (km_systemd_run) does
              # what `systemd-run --scope -p Delegate=yes` does, as PID 1 here is no systemd
    cd /sys/fs/cgroup && echo "+memory +pids" > cgroup.subtree_control && mkdir -p user.slice \
      && echo "+memory +pids" > user.slice/cgroup.subtree_control \
      && for u in 0 65534; do mkdir -p user.slice/user-$u.slice/session-$u.scope \
           && echo "+memory +pids" > user.slice/user-$u.slice/cgroup.subtree_control; done
    mkdir -p /run/systemd/system && km_systemd_run > /usr/local/sbin/systemd-run && chmod 755 /usr/local/sbin/systemd-run
    cd /;;
  scope)      # systemd Delegate=yes units (`systemd-run --scope -p Delegate=yes`, a service with Delegate=yes),
              # which systemd 251+ marks trusted.delegate=1; memory+pids enabled on the slices. Root's shell sits in
              # the delegated km-root.scope with the checker (a capsule started there shares it: it must leave it
              # alone); each capsule of the checks runs alone in a fresh delegated scope (km_in_scope, as
              # `systemd-run --scope -p Delegate=yes capsule ...` gives it). nobody owns a delegated subtree
              # (km-65534.scope, as a User= unit's or a user manager's), its shell in a leaf of it
    cd /sys/fs/cgroup && echo "+memory +pids" > cgroup.subtree_control && mkdir -p system.slice \
      && echo "+memory +pids" > system.slice/cgroup.subtree_control \
      && mkdir system.slice/km-root.scope system.slice/km-65534.scope system.slice/km-65534.scope/shell \
      && echo "+memory +pids" > system.slice/km-65534.scope/cgroup.subtree_control \
      && chown 65534:65534 system.slice/km-65534.scope system.slice/km-65534.scope/cgroup.procs \
           system.slice/km-65534.scope/cgroup.subtree_control system.slice/km-65534.scope/cgroup.threads \
      && python3 -c 'import os
for d in ("system.slice/km-root.scope", "system.slice/km-65534.scope"):
    os.setxattr(d, "trusted.delegate", b"1")
os.setxattr("system.slice/km-65534.scope", "user.delegate", b"1")'
    km_in_scope > /run/km/in-scope && chmod 755 /run/km/in-scope
    cd /;;
esac
say "@@@ HEADER"
{ echo "uname: $(uname -r) $(uname -v)"; echo "machine: $(uname -m)"; echo "cmdline: $(cat /proc/cmdline)"
  echo "capsule_version: $(/opt/capsule/bin/capsule --version 2>&1 | head -1)"
  echo "root: $(awk '$2=="/"{print $1" "$3}' /proc/mounts | tail -1)"
  echo "scenario: $scenario"
  echo "lsm: $(cat /sys/kernel/security/lsm 2>/dev/null || echo '(securityfs unavailable)')"
  echo "landlock_abi_syscall: $(python3 -c 'import ctypes;l=ctypes.CDLL(None,use_errno=True);print(l.syscall(444,0,0,1))' 2>/dev/null)"
  echo "unprivileged_userns_clone: $(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo n/a)"
  echo "max_user_namespaces: $(cat /proc/sys/user/max_user_namespaces 2>/dev/null)"
  echo "cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
  echo "nproc: $(nproc)  mem: $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo)"
  echo "guest_uptime_at_start: $(cut -d' ' -f1 /proc/uptime)"; } >&3 2>&3
mkdir -p /home/km-65534 /srv/km-0 /srv/km-65534 && chown 65534:65534 /home/km-65534 /srv/km-65534
cd /opt/capsule
for who in root nobody; do
  t0=$(cut -d' ' -f1 /proc/uptime)
  say "@@@ BEGIN $who"
  if [ "$who" = root ]; then uid=0; home=/root; pre=""; else uid=65534; home=/home/km-65534
    pre="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all"; fi
  scope="" kmenv=""
  case $scenario in
    session) scope=/sys/fs/cgroup/user.slice/user-$uid.slice/session-$uid.scope;;
    scope) if [ $uid = 0 ]; then scope=/sys/fs/cgroup/system.slice/km-root.scope; base=/sys/fs/cgroup/system.slice
           else scope=/sys/fs/cgroup/system.slice/km-65534.scope/shell; base=/sys/fs/cgroup/system.slice/km-65534.scope; fi
           kmenv="KM_CAPSULE=/run/km/in-scope KM_SCOPE_BASE=$base";;
  esac
  if [ -s /opt/capsule/cmd.sh ]; then run="sh /opt/capsule/cmd.sh"
  else
    tests=""; [ -d /opt/capsule/files/tests ] && tests="--tests /opt/capsule/files/tests"
    run="python3 /opt/capsule/checks.py --user $who --work /srv/km-$uid --scenario $scenario ${scope:+--scope $scope} $tests"
  fi
  # the phase runs in a child shell that first moves itself into the session scope, if any
  sh -c '[ -n "$1" ] && echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$scope" \
    env -i PATH="$PATH" HOME=$home LANG=C.UTF-8 TERM=dumb $kmenv \
    timeout -k 5 "$ptimeout" $pre $run </dev/null >&3 2>&3; rc=$?
  t1=$(cut -d' ' -f1 /proc/uptime)
  say "@@@ END $who rc=$rc guest_seconds=$(echo "$t0 $t1" | awk '{printf "%.1f", $2-$1}')"
done
say "@@@ DMESG"
dmesg 2>/dev/null | grep -iE 'landlock|lsm|audit|segfault|oom|killed|seccomp|BUG|WARN' | tail -40 >&3
say "@@@ DONE"
sync
busybox poweroff -f
echo o > /proc/sysrq-trigger
sleep 5

#!/bin/sh
# The guest side of scripts/kernel-matrix (started by /sbin/km-init as PID 1):
# set the machine up like a plain host, apply the scenario, then run the checks
# (or the `boot` command) once as root and once as uid/gid 65534. Everything
# the host reads comes out on ttyS1 between @@@ markers.
export PATH=/opt/capsule/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm; mount -t devpts -o gid=5,mode=620 devpts /dev/pts; mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp; mount -t tmpfs -o mode=0755 tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null; mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
busybox ip link set lo up; busybox hostname capsule-guest
busybox stty -F /dev/ttyS1 raw -echo 115200 2>/dev/null
exec 3>/dev/ttyS1
say() { echo "$*" >&3; }
scenario=$(cat /opt/capsule/scenario 2>/dev/null || echo plain)
ptimeout=$(cat /opt/capsule/phase-timeout 2>/dev/null || echo 800)
case $scenario in
  nouserns)   # as `user.max_user_namespaces=0`, or a container runtime's seccomp profile: no user namespace for anyone
    echo 0 > /proc/sys/user/max_user_namespaces;;
  session)    # a systemd login session (Debian 12 / Ubuntu 22.04): unified cgroup v2, each user's shell in a
              # session scope owned by root, nothing delegated; systemd enables memory+pids on the slices above
    cd /sys/fs/cgroup && echo "+memory +pids" > cgroup.subtree_control && mkdir -p user.slice \
      && echo "+memory +pids" > user.slice/cgroup.subtree_control \
      && for u in 0 65534; do mkdir -p user.slice/user-$u.slice/session-$u.scope \
           && echo "+memory +pids" > user.slice/user-$u.slice/cgroup.subtree_control; done
    cd /;;
esac
say "@@@ HEADER"
{ echo "uname: $(uname -r) $(uname -v)"; echo "cmdline: $(cat /proc/cmdline)"
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
  scope=""
  [ "$scenario" = session ] && scope=/sys/fs/cgroup/user.slice/user-$uid.slice/session-$uid.scope
  if [ -s /opt/capsule/cmd.sh ]; then run="sh /opt/capsule/cmd.sh"
  else
    tests=""; [ -d /opt/capsule/files/tests ] && tests="--tests /opt/capsule/files/tests"
    run="python3 /opt/capsule/checks.py --user $who --work /srv/km-$uid --scenario $scenario ${scope:+--scope $scope} $tests"
  fi
  # the phase runs in a child shell that first moves itself into the session scope, if any
  sh -c '[ -n "$1" ] && echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$scope" \
    env -i PATH="$PATH" HOME=$home LANG=C.UTF-8 TERM=dumb \
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

"""Signal probes for tests/escape_signals.rs: every way a process can send a
signal to another one by pid, each made as a raw system call, so the test
sees the errno of the syscall itself (no libc fallback in between).

    python3 -c SOURCE HOSTPID OP [OP ...]

Each OP is `name:target:sig`; `target` is `ppid` (the process that started
this one: capsule's supervisor when this is the sandboxed command), `host`
(HOSTPID, a process of the test's, outside the sandbox), `-ppid-group` (the
process group of `ppid`), `-host-group`, `-1`, `0`, or a number. One JSON
line per OP: {"op": OP, "target": pid, "result": "ok" | "EPERM" | ...}.

Nothing here talks to anything; signals go only to the targets named.
"""

import ctypes
import errno
import json
import os
import platform
import socket
import struct
import sys

NR = {
    "x86_64": dict(kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129,
                   rt_tgsigqueueinfo=297, pidfd_send_signal=424, pidfd_open=434,
                   fcntl=72, ioctl=16),
    "aarch64": dict(kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138,
                    rt_tgsigqueueinfo=240, pidfd_send_signal=424, pidfd_open=434,
                    fcntl=25, ioctl=29),
}[platform.machine()]

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

F_SETOWN = 8
F_SETOWN_EX = 15
F_SETSIG = 10
F_OWNER_PID = 1
FIOSETOWN = 0x8901
SIOCSPGRP = 0x8902
SI_QUEUE = -1


def sc(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    if r < 0:
        e = ctypes.get_errno()
        return r, errno.errorcode.get(e, str(e))
    return r, "ok"


def siginfo(sig):
    # struct siginfo: si_signo, si_errno, si_code, (pad), then _rt: si_pid, si_uid.
    buf = ctypes.create_string_buffer(128)
    struct.pack_into("iii", buf, 0, sig, 0, SI_QUEUE)
    struct.pack_into("ii", buf, 16, os.getpid(), os.getuid())
    return buf


def resolve(target, host):
    if target == "ppid":
        return os.getppid()
    if target == "host":
        return host
    if target == "-ppid-group":
        return -os.getpgid(os.getppid())
    if target == "-host-group":
        return -os.getpgid(host)
    return int(target)


def attempt(name, pid, sig):
    if name == "kill":
        return sc("kill", pid, sig)[1]
    if name == "tkill":
        return sc("tkill", pid, sig)[1]
    if name == "tgkill":
        return sc("tgkill", pid, pid, sig)[1]
    if name == "rt_sigqueueinfo":
        info = siginfo(sig)
        return sc("rt_sigqueueinfo", pid, sig, ctypes.addressof(info))[1]
    if name == "rt_tgsigqueueinfo":
        info = siginfo(sig)
        return sc("rt_tgsigqueueinfo", pid, pid, sig, ctypes.addressof(info))[1]
    if name == "pidfd_send_signal":
        fd, err = sc("pidfd_open", pid, 0)
        if err != "ok":
            return "pidfd_open:" + err
        try:
            return sc("pidfd_send_signal", fd, sig, 0, 0)[1]
        finally:
            os.close(fd)
    if name == "procfd":
        # capsule's descriptors (the listener among them) must be out of reach.
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))
        for fd in fds:
            try:
                os.close(os.open("/proc/%d/fd/%s" % (pid, fd), os.O_RDONLY))
                return "ok"
            except OSError:
                pass
        return "EPERM"
    if name == "sigio":
        # The whole route: the owner of a pipe with O_ASYNC gets the F_SETSIG
        # signal (any signal, SIGKILL too) when it becomes readable.
        r, w = os.pipe()
        try:
            res = sc("fcntl", r, F_SETOWN, pid)[1]
            if res == "ok":
                sc("fcntl", r, F_SETSIG, sig)
                sc("fcntl", r, 4, os.O_ASYNC | os.O_NONBLOCK)  # F_SETFL
                os.write(w, b"x")
            return res
        finally:
            os.close(r)
            os.close(w)
    # The owner of a socket gets SIGIO/SIGURG (or the F_SETSIG signal).
    # socketpair: socket(AF_UNIX) itself is refused by default.
    s, t = socket.socketpair()
    try:
        if name == "f_setown":
            return sc("fcntl", s.fileno(), F_SETOWN, pid)[1]
        if name == "f_setown_ex":
            owner = ctypes.create_string_buffer(struct.pack("ii", F_OWNER_PID, pid))
            return sc("fcntl", s.fileno(), F_SETOWN_EX, ctypes.addressof(owner))[1]
        if name in ("fiosetown", "siocspgrp"):
            arg = ctypes.c_int(pid)
            req = FIOSETOWN if name == "fiosetown" else SIOCSPGRP
            return sc("ioctl", s.fileno(), req, ctypes.addressof(arg))[1]
    finally:
        s.close()
        t.close()
    raise ValueError("unknown op " + name)


def main():
    host = int(sys.argv[1])
    for op in sys.argv[2:]:
        name, target, sig = op.split(":")
        try:
            pid = resolve(target, host)
            res = attempt(name, pid, int(sig))
        except Exception as e:  # a probe never stops the others
            pid, res = None, "exception: %r" % (e,)
        print(json.dumps({"op": op, "target": pid, "result": res}), flush=True)


main()

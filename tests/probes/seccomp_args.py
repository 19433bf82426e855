"""Attacks on the syscalls seccomp checks by argument: setuid/setgid modes,
limits and scheduling of other processes, SysV/POSIX IPC, executing a memfd.

Usage: python3 -c SOURCE OP ARG... [';' OP ARG...]...
Every operation prints one JSON line, flushed at once, in the format of
`probe.py`:
  {"op": NAME, "ok": true, "value": ...}
  {"op": NAME, "ok": false, "errno": "EPERM", "error": "..."}
Syscall numbers are x86_64's (the tests that use this are x86_64 only).
A pid argument is a number, or `ppid` (our parent: capsule itself when
there is no pid namespace), or `self` (our own pid, not 0).
"""

import ctypes
import errno
import json
import os
import resource
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

NR = {
    "chmod": 90,
    "fchmod": 91,
    "fchmodat": 268,
    "fchmodat2": 452,
    "setpriority": 141,
    "sched_setparam": 142,
    "sched_setscheduler": 144,
    "sched_setaffinity": 203,
    "ioprio_set": 251,
    "prlimit64": 302,
    "sched_setattr": 314,
    "execveat": 322,
    "memfd_create": 319,
}
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def sc(name, *args):
    """Raw syscall; raises OSError with the kernel's errno."""
    cargs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *cargs)
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def pid(s):
    if s == "ppid":
        return os.getppid()
    if s == "self":
        return os.getpid()
    return int(s, 0)


def mode_arg(s):
    return int(s, 8)


# ------------------------------------------------------------ file modes


def op_mode(path):
    return oct(os.stat(path).st_mode & 0o7777)


def op_chmod(path, mode):
    return sc("chmod", path.encode(), mode_arg(mode))


def op_fchmod(path, mode):
    fd = os.open(path, os.O_RDONLY)
    try:
        return sc("fchmod", fd, mode_arg(mode))
    finally:
        os.close(fd)


def op_fchmodat(path, mode):
    return sc("fchmodat", AT_FDCWD, path.encode(), mode_arg(mode))


def op_fchmodat2(path, mode):
    return sc("fchmodat2", AT_FDCWD, path.encode(), mode_arg(mode), 0)


def op_chmod_high(path, mode):
    """chmod with bits set above the 16 the kernel reads (umode_t): a filter
    reading more than the low bits must not be fooled."""
    return sc("chmod", path.encode(), (1 << 32) | mode_arg(mode))


def op_create_mode(path, mode):
    """open(O_CREAT) with MODE, write a byte, report the resulting mode: the
    kernel strips setuid/setgid at the first write of a process without
    CAP_FSETID."""
    old = os.umask(0)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode_arg(mode))
    finally:
        os.umask(old)
    try:
        created = oct(os.fstat(fd).st_mode & 0o7777)
        os.write(fd, b"#!/bin/sh\n")
        return [created, oct(os.fstat(fd).st_mode & 0o7777)]
    finally:
        os.close(fd)


# ----------------------------------------------- other processes' limits


def op_prlimit(who, res="RLIMIT_FSIZE", soft="0", hard="0"):
    """prlimit64(pid, res, new, NULL): change a process's limit."""
    r = getattr(resource, res)
    resource.prlimit(pid(who), r, (int(soft, 0), int(hard, 0)))
    return True


def op_prlimit_read(who, res="RLIMIT_NOFILE"):
    """prlimit64(pid, res, NULL, old): only read it."""
    return list(resource.prlimit(pid(who), getattr(resource, res)))


def op_prlimit_null_high(who, res="RLIMIT_FSIZE"):
    """prlimit64(pid, res, new, NULL) with NEW a real pointer whose low 32 bits
    are 0: a filter that read only the low word would take it for NULL."""
    import mmap

    addr = 1 << 32
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, ctypes.c_long]
    # PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED_NOREPLACE
    got = libc.mmap(addr, mmap.PAGESIZE, 3, 0x22 | 0x100000, -1, 0)
    if got != addr:
        raise RuntimeError(f"mmap at {addr:#x} gave {got}")
    lim = (ctypes.c_uint64 * 2).from_address(addr)
    lim[0] = lim[1] = 0
    return sc("prlimit64", pid(who), getattr(resource, res), addr, 0)


def op_setrlimit(res="RLIMIT_CORE", soft="0", hard="0"):
    """setrlimit on ourselves: glibc uses prlimit64(0, ...)."""
    resource.setrlimit(getattr(resource, res), (int(soft, 0), int(hard, 0)))
    return list(resource.getrlimit(getattr(resource, res)))


def op_setpriority(which, who, prio):
    return sc("setpriority", int(which, 0), pid(who), int(prio, 0))


def op_getpriority(who):
    return os.getpriority(os.PRIO_PROCESS, pid(who))


def op_sched_setaffinity(who):
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(pid(who), cpus[:1])
    return cpus[:1]


def op_sched_setscheduler(who, policy="3"):
    """SCHED_BATCH (3) / SCHED_IDLE (5): allowed to any owner of the target."""
    param = ctypes.c_int(0)
    return sc("sched_setscheduler", pid(who), int(policy, 0), ctypes.byref(param))


def op_sched_setparam(who):
    param = ctypes.c_int(0)
    return sc("sched_setparam", pid(who), ctypes.byref(param))


def op_sched_setattr(who, policy="3", nice="19"):
    # struct sched_attr, SCHED_ATTR_SIZE_VER0 = 48 bytes: u32 size, u32
    # policy, u64 flags, s32 nice, u32 priority, u64 runtime/deadline/period.
    attr = (ctypes.c_uint32 * 12)()
    attr[0] = 48
    attr[1] = int(policy, 0)
    attr[4] = int(nice, 0)
    return sc("sched_setattr", pid(who), ctypes.byref(attr), 0)


def op_ioprio_set(which, who, prio="0x6007"):
    """IOPRIO_WHO_PROCESS=1, PGRP=2, USER=3; default IOPRIO_CLASS_IDLE."""
    return sc("ioprio_set", int(which, 0), pid(who), int(prio, 0))


# ------------------------------------------------------------------ IPC


def _ret(r):
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def op_shmget(key, size="4096", flags="0"):
    libc.shmget.restype = ctypes.c_int
    return _ret(libc.shmget(int(key, 0), ctypes.c_size_t(int(size, 0)), int(flags, 0)))


def op_shmat_read(shmid):
    """Attach segment SHMID and read its first bytes."""
    libc.shmat.restype = ctypes.c_void_p
    ctypes.set_errno(0)
    addr = libc.shmat(int(shmid, 0), None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        _ret(-1)
    data = ctypes.string_at(addr, 16)
    libc.shmdt(ctypes.c_void_p(addr))
    return data.split(b"\0")[0].decode("utf-8", "replace")


def op_shmctl_stat(shmid):
    buf = ctypes.create_string_buffer(256)
    return _ret(libc.shmctl(int(shmid, 0), 2, buf))  # IPC_STAT


def op_msgget(key, flags="0"):
    return _ret(libc.msgget(int(key, 0), int(flags, 0)))


def op_semget(key, flags="0"):
    return _ret(libc.semget(int(key, 0), 1, int(flags, 0)))


def op_sem_private():
    """A private semaphore set of our own: what a program would make."""
    sid = _ret(libc.semget(0, 1, 0o600 | 0o1000))  # IPC_PRIVATE, IPC_CREAT
    libc.semctl(sid, 0, 0)  # IPC_RMID
    return True


def op_mq_open(name):
    rt = libc
    try:
        rt.mq_open
    except AttributeError:
        rt = ctypes.CDLL("librt.so.1", use_errno=True)
    rt.mq_open.restype = ctypes.c_int
    ctypes.set_errno(0)
    fd = rt.mq_open(name.encode(), os.O_RDWR | os.O_CREAT, 0o600, None)
    _ret(fd)
    os.close(fd)
    rt.mq_unlink(name.encode())
    return True


# ----------------------------------------------------------- memfd exec


def _memfd_with(program):
    fd = os.memfd_create("capsule-probe", 0)
    with open(program, "rb") as f:
        os.write(fd, f.read())
    return fd


def op_memfd_fexecve(program="/bin/echo"):
    """fexecve(memfd) = execveat(fd, "", argv, envp, AT_EMPTY_PATH) in a
    forked child; the value is the child's exit status (0 = the memfd ran)."""
    fd = _memfd_with(program)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            os.dup2(w, 1)
            os.execve(fd, [program, "RAN-FROM-MEMFD"], {})
        except OSError as e:
            os.write(w, f"ERR {errno.errorcode.get(e.errno, e.errno)}".encode())
        os._exit(127)
    os.close(w)
    out = os.read(r, 4096).decode()
    os.waitpid(child, 0)
    if out.startswith("ERR "):
        code = getattr(errno, out[4:].strip(), 0)
        raise OSError(code, os.strerror(code))
    return out.strip()


def op_memfd_proc_exec(program="/bin/echo"):
    """execve("/proc/self/fd/N") of a memfd in a forked child (Landlock does
    not check files on the kernel's internal shmem mount)."""
    fd = _memfd_with(program)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            os.dup2(w, 1)
            os.execve(f"/proc/self/fd/{fd}", [program, "RAN-FROM-MEMFD"], {})
        except OSError as e:
            os.write(w, f"ERR {errno.errorcode.get(e.errno, e.errno)}".encode())
        os._exit(127)
    os.close(w)
    out = os.read(r, 4096).decode()
    os.waitpid(child, 0)
    if out.startswith("ERR "):
        code = getattr(errno, out[4:].strip(), 0)
        raise OSError(code, os.strerror(code))
    return out.strip()


def op_execveat_path(path):
    """execveat(AT_FDCWD, PATH, ..., 0) in a forked child: an ordinary exec by
    path through execveat, which stays allowed."""
    child = os.fork()
    if child == 0:
        argv = (ctypes.c_char_p * 2)(path.encode(), None)
        envp = (ctypes.c_char_p * 1)(None)
        try:
            sc("execveat", AT_FDCWD, path.encode(), argv, envp, 0)
        except OSError as e:
            os._exit(100 + (e.errno % 100))
        os._exit(127)
    _, status = os.waitpid(child, 0)
    code = os.WEXITSTATUS(status)
    if code >= 100 and code != 127:
        e = code - 100
        raise OSError(e, os.strerror(e))
    return code


def op_memfd_create(flags):
    fd = sc("memfd_create", b"capsule-probe", int(flags, 0))
    os.close(fd)
    return True


# ------------------------------------------------------------------ main

OPS = {k[3:]: v for k, v in globals().items() if k.startswith("op_")}


def run(op, args):
    fn = OPS.get(op)
    if fn is None:
        return {"op": op, "ok": False, "errno": None, "exc": "UnknownOp", "error": op}
    try:
        return {"op": op, "ok": True, "value": fn(*args)}
    except OSError as e:
        name = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else None
        return {"op": op, "ok": False, "errno": name, "exc": type(e).__name__, "error": str(e)}
    except Exception as e:
        return {"op": op, "ok": False, "errno": None, "exc": type(e).__name__, "error": str(e)}


def main(argv):
    groups, cur = [], []
    for a in argv:
        if a == ";":
            groups.append(cur)
            cur = []
        else:
            cur.append(a)
    if cur:
        groups.append(cur)
    for g in groups:
        emit(run(g[0], g[1:]))


if __name__ == "__main__":
    main(sys.argv[1:])

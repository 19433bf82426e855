"""A hostile little program: tries operations and reports how each went.

Usage: python3 probe.py OP ARG... [';' OP ARG...]...
(the tests run it as `python3 -c SOURCE OP ARG...`, so no file grant is needed).

Every operation prints exactly one JSON line on stdout, flushed at once:
  {"op": NAME, "ok": true, "value": ...}
  {"op": NAME, "ok": false, "errno": "EACCES", "error": "..."}
  {"op": NAME, "ok": false, "errno": null, "exc": "MemoryError", "error": "..."}
so the tests can assert that an attempt failed AND why. The syscall numbers are
the machine's own (x86_64 or aarch64; any other machine fails at import, rather
than calling whatever another architecture's number means there). Nothing here
talks to anything but loopback, and it only signals the pids it is given.
"""

import ctypes
import errno
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

NR = {
    "x86_64": {
        "getpid": 39,
        "ioctl": 16,
        "clone": 56,
        "ptrace": 101,
        "personality": 135,
        "pivot_root": 155,
        "chroot": 161,
        "mount": 165,
        "umount2": 166,
        "delete_module": 176,
        "init_module": 175,
        "kexec_load": 246,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "unshare": 272,
        "perf_event_open": 298,
        "setns": 308,
        "process_vm_readv": 310,
        "finit_module": 313,
        "bpf": 321,
        "userfaultfd": 323,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "open_tree": 428,
        "openat2": 437,
        "move_mount": 429,
        "fsopen": 430,
        "fsmount": 432,
        "clone3": 435,
    },
    # the generic table (asm-generic/unistd.h), as src/sandbox/seccomp/syscalls_aarch64.rs
    "aarch64": {
        "getpid": 172,
        "ioctl": 29,
        "clone": 220,
        "ptrace": 117,
        "personality": 92,
        "pivot_root": 41,
        "chroot": 51,
        "mount": 40,
        "umount2": 39,
        "delete_module": 106,
        "init_module": 105,
        "kexec_load": 104,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "unshare": 97,
        "perf_event_open": 241,
        "setns": 268,
        "process_vm_readv": 270,
        "finit_module": 273,
        "bpf": 280,
        "userfaultfd": 282,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "open_tree": 428,
        "openat2": 437,
        "move_mount": 429,
        "fsopen": 430,
        "fsmount": 432,
        "clone3": 435,
    },
}[platform.machine()]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
X32_BIT = 0x40000000


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def sc(nr, *args):
    """Raw syscall; raises OSError with the kernel's errno."""
    if isinstance(nr, str):
        nr = NR[nr]
    cargs = []
    for a in args:
        if isinstance(a, int):
            cargs.append(ctypes.c_long(a))
        else:
            cargs.append(a)
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *cargs)
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def num(s):
    return int(s, 0)


# ---------------------------------------------------------------- filesystem


def op_read(path):
    with open(path, "rb") as f:
        return f.read(4096).decode("utf-8", "replace")


def op_listdir(path):
    return sorted(os.listdir(path))


def op_readlink(path):
    return os.readlink(path)


def op_write(path, data="x"):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)
    return True


def op_append(path, data="x"):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)
    return True


def op_open_trunc(path):
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    return True


def op_create(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)
    return True


def op_truncate(path, length="0"):
    os.truncate(path, int(length))
    return True


def op_unlink(path):
    os.unlink(path)
    return True


def op_rmdir(path):
    os.rmdir(path)
    return True


def op_mkdir(path):
    os.mkdir(path)
    return True


def op_rename(src, dst):
    os.rename(src, dst)
    return True


def op_symlink(target, link):
    os.symlink(target, link)
    return True


def op_link(src, dst):
    os.link(src, dst)
    return True


def op_meta(how, path):
    """Change PATH's metadata one way, by path or through a descriptor opened
    for reading only: utime_path, utime_fd, xattr_path, xattr_fd, chmod_path,
    chmod_fd; or *_procfd (by "/proc/self/fd/N" of an O_PATH descriptor, as
    glibc's lchmod fallback does)."""
    fd = None
    if how.endswith("_path"):
        target = path
    elif how.endswith("_procfd"):
        fd = os.open(path, os.O_PATH)
        target = "/proc/self/fd/%d" % fd
    else:
        fd = target = os.open(path, os.O_RDONLY)
    try:
        if how.startswith("utime"):
            os.utime(target, (1, 1))
        elif how.startswith("xattr"):
            os.setxattr(target, "user.capsule", b"x")
        elif how.startswith("chmod"):
            os.chmod(target, 0o604)
        else:
            raise ValueError(how)
    finally:
        if fd is not None:
            os.close(fd)
    return True


def op_chmodx(path):
    os.chmod(path, 0o755)
    return True


def op_exec(path, *args):
    """fork+execve PATH; the value is its exit status."""
    r = subprocess.run([path] + list(args), stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode


def op_exists(path):
    return os.path.lexists(path)


def op_env():
    return dict(os.environ)


def op_environ_file():
    with open("/proc/self/environ", "rb") as f:
        return f.read().decode("utf-8", "replace")


def op_cwd():
    return os.getcwd()


def op_whoami():
    return {"pid": os.getpid(), "ppid": os.getppid(), "uid": os.getuid(),
            "pgid": os.getpgid(0), "sid": os.getsid(0)}


def op_status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    return None


def op_fds():
    """Open descriptors, found with fcntl so that looking opens none."""
    import fcntl
    found = []
    for fd in range(0, 4096):
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
            found.append(fd)
        except OSError:
            pass
    return found


def op_rlimits():
    import resource
    out = {}
    for name in ("CORE", "NPROC", "AS", "DATA", "FSIZE", "NOFILE", "CPU"):
        soft, hard = resource.getrlimit(getattr(resource, "RLIMIT_" + name))
        out[name] = [soft, hard]
    return out


def op_hostpid():
    """Our pid as the host sees it (/proc is the host's even in a pid namespace)."""
    try:
        return int(os.readlink("/proc/self"))
    except OSError:
        return os.getpid()


def op_copy(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data)
    return len(data)


def op_tmp_exec():
    """Write an executable script into $TMPDIR and try to run it."""
    path = os.path.join(os.environ["TMPDIR"], "capsule-probe-exec.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(path, 0o755)
    return op_exec(path)


def op_stdin_line():
    return sys.stdin.readline().strip()


# ------------------------------------------------------------------ processes


def op_kill(pid, sig="15"):
    os.kill(num(pid), num(sig))
    return True


def op_kill_stdin(sig="0"):
    """Read a pid from stdin, then signal it."""
    pid = int(sys.stdin.readline().strip())
    os.kill(pid, num(sig))
    return pid


def op_read_stdin_proc(leaf):
    """Read a pid from stdin, then read /proc/PID/LEAF."""
    pid = int(sys.stdin.readline().strip())
    return op_read("/proc/%d/%s" % (pid, leaf))


def op_kill_own_child():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    os.kill(pid, signal.SIGKILL)
    _, st = os.waitpid(pid, 0)
    return os.WTERMSIG(st) if os.WIFSIGNALED(st) else None


def _sleeper():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    return pid


def _reap(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    os.waitpid(pid, 0)


def op_ptrace_attach_child():
    """PTRACE_ATTACH (16) to our own freshly forked child."""
    pid = _sleeper()
    try:
        sc("ptrace", 16, pid, 0, 0)
        return True
    finally:
        _reap(pid)


def op_ptrace_attach(pid):
    sc("ptrace", 16, num(pid), 0, 0)
    return True


def op_ptrace_peekuser_self():
    """PTRACE_PEEKUSER (3) on ourselves, not traced: the kernel says ESRCH."""
    sc("ptrace", 3, os.getpid(), 0, 0)
    return True


def op_process_vm_readv_child():
    pid = _sleeper()
    try:
        buf = ctypes.create_string_buffer(8)
        local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
        remote = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
        sc("process_vm_readv", pid, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
        return True
    finally:
        _reap(pid)


def op_fork_bomb(n):
    """Fork up to N children that wait on a pipe; report how many forks worked.

    Bounded: the children exit as soon as this process closes the pipe, so the
    run ends on its own whatever the limit does."""
    n = int(n)
    r, w = os.pipe()
    pids, err = [], None
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError as e:
            err = errno.errorcode.get(e.errno, str(e.errno))
            break
        if pid == 0:
            os.close(w)
            try:
                os.read(r, 1)
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(w)
    for pid in pids:
        os.waitpid(pid, 0)
    return {"forked": len(pids), "errno": err}


def op_alloc(mb):
    """Allocate MB MiB and touch every page."""
    emit({"op": "alloc_start"})
    b = bytearray(int(mb) << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    return len(b)


def op_shmem(kind, mb, hold="4", where=None):
    """Hold MB MiB that RLIMIT_DATA does not count, then wait HOLD seconds:
    'anon' (MAP_SHARED|MAP_ANONYMOUS, touched; 'anon_orphan': in an orphaned
    setsid'd grandchild), 'memfd' (written, never
    mapped), 'memfd_parked' (written, sent into a socket pair and closed: in
    flight, in no descriptor table), 'sysv' (a SysV segment touched and
    detached), 'tmpfs' (a file in $TMPDIR, or in WHERE when given;
    'tmpfs_at': the file WHERE itself) or
    'tmpfs_unlinked' (one unlinked while held open)."""
    size = int(mb) << 20
    chunk = b"m" * (1 << 20)
    keep = []
    if kind in ("anon", "anon_orphan"):
        import mmap

        if kind == "anon_orphan" and os.fork() != 0:
            # The memory lives in a setsid'd grandchild whose parent exits:
            # an orphan (reparented to capsule without a pid namespace).
            emit({"op": "shmem_held", "kind": kind})
            time.sleep(float(hold) + 2)
            return size
        if kind == "anon_orphan":
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
        m = mmap.mmap(-1, size)
        for i in range(0, size, 4096):
            m[i] = 1
        keep.append(m)
        if kind == "anon_orphan":
            time.sleep(float(hold) + 2)
            os._exit(0)
    elif kind in ("memfd", "memfd_parked"):
        fd = os.memfd_create("hold")
        for _ in range(int(mb)):
            os.write(fd, chunk)
        if kind == "memfd_parked":
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            socket.send_fds(a, [b"x"], [fd])
            os.close(fd)
            keep.extend([a, b])
        else:
            keep.append(fd)
    elif kind == "sysv":
        # A SysV segment, touched, then detached and never removed: held by
        # the IPC namespace, mapped by no process.
        # In 16 MiB segments, each attached only while it is filled: at no
        # moment does a process map more than one.
        libc.shmget.restype = ctypes.c_int
        libc.shmat.restype = ctypes.c_void_p
        step = 16 << 20
        for _ in range(0, size, step):
            shmid = libc.shmget(0, ctypes.c_size_t(step), 0o1600)
            if shmid < 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
            addr = libc.shmat(shmid, None, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
            ctypes.memset(addr, 1, step)
            libc.shmdt(ctypes.c_void_p(addr))
    elif kind in ("tmpfs", "tmpfs_at"):
        at = where if kind == "tmpfs_at" else os.path.join(where or os.environ["TMPDIR"], "hold")
        with open(at, "wb") as f:
            for _ in range(int(mb)):
                f.write(chunk)
    elif kind == "tmpfs_unlinked":
        # 16 MiB files, each unlinked as soon as it is written: at no moment
        # does a name reach more than one.
        for i in range(0, int(mb), 16):
            path = os.path.join(os.environ["TMPDIR"], "hold%d" % i)
            f = open(path, "wb")
            for _ in range(16):
                f.write(chunk)
            f.flush()
            os.unlink(path)
            keep.append(f)
    else:
        raise ValueError(kind)
    emit({"op": "shmem_held", "kind": kind})
    time.sleep(float(hold))
    return size


def op_zombie():
    """Fork a child that exits at once and leave it unreaped: a zombie of
    the run (as a shell's finished background job is until it waits)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    time.sleep(0.05)
    return pid


def op_fsize(path, mb):
    chunk = b"z" * 65536
    total = 0
    with open(path, "wb", buffering=0) as f:
        while total < int(mb) << 20:
            total += f.write(chunk)
    return total


def op_nofile(n):
    fds = []
    try:
        for _ in range(int(n)):
            fds.append(os.open("/dev/null", os.O_RDONLY))
        return len(fds)
    finally:
        for fd in fds:
            os.close(fd)


def op_grandchild(pidfile, token, ignore_term="1"):
    """Double-fork a setsid'd grandchild that ignores SIGTERM, writes its pid
    to PIDFILE and sleeps; TOKEN lands in its argv so the test can recognise it."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        if ignore_term == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for fd in (0, 1, 2):
            try:
                os.close(fd)
            except OSError:
                pass
        os.execv(sys.executable, [sys.executable, "-c",
                 "import os,sys,time\n"
                 "import signal\n"
                 "signal.signal(signal.SIGTERM, signal.SIG_IGN) if sys.argv[2]=='1' else None\n"
                 "try:\n  me = int(os.readlink('/proc/self'))\n"
                 "except OSError:\n  me = os.getpid()\n"
                 "open(sys.argv[1]+'.tmp','w').write(str(me))\n"
                 "os.rename(sys.argv[1]+'.tmp', sys.argv[1])\n"
                 "time.sleep(120)\n", pidfile, ignore_term, token])
    os.waitpid(pid, 0)
    deadline = time.time() + 10
    while not os.path.exists(pidfile) and time.time() < deadline:
        time.sleep(0.02)
    return os.path.exists(pidfile)


def op_trap(sig, path, code="7"):
    """Install a handler for SIG that writes the signal number to PATH and
    exits CODE; then wait for it."""
    def handler(signum, frame):
        with open(path, "w") as f:
            f.write(str(signum))
        os._exit(int(code))
    signal.signal(num(sig), handler)
    emit({"op": "trap_ready"})
    time.sleep(60)
    return "no signal"


def op_sleep(s):
    time.sleep(float(s))
    return True


def op_exit(code):
    sys.stdout.flush()
    os._exit(int(code))


def op_selfkill(sig):
    sys.stdout.flush()
    os.kill(os.getpid(), num(sig))
    time.sleep(5)
    return "survived"


# ------------------------------------------------------------------- syscalls


def op_syscall(nr, *args):
    return sc(num(nr), *[num(a) for a in args])


def op_unshare(flags):
    sc("unshare", num(flags))
    return True


def op_clone_ns(flags):
    """Raw clone(flags|SIGCHLD); the child exits at once."""
    pid = sc("clone", num(flags) | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return True


def op_clone3():
    # size 0 is below CLONE_ARGS_SIZE_VER0: the kernel itself says EINVAL.
    return sc("clone3", 0, 0)


def op_mount_bad():
    # The target does not exist: without seccomp the kernel says ENOENT
    # before it checks privilege.
    return sc("mount", b"none", b"/nonexistent-capsule-target", b"tmpfs", 0, 0)


def op_umount_bad():
    return sc("umount2", b"/nonexistent-capsule-target", 0)


def op_pivot_root_bad():
    return sc("pivot_root", b"/nonexistent-capsule-a", b"/nonexistent-capsule-b")


def op_chroot_bad():
    return sc("chroot", b"/nonexistent-capsule-root")


def op_fsopen_bad():
    return sc("fsopen", b"capsule-no-such-fs", 0)


def op_open_tree_bad():
    return sc("open_tree", -100, b"/nonexistent-capsule-target", 0)


def op_setns_bad():
    return sc("setns", -1, 0)


def op_bpf_bad():
    # cmd 9999 does not exist: the kernel says EINVAL.
    return sc("bpf", 9999, 0, 0)


def op_keyctl_bad():
    # operation 9999 does not exist: the kernel says EOPNOTSUPP.
    return sc("keyctl", 9999, 0, 0, 0, 0)


def op_add_key_bad():
    return sc("add_key", b"capsule_no_such_type", b"desc", 0, 0, -4)


def op_request_key_bad():
    return sc("request_key", b"capsule_no_such_type", b"desc", 0, 0)


def op_io_uring_bad():
    # entries 0: the kernel says EINVAL (or EFAULT for the NULL params).
    return sc("io_uring_setup", 0, 0)


def op_io_uring_enter_bad():
    return sc("io_uring_enter", -1, 0, 0, 0, 0, 0)


def op_userfaultfd_user():
    # UFFD_USER_MODE_ONLY is allowed to unprivileged users by the kernel.
    fd = sc("userfaultfd", 1 | os.O_CLOEXEC)
    os.close(fd)
    return True


def op_perf_bad():
    # NULL attr: the kernel says EFAULT.
    return sc("perf_event_open", 0, 0, -1, -1, 0)


def op_kexec_bad():
    return sc("kexec_load", 0, 0, 0, 0xFFFFFFFF)


def op_finit_module_bad():
    return sc("finit_module", -1, b"", 0)


def op_init_module_bad():
    return sc("init_module", 0, 0, b"")


def op_delete_module_bad():
    return sc("delete_module", b"capsule_no_such_module", 0)


def op_personality(persona):
    return sc("personality", num(persona))


def _ioctl_devnull(cmd):
    fd = os.open("/dev/null", os.O_RDWR)
    try:
        c = ctypes.c_char(b"x")
        return sc("ioctl", fd, cmd, ctypes.addressof(c))
    finally:
        os.close(fd)


def op_tiocsti():
    # On /dev/null the kernel says ENOTTY; seccomp must refuse first.
    return _ioctl_devnull(TIOCSTI)


def op_tiocsti_high():
    # CVE-2019-10063: the kernel truncates cmd to 32 bits, a filter must too.
    return _ioctl_devnull(TIOCSTI | (1 << 32))


def op_tioclinux():
    return _ioctl_devnull(TIOCLINUX)


def op_x32():
    """getpid through the x32 ABI: a filter must kill, not allow."""
    emit({"op": "x32_start"})
    return sc(X32_BIT | NR["getpid"])


def op_nosys(nr="1000"):
    return sc(num(nr))


# ------------------------------------------------------------ open mode 3


FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602


def op_open_mode3(path, extra="0"):
    """open(PATH, 3 | EXTRA): access mode 3, neither reading nor writing."""
    fd = os.open(path, 3 | num(extra))
    os.close(fd)
    return True


def op_open_mode3_setflags(path):
    """A mode-3 descriptor used for FS_IOC_GETFLAGS/SETFLAGS (set what it reads)."""
    import fcntl
    import struct
    fd = os.open(path, 3)
    try:
        buf = fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0))
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, buf)
        return struct.unpack("l", buf)[0]
    finally:
        os.close(fd)


def op_openat2(path, flags="0"):
    """openat2(AT_FDCWD, PATH, {flags}): its flags lie behind a pointer."""
    how = (ctypes.c_uint64 * 3)(num(flags), 0, 0)
    fd = sc(NR["openat2"], -100, ctypes.c_char_p(path.encode()), ctypes.byref(how), 24)
    os.close(fd)
    return True


# -------------------------------------------------------------------- network


def op_socket(family, stype, proto="0"):
    s = socket.socket(num(family), num(stype), num(proto))
    s.close()
    return True


def op_socketpair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.sendall(b"ping")
    got = b.recv(4)
    a.close()
    b.close()
    return got.decode()


def op_socketpair_type(stype):
    """socketpair(AF_UNIX, TYPE) (flags included), then one message across."""
    a, b = socket.socketpair(socket.AF_UNIX, num(stype))
    try:
        a.send(b"ping")
        return b.recv(4).decode()
    finally:
        a.close()
        b.close()


def op_dgram_pair_sendto(path, payload="hello", stype="2"):
    """A datagram socketpair re-aimed with sendto at PATH (a host datagram socket)."""
    a, b = socket.socketpair(socket.AF_UNIX, num(stype))
    try:
        return a.sendto(payload.encode(), path)
    finally:
        a.close()
        b.close()


def op_socket_scan():
    """socket(family, type, 0) for families 0..63 and the common types.
    Value: the combinations that succeeded, and every errno seen."""
    ok, errs = [], {}
    for fam in range(64):
        for st in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET):
            try:
                fd = libc.socket(fam, st | socket.SOCK_CLOEXEC, 0)
                if fd < 0:
                    e = ctypes.get_errno()
                    name = errno.errorcode.get(e, str(e))
                    errs.setdefault(name, []).append([fam, st])
                else:
                    os.close(fd)
                    ok.append([fam, st])
            except Exception as e:  # pragma: no cover
                errs.setdefault(type(e).__name__, []).append([fam, st])
    return {"ok": ok, "errors": errs}


def op_tcp_connect(host, port, payload="hello"):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, int(port)))
        s.sendall(payload.encode())
    finally:
        s.close()
    return True


def op_tcp_listen(host):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.bind((host, 0))
        s.listen(1)
        return s.getsockname()[1]
    finally:
        s.close()


def op_udp_send(host, port, payload="hello"):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        s.sendto(payload.encode(), (host, int(port)))
    finally:
        s.close()
    return True


def op_unix_connect(path, payload="hello"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(path)
        s.sendall(payload.encode())
    finally:
        s.close()
    return True


def op_abstract_connect(name, payload="hello"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect("\0" + name)
        s.sendall(payload.encode())
    finally:
        s.close()
    return True


def op_abstract_selftest(name):
    """Listener and client both inside this process: a scope must allow it."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(1)
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cli.connect("\0" + name)
    conn, _ = srv.accept()
    cli.sendall(b"ping")
    got = conn.recv(4)
    for s in (cli, conn, srv):
        s.close()
    return got.decode()


# ----------------------------------------------------------------------- main


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
    except Exception as e:  # MemoryError and friends: the class is the reason
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

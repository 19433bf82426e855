#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
/*
 * outer_seccomp MODE PROGRAM ARGS...: run PROGRAM under a seccomp filter shaped like what a container or a
 * CI runner puts around capsule (tests/exec_fallbacks.rs), then exec it:
 *
 *   runtimedefault  Docker's/containerd's RuntimeDefault for a pod without CAP_SYS_ADMIN (as
 *                   /work/shared/tools/containers/podman-shapes.sh's pod-runtimedefault): EPERM for unshare, setns,
 *                   the mount family and clone with any namespace flag; clone3 ENOSYS (so programs fall back to
 *                   clone); EPERM for ptrace, process_vm_readv/writev and pidfd_getfd (allowed there only with
 *                   CAP_SYS_PTRACE).
 *   runtimedefault-enosys  the same, but clone with a namespace flag fails with ENOSYS (podman 4.3 applies that
 *                   profile so: its default errno) while the listed calls keep their EPERM.
 *   nomount         namespaces can be created (clone and unshare allowed) but not used: the mount family fails
 *                   with EPERM, as under AppArmor's unprivileged_userns profile (Ubuntu 23.10+) or a seccomp
 *                   profile that allows unshare but denies mount.
 *   noifup          namespaces and mounts work, but bringing an interface up (ioctl SIOCSIFFLAGS) fails with
 *                   EPERM, as AppArmor's profile refuses loopback in the new network namespace.
 */
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_move_mount
#define __NR_move_mount 429
#endif
#ifndef __NR_fsopen
#define __NR_fsopen 430
#endif
#ifndef __NR_fsconfig
#define __NR_fsconfig 431
#endif
#ifndef __NR_fsmount
#define __NR_fsmount 432
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef __NR_fspick
#define __NR_fspick 433
#endif
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
/* CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET: the mask of the RuntimeDefault clone rule. */
#define NS_FLAGS 0x7E020000u
#define SIOCSIFFLAGS_ 0x8914u

#define LD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | err)

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: outer_seccomp runtimedefault|runtimedefault-enosys|nomount|noifup PROGRAM ARGS...\n");
        return 125;
    }
    const char *mode = argv[1];
    unsigned err = EPERM;
    unsigned clone_err = strcmp(mode, "runtimedefault-enosys") == 0 ? ENOSYS : EPERM;
    int ns = strncmp(mode, "runtimedefault", 14) == 0;
    int mounts = ns || strcmp(mode, "nomount") == 0;
    int ifup = strcmp(mode, "noifup") == 0;
    if (!ns && !mounts && !ifup) {
        fprintf(stderr, "outer_seccomp: unknown mode %s\n", mode);
        return 125;
    }
    struct sock_filter f[96];
    int n = 0;
#define PUT(...)                                                                                                   \
    do {                                                                                                           \
        struct sock_filter _i[] = {__VA_ARGS__};                                                                   \
        memcpy(f + n, _i, sizeof _i);                                                                              \
        n += sizeof _i / sizeof _i[0];                                                                             \
    } while (0)
    PUT(LD_NR);
    if (mounts) {
        PUT(DENY(__NR_mount), DENY(__NR_umount2), DENY(__NR_pivot_root), DENY(__NR_open_tree),
            DENY(__NR_move_mount), DENY(__NR_fsopen), DENY(__NR_fsconfig), DENY(__NR_fsmount), DENY(__NR_fspick),
            DENY(__NR_mount_setattr));
    }
    if (ns) {
        PUT(DENY(__NR_unshare), DENY(__NR_setns));
        /* Without CAP_SYS_PTRACE these profiles refuse reading another process (capsule's guards do). */
        PUT(DENY(__NR_ptrace), DENY(__NR_process_vm_readv), DENY(__NR_process_vm_writev), DENY(__NR_pidfd_getfd));
        /* clone3 is ENOSYS in every RuntimeDefault profile, so that libc falls back to clone. */
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
        /* clone: EPERM (ENOSYS) when any namespace flag is set (args[0], low 32 bits on little-endian). */
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3),
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
            BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, NS_FLAGS, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | clone_err));
        PUT(LD_NR);
    }
    if (ifup) {
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 3),
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SIOCSIFFLAGS_, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
    }
    PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    struct sock_fprog p = {(unsigned short)n, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p)) {
        perror("outer_seccomp");
        return 125;
    }
    execv(argv[2], argv + 2);
    perror("execv");
    return 127;
}

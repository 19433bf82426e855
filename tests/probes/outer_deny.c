#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
/*
 * outer_deny NAME[,NAME...] PROGRAM ARGS...: run PROGRAM under a seccomp filter that answers EPERM to the named
 * system calls, as a container's seccomp profile answers the calls it gates on a capability the container lacks
 * (tests/container_guards.rs), then exec it. Stacks with tests/probes/outer_seccomp.c.
 *
 *   pidfd_getfd, kcmp, process_madvise   Docker's and containerd's RuntimeDefault without CAP_SYS_PTRACE (the
 *                                        same group's ptrace and process_vm_readv stay allowed on Linux 4.8+)
 *   chroot                               podman's default profile without CAP_SYS_CHROOT
 *   setns                                podman's and moby's profiles without CAP_SYS_ADMIN
 */
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef __NR_process_madvise
#define __NR_process_madvise 440
#endif

static const struct {
    const char *name;
    unsigned nr;
} CALLS[] = {
    {"pidfd_getfd", __NR_pidfd_getfd}, {"kcmp", __NR_kcmp},   {"process_madvise", __NR_process_madvise},
    {"chroot", __NR_chroot},           {"setns", __NR_setns},
};

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: outer_deny NAME[,NAME...] PROGRAM ARGS...\n");
        return 125;
    }
    struct sock_filter f[64];
    int n = 0;
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    char list[256];
    snprintf(list, sizeof list, "%s", argv[1]);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < sizeof CALLS / sizeof CALLS[0]; i++) {
            if (strcmp(CALLS[i].name, tok) == 0) {
                break;
            }
        }
        if (i == sizeof CALLS / sizeof CALLS[0] || n > 60) {
            fprintf(stderr, "outer_deny: unknown system call %s\n", tok);
            return 125;
        }
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CALLS[i].nr, 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    }
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog p = {(unsigned short)n, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p)) {
        perror("outer_deny");
        return 125;
    }
    execv(argv[2], argv + 2);
    perror("execv");
    return 127;
}

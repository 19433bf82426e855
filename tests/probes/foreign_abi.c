/* A hostile little program: makes a system call through a foreign ABI.
 *
 *   foreign_abi x32    getpid through the x32 ABI (nr | 0x40000000)
 *   foreign_abi int80  getpid through the i386 ABI (int $0x80, nr 20)
 *   foreign_abi native getpid, the ordinary way (the control)
 *
 * It prints "start MODE" before the attempt and "returned R errno E" after,
 * so a test can tell "killed by the filter" (no second line, SIGSYS) from
 * "allowed" or "refused with an errno". x86_64 only. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long r = -1;
    int err = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: foreign_abi x32|int80|native\n");
        return 2;
    }
    printf("start %s\n", argv[1]);
    fflush(stdout);
    if (strcmp(argv[1], "x32") == 0) {
        r = syscall(39 | 0x40000000L);
        err = r < 0 ? errno : 0;
    } else if (strcmp(argv[1], "int80") == 0) {
        long nr = 20; /* i386 getpid */
        __asm__ volatile("int $0x80"
                         : "=a"(r)
                         : "a"(nr)
                         : "memory", "r8", "r9", "r10", "r11");
        if (r < 0 && r > -4096) {
            err = (int)-r;
            r = -1;
        }
    } else if (strcmp(argv[1], "native") == 0) {
        r = syscall(SYS_getpid);
        err = r < 0 ? errno : 0;
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    printf("returned %ld errno %d\n", r, err);
    fflush(stdout);
    return 0;
}

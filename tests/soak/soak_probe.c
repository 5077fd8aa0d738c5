/*
 * Helper of scripts/soak.sh (not a test, not run in CI).
 *
 *   soak_probe fake
 *       The simulated device's side, through the fake NVML (which first
 *       drops the entries of dead processes, as the driver frees a dead
 *       process's memory): one line "device 0 used U total T", then one
 *       line "proc PID used U context C" per live process holding device 0
 *       memory or a context (C: its FAKECUDA_KIND_CONTEXT bytes).
 *       FAKECUDA_STATE must name the soak's state file.
 *
 *   soak_probe broker-hold SOCKET N STOPFILE
 *       The attacker's idle connections: holds N connections to SOCKET
 *       that never send a whole request, reconnecting each one the broker
 *       closes 50 ms later (a connection beyond the broker's per-uid cap is
 *       closed at once: reconnecting those without pause would only be a
 *       CPU burner on a 2-core runner), until STOPFILE exists; then prints
 *       "broker-hold connects C closed_by_broker K refused R".
 *
 *   soak_probe conn-flood SRC PORT N STOPFILE
 *       A connection flood against the exporter at 127.0.0.1:PORT from
 *       address SRC (127.0.0.2: one peer): N connections, each reopened as
 *       the exporter closes it, until STOPFILE exists; then prints
 *       "conn-flood connects C".
 *
 *   soak_probe lease FILE STOPFILE
 *       Creates FILE 0666 (a payer file at another user's name) and holds a
 *       read lease on it until STOPFILE exists; prints "lease broken" if
 *       anyone opened it for writing (a victim waiting on us), else
 *       "lease held".
 *
 *   soak_probe ledger-limit LEDGER BYTES
 *       Writes BYTES into the limit of device 0 in LEDGER's header (a tenant
 *       editing its own live ledger to raise its budget).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cushare/ledger.h"
#include "fakecuda/fakecuda_state.h"
#include "nvml/nvml.h"

static int fake(void)
{
    nvmlDevice_t dev;
    nvmlMemory_t mem;
    if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS ||
        nvmlDeviceGetMemoryInfo(dev, &mem) != NVML_SUCCESS) {
        fprintf(stderr, "soak_probe: the fake NVML does not answer (FAKECUDA_STATE?)\n");
        return 1;
    }
    const struct fakecuda_state *s = fakecuda_nvml_state();
    if (!s) {
        fprintf(stderr, "soak_probe: no fake state\n");
        return 1;
    }
    printf("device 0 used %llu total %llu\n", (unsigned long long)mem.used,
           (unsigned long long)mem.total);
    for (int i = 0; i < FAKECUDA_MAX_PROCS; i++) {
        const struct fakecuda_proc *p = &s->proc[i];
        int pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
        if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH))
            continue;
        printf("proc %d used %llu context %llu\n", pid,
               (unsigned long long)fakecuda_load(&p->used[0]),
               (unsigned long long)fakecuda_load(&p->kind_used[0][FAKECUDA_KIND_CONTEXT]));
    }
    nvmlShutdown();
    return 0;
}

static int connect_one(const char *sock, int i)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    if (i % 2) /* half begin a request and never finish it */
        (void)!send(fd, "HPI", 3, MSG_NOSIGNAL | MSG_DONTWAIT);
    return fd;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int broker_hold(const char *sock, int n, const char *stop)
{
    if (n < 1 || n > 4096) {
        fprintf(stderr, "soak_probe: broker-hold N must be 1..4096\n");
        return 2;
    }
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    int64_t *again = calloc((size_t)n, sizeof *again); /* reconnect slot i at */
    if (!p || !again)
        return 1;
    for (int i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = -1, .events = POLLIN};
    uint64_t connects = 0, closed = 0, refused = 0;
    while (access(stop, F_OK) != 0) {
        int64_t t = now_ms();
        for (int i = 0; i < n; i++) {
            if (p[i].fd >= 0 || t < again[i])
                continue;
            p[i].fd = connect_one(sock, i);
            if (p[i].fd < 0)
                refused++, again[i] = t + 50; /* broker away, backlog full */
            else
                connects++;
        }
        if (poll(p, (nfds_t)n, 10) < 0 && errno != EINTR)
            return 1;
        t = now_ms();
        for (int i = 0; i < n; i++)
            if (p[i].fd >= 0 && p[i].revents) {
                closed++;
                close(p[i].fd);
                p[i].fd = -1;
                again[i] = t + 50;
            }
    }
    for (int i = 0; i < n; i++)
        if (p[i].fd >= 0)
            close(p[i].fd);
    printf("broker-hold connects %llu closed_by_broker %llu refused %llu\n",
           (unsigned long long)connects, (unsigned long long)closed, (unsigned long long)refused);
    free(p);
    free(again);
    return 0;
}

static int connect_from(const char *src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static int conn_flood(const char *src, int port, int n, const char *stop)
{
    if (n < 1 || n > 4096)
        return 2;
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    if (!p)
        return 1;
    for (int i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = -1, .events = POLLIN};
    uint64_t connects = 0;
    while (access(stop, F_OK) != 0) {
        for (int i = 0; i < n; i++)
            if (p[i].fd < 0 && (p[i].fd = connect_from(src, port)) >= 0)
                connects++;
        if (poll(p, (nfds_t)n, 20) < 0 && errno != EINTR)
            return 1;
        for (int i = 0; i < n; i++) {
            char b[256];
            if (p[i].fd >= 0 && p[i].revents && read(p[i].fd, b, sizeof b) <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
            }
        }
    }
    printf("conn-flood connects %llu\n", (unsigned long long)connects);
    return 0;
}

static volatile sig_atomic_t lease_broken;

static void on_lease_break(int sig)
{
    (void)sig;
    lease_broken = 1;
}

static int lease(const char *file, const char *stop)
{
    int fd = open(file, O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 || fchmod(fd, 0666))
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_lease_break;
    sigaction(SIGIO, &sa, NULL);
    if (fcntl(fd, F_SETLEASE, F_RDLCK))
        return 1;
    bool broken = false;
    while (access(stop, F_OK) != 0) {
        if (lease_broken) { /* let the victim go on, then lease again */
            broken = true;
            lease_broken = 0;
            fcntl(fd, F_SETLEASE, F_UNLCK);
            fcntl(fd, F_SETLEASE, F_RDLCK);
        }
        usleep(20000);
    }
    printf("lease %s\n", broken ? "broken" : "held");
    unlink(file);
    return 0;
}

static int ledger_limit(const char *path, const char *bytes)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    uint64_t v = strtoull(bytes, NULL, 10);
    if (fd < 0)
        return 1;
    ssize_t n = pwrite(fd, &v, sizeof v, offsetof(struct cs_ledger_header, limit));
    close(fd);
    return n == (ssize_t)sizeof v ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "conn-flood"))
        return conn_flood(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
    if (argc == 4 && !strcmp(argv[1], "lease"))
        return lease(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "ledger-limit"))
        return ledger_limit(argv[2], argv[3]);
    if (argc == 2 && !strcmp(argv[1], "fake"))
        return fake();
    if (argc == 5 && !strcmp(argv[1], "broker-hold"))
        return broker_hold(argv[2], atoi(argv[3]), argv[4]);
    fprintf(stderr, "usage: soak_probe fake | broker-hold SOCKET N STOPFILE | conn-flood SRC PORT N "
                    "STOPFILE | lease FILE STOPFILE | ledger-limit LEDGER BYTES\n");
    return 2;
}

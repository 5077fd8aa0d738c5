/*
 * Helpers shared by the identity/broker/postinit tests: temporary trusted
 * directories, an in-process broker, a misbehaving fake broker. Clocks,
 * children with deadlines and skips are tests/support/support.h's. Each
 * test is one executable; helpers that a test does not use are marked
 * unused, not compiled out.
 */
#ifndef CS_TESTS_IDENTITY_ID_TEST_H
#define CS_TESTS_IDENTITY_ID_TEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "identity/identity.h"

#define ID_HELPER static __attribute__((unused))

/* A fresh root-owned 0755 directory under /tmp: a trusted broker parent. */
ID_HELPER void id_mkdtemp(char *out, size_t cap)
{
    snprintf(out, cap, "/tmp/cs-id-XXXXXX");
    CHECK(mkdtemp(out) != NULL);
    CHECK(chmod(out, 0755) == 0);
}

/* --- in-process broker --------------------------------------------------- */

struct id_broker {
    struct cs_broker_server *srv;
    pthread_t thread;
    int stop[2];
    char dir[64];                       /* the temp parent */
    char sock[128];                     /* <dir>/hostpid/broker.sock */
    int run_rc;
};

ID_HELPER void *id_broker_main(void *arg)
{
    struct id_broker *b = arg;
    b->run_rc = cs__broker_server_run(b->srv, b->stop[0]);
    return NULL;
}

/* 0 for any of max_conns, per_uid, deadline_ms: the production value. */
ID_HELPER void id_broker_start_ex(struct id_broker *b, unsigned max_conns, unsigned per_uid,
                                  const char *metrics, int deadline_ms)
{
    memset(b, 0, sizeof *b);
    id_mkdtemp(b->dir, sizeof b->dir);
    snprintf(b->sock, sizeof b->sock, "%s/hostpid/broker.sock", b->dir);
    struct cs_broker_server_config cfg = {.socket_path = b->sock,
                                          .metrics_path = metrics,
                                          .max_conns = max_conns,
                                          .max_per_uid = per_uid,
                                          .deadline_ms = deadline_ms};
    int rc = cs__broker_server_open(&cfg, &b->srv);
    CHECK_EQ(rc, 0);
    CHECK(pipe2(b->stop, O_CLOEXEC) == 0);
    CHECK(pthread_create(&b->thread, NULL, id_broker_main, b) == 0);
}

ID_HELPER void id_broker_start(struct id_broker *b, unsigned max_conns, const char *metrics)
{
    id_broker_start_ex(b, max_conns, 0, metrics, 0);
}

ID_HELPER void id_broker_stop(struct id_broker *b)
{
    char c = 1;
    CHECK(write(b->stop[1], &c, 1) == 1);
    pthread_join(b->thread, NULL);
    CHECK_EQ(b->run_rc, 0);
    cs__broker_server_close(b->srv);
    close(b->stop[0]);
    close(b->stop[1]);
    cs_rmtree(b->dir);
}

/* --- fake brokers ------------------------------------------------------- */

/* What a fake broker does after reading the 8-byte request. */
enum id_fake {
    FAKE_PID0,          /* OK status, PID 0 */
    FAKE_PID_HUGE,      /* OK status, PID 0x80000000 */
    FAKE_TRUNCATED,     /* 6 bytes of a valid reply, then close */
    FAKE_GARBAGE,       /* 64 bytes of noise */
    FAKE_OVERSIZED,     /* a valid reply plus 4 more bytes */
    FAKE_ERROR_STATUS,  /* a well-formed CRED_FAILURE reply */
    FAKE_SILENT,        /* never answers; holds the connection */
    FAKE_VALID,         /* a valid reply for PID 8011 */
};

struct id_fake_server {
    int listen_fd;
    enum id_fake mode;
    pthread_t thread;
    int stop[2];
    char dir[64];
    char sock[128];
};

ID_HELPER void id_fake_reply(int fd, enum id_fake mode, int stop_fd)
{
    uint8_t req[8];
    size_t got = 0;
    while (got < sizeof req) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 2000) <= 0)
            return;
        ssize_t n = recv(fd, req + got, sizeof req - got, 0);
        if (n <= 0)
            return;
        got += (size_t)n;
    }
    uint8_t out[64];
    size_t len = CS_HPID_RESPONSE_SIZE;
    switch (mode) {
    case FAKE_PID0: cs__hpid_encode_response(out, CS_HPID_OK, 0); break;
    case FAKE_PID_HUGE: cs__hpid_encode_response(out, CS_HPID_OK, 0x80000000u); break;
    case FAKE_TRUNCATED:
        cs__hpid_encode_response(out, CS_HPID_OK, 8011);
        len = 6;
        break;
    case FAKE_GARBAGE:
        for (size_t i = 0; i < sizeof out; i++)
            out[i] = (uint8_t)(i * 37 + 11);
        len = sizeof out;
        break;
    case FAKE_OVERSIZED:
        cs__hpid_encode_response(out, CS_HPID_OK, 8011);
        memcpy(out + 12, "JUNK", 4);
        len = 16;
        break;
    case FAKE_ERROR_STATUS: cs__hpid_encode_response(out, CS_HPID_CRED_FAILURE, 0); break;
    case FAKE_VALID: cs__hpid_encode_response(out, CS_HPID_OK, 8011); break;
    case FAKE_SILENT: {
        /* Hold the connection open until the test stops us. */
        struct pollfd p = {.fd = stop_fd, .events = POLLIN};
        poll(&p, 1, 10000);
        return;
    }
    }
    ssize_t w = send(fd, out, len, MSG_NOSIGNAL);
    (void)w;
}

ID_HELPER void *id_fake_main(void *arg)
{
    struct id_fake_server *f = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = f->stop[0], .events = POLLIN},
                              {.fd = f->listen_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 || p[0].revents)
            return NULL;
        int fd = accept(f->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        id_fake_reply(fd, f->mode, f->stop[0]);
        close(fd);
    }
}

/* Binds a listening socket at path (root-owned, 0666); returns the fd. */
ID_HELPER int id_listen_at(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    CHECK(strlen(path) < sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    unlink(path);
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK(chmod(path, 0666) == 0);
    CHECK(listen(fd, 128) == 0);
    return fd;
}

/* A fake broker in a trusted directory (root-owned 0755), so only its
 * behaviour differs from the real one. */
ID_HELPER void id_fake_start(struct id_fake_server *f, enum id_fake mode)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    id_mkdtemp(f->dir, sizeof f->dir);
    snprintf(f->sock, sizeof f->sock, "%s/broker.sock", f->dir);
    f->listen_fd = id_listen_at(f->sock);
    CHECK(pipe2(f->stop, O_CLOEXEC) == 0);
    CHECK(pthread_create(&f->thread, NULL, id_fake_main, f) == 0);
}

ID_HELPER void id_fake_stop(struct id_fake_server *f)
{
    char c = 1;
    CHECK(write(f->stop[1], &c, 1) == 1);
    pthread_join(f->thread, NULL);
    close(f->listen_fd);
    close(f->stop[0]);
    close(f->stop[1]);
    cs_rmtree(f->dir);
}

/* Queries path with the production deadline; the sentinel proves that a
 * failed query leaves the output untouched. */
#define ID_SENTINEL ((pid_t)-12345)
ID_HELPER int id_query_timeout(const char *path, int timeout_ms, pid_t *pid)
{
    struct cs_broker_query_opts o = {.socket_path = path, .timeout_ms = timeout_ms};
    *pid = ID_SENTINEL;
    return cs__broker_query_opts(&o, pid);
}

ID_HELPER int id_query(const char *path, pid_t *pid)
{
    return id_query_timeout(path, 0, pid);
}

/* --- percentile --------------------------------------------------------- */

ID_HELPER int id_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of v[0..n) (sorts v). */
ID_HELPER double id_percentile(double *v, size_t n, double pct)
{
    qsort(v, n, sizeof *v, id_cmp_double);
    size_t rank = (size_t)((pct / 100.0) * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

#endif

/*
 * The real broker server and client together: a client in a child PID
 * namespace learns the PID its parent saw from fork(); malformed requests
 * get the right status byte and counter; silent, trickling and truncated
 * clients are cut off at the server's deadline (well before the client's)
 * and counted; the metrics text carries all of it.
 *
 * The malformed and truncated requests go to a second broker of its own
 * whose deadline is far away (PATIENT_MS): their verdicts are about the
 * frame, and a client the CPU keeps waiting between its connect and its
 * send must not meet the 100 ms deadline instead (a failed send, or a
 * truncated frame counted as a timeout). The deadline's own cases, the
 * silent and the trickling client, use the default one.
 */
#include "id_test.h"
#include <sched.h>
#include <stddef.h>

struct shared {
    int rc;
    pid_t got;
    pid_t self_in_ns;
    pid_t fork_pid;
};

static struct shared *sh;

/* The patient broker's deadline: longer than any wait of the test. */
#define PATIENT_MS 60000

static void test_self(struct id_broker *b)
{
    pid_t p;
    CHECK_EQ(id_query(b->sock, &p), 0);
    CHECK_EQ(p, getpid());
}

/* Client is pid 1 of a new PID namespace; the broker (this process) runs
 * in ours and must answer with the PID we see for it. */
static void test_child_namespace(struct id_broker *b)
{
    memset(sh, 0, sizeof *sh);
    pid_t helper = cs_fork_tied();
    CHECK(helper >= 0);
    if (helper == 0) {
        if (unshare(CLONE_NEWPID) != 0)
            _exit(2);
        pid_t c = cs_fork_tied();
        if (c < 0)
            _exit(3);
        if (c == 0) {
            sh->self_in_ns = getpid();
            pid_t p;
            sh->rc = id_query(b->sock, &p);
            sh->got = p;
            _exit(0);
        }
        sh->fork_pid = c;
        int st;
        waitpid(c, &st, 0);
        _exit(cs_exit_code(st));
    }
    CHECK_EQ(cs_exit_code(cs_wait_child(helper, 10000)), 0);
    CHECK_EQ(sh->self_in_ns, 1);
    CHECK_EQ(sh->rc, 0);
    CHECK_EQ(sh->got, sh->fork_pid);
    CHECK_NE(sh->got, 1);
}

/* Sends raw bytes, reads what comes back until EOF. */
static ssize_t raw_exchange(const char *path, const uint8_t *req, size_t len, uint8_t *resp,
                            size_t cap, int linger_ms)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    CHECK(strlen(path) < sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    if (len)
        CHECK(send(fd, req, len, MSG_NOSIGNAL) == (ssize_t)len);
    if (linger_ms < 0) {                 /* truncated request: hang up */
        close(fd);
        return 0;
    }
    size_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, linger_ms) <= 0)
            break;
        ssize_t n = recv(fd, resp + got, cap - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    return (ssize_t)got;
}

static void expect_status(const char *path, const uint8_t req[8], unsigned status)
{
    uint8_t resp[32];
    ssize_t n = raw_exchange(path, req, 8, resp, sizeof resp, 2000);
    CHECK_EQ(n, 12);
    uint8_t want[12];
    cs__hpid_encode_response(want, (uint16_t)status, 0);
    CHECK(memcmp(resp, want, 12) == 0);
}

/* Handlers count after replying: poll the stat at byte offset `off`. */
static void wait_for_counter(struct id_broker *b, size_t off, uint64_t want)
{
    int64_t t0 = cs_now_ns();
    struct cs_broker_stats st;
    for (;;) {
        cs__broker_server_stats(b->srv, &st);
        uint64_t v = *(const uint64_t *)((const char *)&st + off);
        if (v >= want)
            return;
        CHECK_LT(cs_ms_since(t0), 3000 * cs_test_scale());
        cs_sleep_ms(2);
    }
}

#define WAIT_STAT(b, field, want) \
    wait_for_counter((b), offsetof(struct cs_broker_stats, field), (want))

/* On the patient broker: each bad frame gets its status byte and
 * counter, a truncated one is counted and gets nothing. */
static void test_bad_frames(struct id_broker *b)
{
    const uint8_t magic[8] = {'H', 'P', 'I', 'X', 0, 1, 0, 1};
    const uint8_t version[8] = {'H', 'P', 'I', 'D', 0, 2, 0, 1};
    const uint8_t command[8] = {'H', 'P', 'I', 'D', 0, 1, 0, 7};
    expect_status(b->sock, magic, CS_HPID_BAD_MAGIC);
    expect_status(b->sock, version, CS_HPID_BAD_VERSION);
    expect_status(b->sock, command, CS_HPID_BAD_COMMAND);
    WAIT_STAT(b, bad_frames[CS_BROKER_FRAME_BAD_MAGIC], 1);
    WAIT_STAT(b, bad_frames[CS_BROKER_FRAME_BAD_VERSION], 1);
    WAIT_STAT(b, bad_frames[CS_BROKER_FRAME_BAD_COMMAND], 1);

    /* 4 bytes then hang up: no reply, counted as truncated. */
    uint8_t none[4];
    raw_exchange(b->sock, magic, 4, none, sizeof none, -1);
    WAIT_STAT(b, bad_frames[CS_BROKER_FRAME_TRUNCATED], 1);
}

static void test_silent(struct id_broker *b)
{
    /* Connect and say nothing: cut off at the server's deadline, which
     * comes well before the client's, with no reply. */
    int64_t t0 = cs_now_ns();
    uint8_t resp[16];
    ssize_t n = raw_exchange(b->sock, NULL, 0, resp, sizeof resp, 3000);
    double ms = cs_ms_since(t0);
    CHECK_EQ(n, 0);
    CHECK_GE(ms, CS_BROKER_SERVER_DEADLINE_MS);
    CHECK_LT(ms, CS_BROKER_TIMEOUT_MS * cs_test_scale());
    printf("silent client cut off after %.1f ms\n", ms);
    WAIT_STAT(b, timeouts, 1);
}

/* One byte of the request every 20 ms: the deadline is for the whole
 * frame, so trickling buys no time. */
static void test_trickle(struct id_broker *b)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, b->sock, strlen(b->sock) + 1);
    int64_t t0 = cs_now_ns();
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    const uint8_t req[8] = {'H', 'P', 'I', 'D', 0, 1, 0, 1};
    size_t sent = 0;
    for (;;) {
        /* The wait is the trickle's pace; what ends it is the broker's
         * close. Never the whole frame: after 7 bytes, only wait. */
        bool last = sent == sizeof req - 1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, last ? (int)(CS_BROKER_TIMEOUT_MS * cs_test_scale()) : 20) != 0 || last)
            break;
        /* Five 20 ms waits end about when the broker's deadline does: it
         * may close between our wait and our byte, and the send then finds
         * the connection gone. That is the close we wait for. */
        if (send(fd, req + sent, 1, MSG_NOSIGNAL) != 1) {
            CHECK(errno == EPIPE || errno == ECONNRESET);
            break;
        }
        sent++;
    }
    double ms = cs_ms_since(t0);
    /* Closed without a reply: end of file, or a reset when the broker
     * closed with a trickled byte still unread in its queue (AF_UNIX). */
    uint8_t c;
    ssize_t got = recv(fd, &c, 1, MSG_DONTWAIT);
    if (!(got == 0 || (got < 0 && errno == ECONNRESET))) {
        fprintf(stderr, "trickling client: recv = %zd (%s) after %zu bytes: not closed\n", got,
                got < 0 ? strerror(errno) : "data", sent);
        exit(1);
    }
    close(fd);
    printf("trickling client (%zu bytes) cut off after %.1f ms\n", sent, ms);
    CHECK_GE(ms, CS_BROKER_SERVER_DEADLINE_MS);
    CHECK_LT(ms, CS_BROKER_TIMEOUT_MS * cs_test_scale());
    WAIT_STAT(b, timeouts, 2);
}

static void test_stats_and_metrics(struct id_broker *b, struct id_broker *patient)
{
    struct cs_broker_stats st;
    cs__broker_server_stats(b->srv, &st);
    CHECK_EQ(st.replies_ok, 2);          /* self + child namespace */
    CHECK_EQ(st.accepted, 4);            /* 2 ok + silent + trickle */
    CHECK_EQ(st.credential_failures, 0);
    CHECK_EQ(st.max_conns, 4);
    CHECK_LE(st.open_peak, 4);
    CHECK_EQ(st.latency_count, 2);       /* replies written */
    cs__broker_server_stats(patient->srv, &st);
    CHECK_EQ(st.replies_ok, 0);
    CHECK_EQ(st.accepted, 4);            /* 3 bad + truncated */
    CHECK_EQ(st.timeouts, 0);
    CHECK_EQ(st.latency_count, 3);       /* the bad frames' replies */

    char buf[8192];
    int len = cs__broker_server_format_metrics(b->srv, buf, sizeof buf);
    CHECK_GT(len, 0);
    CHECK_CONTAINS(buf, "cushare_broker_replies_ok_total 2\n");
    CHECK_CONTAINS(buf, "cushare_broker_accepted_total 4\n");
    CHECK_CONTAINS(buf, "cushare_broker_bad_frames_total{reason=\"bad_magic\"} 0\n");
    CHECK_CONTAINS(buf, "cushare_broker_timeouts_total 2\n");
    CHECK_CONTAINS(buf, "cushare_broker_rejected_total{reason=\"uid_cap\"} 0\n");
    CHECK_CONTAINS(buf, "cushare_broker_rejected_total{reason=\"fd_limit\"} 0\n");
    CHECK_CONTAINS(buf, "cushare_broker_connections_max 4\n");
    CHECK_CONTAINS(buf, "cushare_broker_connections_per_uid_max 1\n");  /* 4 / 16, at least 1 */
    CHECK_CONTAINS(buf, "# TYPE cushare_broker_request_duration_seconds histogram\n");
    CHECK_CONTAINS(buf, "cushare_broker_request_duration_seconds_count 2\n");
    CHECK_EQ(cs__broker_server_format_metrics(b->srv, buf, 64), -ENOBUFS);
    len = cs__broker_server_format_metrics(patient->srv, buf, sizeof buf);
    CHECK_GT(len, 0);
    CHECK_CONTAINS(buf, "cushare_broker_accepted_total 4\n");
    CHECK_CONTAINS(buf, "cushare_broker_bad_frames_total{reason=\"bad_magic\"} 1\n");
    CHECK_CONTAINS(buf, "cushare_broker_bad_frames_total{reason=\"unsupported_version\"} 1\n");
    CHECK_CONTAINS(buf, "cushare_broker_bad_frames_total{reason=\"unsupported_command\"} 1\n");
    CHECK_CONTAINS(buf, "cushare_broker_bad_frames_total{reason=\"truncated\"} 1\n");
    CHECK_CONTAINS(buf, "cushare_broker_timeouts_total 0\n");
    CHECK_CONTAINS(buf, "cushare_broker_request_duration_seconds_count 3\n");
}

static void test_socket_files(struct id_broker *b)
{
    struct stat st;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/hostpid", b->dir);
    CHECK(lstat(dir, &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK_EQ(st.st_mode & 07777, 0755);
    CHECK_EQ(st.st_uid, 0);
    CHECK(lstat(b->sock, &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK_EQ(st.st_mode & 0777, 0666);
    CHECK_EQ(st.st_uid, 0);
}

int main(void)
{
    cs_require_root("it chowns files, changes uid and makes PID namespaces");
    sh = cs_shared(sizeof *sh);
    /* A restrictive umask must not leak into the directory's mode. */
    umask(077);
    char metrics[128];
    struct id_broker b;
    snprintf(metrics, sizeof metrics, "/tmp/cs-id-metrics-%d.prom", (int)getpid());
    id_broker_start(&b, 4, metrics);
    struct id_broker patient;
    id_broker_start_ex(&patient, 4, 0, NULL, PATIENT_MS);
    test_socket_files(&b);
    test_self(&b);
    test_child_namespace(&b);
    test_bad_frames(&patient);
    test_silent(&b);
    test_trickle(&b);
    test_stats_and_metrics(&b, &patient);
    id_broker_stop(&patient);

    char sock[128];
    snprintf(sock, sizeof sock, "%s", b.sock);
    char dir[64];
    snprintf(dir, sizeof dir, "%s", b.dir);
    /* Stop without removing the tree, to see what close left behind. */
    char c = 1;
    CHECK(write(b.stop[1], &c, 1) == 1);
    pthread_join(b.thread, NULL);
    CHECK_EQ(b.run_rc, 0);
    cs__broker_server_close(b.srv);
    struct stat st;
    CHECK(lstat(sock, &st) != 0 && errno == ENOENT);   /* unlinked */
    pid_t p;
    CHECK_EQ(id_query(sock, &p), -ENOENT);
    /* Final metrics written at close. */
    FILE *f = fopen(metrics, "r");
    CHECK(f != NULL);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    CHECK_CONTAINS(buf, "cushare_broker_replies_ok_total 2\n");
    unlink(metrics);
    close(b.stop[0]);
    close(b.stop[1]);
    cs_rmtree(dir);
    printf("broker roundtrip ok\n");
    return 0;
}

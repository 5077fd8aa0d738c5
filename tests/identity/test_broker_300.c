/*
 * 300 client processes released together against one broker: every client
 * must get its own PID (the one its parent saw from fork), none may time
 * out or be refused, although they all share uid 0 and so one per-uid cap.
 * Half the clients live in child PID namespaces, so "its own PID" is the
 * host's.
 *
 * The clients use a 10 s deadline instead of the production 500 ms, and the
 * broker 5 s instead of 100 ms for a request to arrive after accept: on a
 * 2-core CI runner 450 freshly woken processes queue for a CPU far longer
 * than the broker takes (p99 ~300 ms plain, more under ASan), and this
 * test is about correctness under a burst. The 500 ms deadline has its own
 * tests (broker_fake_servers, broker_slowloris); how many queries here
 * would have missed it is printed, and so is the most connections the
 * broker held at once.
 *
 * A second phase checks the bounds with silent clients of two uids: a
 * uid's connections beyond its cap are closed at once, a full table makes
 * newcomers wait in the kernel backlog (not refused) and serves them as
 * soon as a slot frees.
 */
#include "id_test.h"
#include <grp.h>
#include <sched.h>

#define NCLIENTS 300

struct slot {
    pid_t expect;                       /* written by whoever forked it */
    pid_t got;
    int rc;
    int done;
    double ms;
};

static struct slot *slots;
static struct cs_gate gate;             /* all clients connect at once */

static void client(int i, const char *sock)
{
    cs_gate_arrive(&gate);
    int64_t t0 = cs_now_ns();
    pid_t p;
    slots[i].rc = id_query_timeout(sock, 10000, &p);
    slots[i].ms = cs_ms_since(t0);
    slots[i].got = p;
    __atomic_store_n(&slots[i].done, 1, __ATOMIC_RELEASE);
    _exit(0);
}

/* Odd clients: pid 1 of a fresh namespace, forked by a helper that
 * records the host PID it saw. */
static pid_t spawn(int i, const char *sock)
{
    pid_t pid = cs_fork_tied();
    CHECK(pid >= 0);
    if (pid > 0)
        return pid;
    cs_gate_child(&gate);
    if (i % 2 == 0)
        client(i, sock);
    if (unshare(CLONE_NEWPID) != 0)
        _exit(2);
    pid_t c = cs_fork_tied();
    if (c < 0)
        _exit(3);
    if (c == 0)
        client(i, sock);
    slots[i].expect = c;
    int st;
    waitpid(c, &st, 0);
    _exit(cs_exit_code(st));
}

/* A connected socket; with a request if req. */
static int connect_to(const char *sock, bool req)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    if (req) {
        uint8_t r[CS_HPID_REQUEST_SIZE];
        cs__hpid_encode_request(r, CS_HPID_VERSION, CS_HPID_CMD_GET_PID);
        CHECK(send(fd, r, sizeof r, MSG_NOSIGNAL) == (ssize_t)sizeof r);
    }
    return fd;
}

/* Polls the server's counters until cond holds (the loop updates them
 * after acting), failing after the scaled deadline. */
#define WAIT_UNTIL(b, st, cond)                                     \
    do {                                                            \
        int64_t t0_ = cs_now_ns();                                  \
        for (;;) {                                                  \
            cs__broker_server_stats((b)->srv, &(st));               \
            if (cond)                                               \
                break;                                              \
            CHECK_LT(cs_ms_since(t0_), 4000 * cs_test_scale());     \
            cs_sleep_ms(1);                                         \
        }                                                           \
    } while (0)

/* 1 if fd has hit EOF (the broker closed it), 0 if still open and silent. */
static int closed_by_peer(int fd)
{
    uint8_t c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 ? 1 : 0;
}

enum { TABLE = 16, PER_UID = 8, MINE = 12 };

/* Holds PER_UID silent connections as uid 65534 until stop is readable.
 * It drops its copies of the parent's sockets, so that the parent's close
 * is a hang-up. */
static pid_t hold_as_nobody(const char *sock, int ready_fd, int stop_fd, const int *inherited,
                            int ninherited)
{
    pid_t pid = cs_fork_tied();
    CHECK(pid >= 0);
    if (pid)
        return pid;
    for (int i = 0; i < ninherited; i++)
        close(inherited[i]);
    if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0)
        _exit(2);
    int fds[PER_UID];
    for (int i = 0; i < PER_UID; i++)
        fds[i] = connect_to(sock, false);
    char c = 1;
    if (write(ready_fd, &c, 1) != 1)
        _exit(3);
    struct pollfd p = {.fd = stop_fd, .events = POLLIN};
    poll(&p, 1, (int)(20000 * cs_test_scale()));
    for (int i = 0; i < PER_UID; i++)
        close(fds[i]);
    _exit(0);
}

static void test_bounds_hold(void)
{
    struct id_broker bb, *b = &bb;
    /* A 5 s deadline keeps the picture still on a slow runner. */
    id_broker_start_ex(b, TABLE, PER_UID, NULL, 5000);
    struct cs_broker_stats st;

    /* Root: PER_UID held, the rest closed at once, and those are the last
     * ones (accepted in order). */
    int mine[MINE];
    for (int i = 0; i < MINE; i++)
        mine[i] = connect_to(b->sock, false);
    WAIT_UNTIL(b, st, st.accepted == MINE && st.rejected[CS_BROKER_REJECT_UID_CAP] == MINE - PER_UID);
    CHECK_EQ(st.open, PER_UID);
    for (int i = 0; i < MINE; i++)
        CHECK_EQ(closed_by_peer(mine[i]), i >= PER_UID);

    /* Another uid still gets its share: the table is now full. */
    int ready[2], stop[2];
    CHECK(pipe2(ready, O_CLOEXEC) == 0 && pipe2(stop, O_CLOEXEC) == 0);
    pid_t nobody = hold_as_nobody(b->sock, ready[1], stop[0], mine, MINE);
    char c;
    cs_read_full(ready[0], &c, 1, 10000);
    WAIT_UNTIL(b, st, st.open == TABLE);
    CHECK_EQ(st.rejected[CS_BROKER_REJECT_UID_CAP], MINE - PER_UID);

    /* A full table: a newcomer with a whole request waits in the backlog
     * (200 ms without an answer proves nothing on a slow runner, but an
     * answer would prove a bug) and is served once a slot frees. */
    int late = connect_to(b->sock, true);
    struct pollfd p = {.fd = late, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 200), 0);
    close(mine[0]);
    CHECK_EQ(poll(&p, 1, (int)(4000 * cs_test_scale())), 1);
    uint8_t resp[CS_HPID_RESPONSE_SIZE];
    CHECK_EQ(recv(late, resp, sizeof resp, MSG_WAITALL), (ssize_t)sizeof resp);
    struct cs_hpid_response r;
    CHECK_EQ(cs__hpid_decode_response(resp, sizeof resp, &r), 0);
    CHECK_EQ(r.pid, getpid());
    close(late);
    cs__broker_server_stats(b->srv, &st);
    CHECK_EQ(st.rejected[CS_BROKER_REJECT_UID_CAP], MINE - PER_UID);
    CHECK_EQ(st.rejected[CS_BROKER_REJECT_FD_LIMIT], 0);
    CHECK_LE(st.open_peak, TABLE);

    /* Everybody hangs up: every slot comes back, and it still serves. */
    CHECK(write(stop[1], &c, 1) == 1);
    CHECK_EQ(cs_exit_code(cs_wait_child(nobody, 10000)), 0);
    for (int i = 1; i < MINE; i++)
        close(mine[i]);
    WAIT_UNTIL(b, st, st.open == 0);
    CHECK_EQ(st.timeouts, 0);
    pid_t pid;
    CHECK_EQ(id_query(b->sock, &pid), 0);
    CHECK_EQ(pid, getpid());
    id_broker_stop(b);
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(stop[i]);
    }
    printf("bounds: table %d, per uid %d: root's %d silent -> %d held, %d closed at once; "
           "uid 65534 got its %d; a newcomer waited for a free slot\n", TABLE, PER_UID, MINE,
           PER_UID, MINE - PER_UID, PER_UID);
}

int main(void)
{
    cs_require_root("it chowns files, changes uid and makes PID namespaces");
    slots = cs_shared(sizeof *slots * NCLIENTS);
    struct id_broker b;
    /* Production bounds, but the broker's per-connection deadline (100 ms
     * from accept to request) stretched like the clients' own: released
     * truly together by the gate, a client can wait that long for a CPU
     * between its connect and its send, and the broker then rightly
     * closes it (a slowloris looks the same). broker_slowloris and
     * broker_fake_servers test the production deadlines. */
    id_broker_start_ex(&b, 0, 0, NULL, 5000);
    cs_gate_init(&gate);

    pid_t pids[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        pids[i] = spawn(i, b.sock);
        if (i % 2 == 0)
            slots[i].expect = pids[i];
    }
    cs_gate_open(&gate, NCLIENTS, 30000);   /* all at the line, then all at once */
    int64_t t0 = cs_now_ns();
    for (int i = 0; i < NCLIENTS; i++)
        CHECK_EQ(cs_exit_code(cs_wait_child(pids[i], 20000)), 0);
    double wall = cs_ms_since(t0);

    double lat[NCLIENTS];
    int over = 0;
    for (int i = 0; i < NCLIENTS; i++) {
        if (slots[i].rc != 0 || slots[i].got != slots[i].expect) {
            fprintf(stderr, "client %d: rc %d (%s) got %d expected %d\n", i, slots[i].rc,
                    cs__broker_reason(slots[i].rc), (int)slots[i].got, (int)slots[i].expect);
            exit(1);
        }
        CHECK_GT(slots[i].expect, 1);
        lat[i] = slots[i].ms;
        over += lat[i] > CS_BROKER_TIMEOUT_MS;
    }
    /* The broker counts a reply once it is sent: the client may have read
     * it and exited first. */
    struct cs_broker_stats st;
    WAIT_UNTIL(&b, st, st.replies_ok == NCLIENTS);
    CHECK_EQ(st.accepted, NCLIENTS);
    CHECK_EQ(st.timeouts, 0);
    CHECK_EQ(st.rejected[CS_BROKER_REJECT_UID_CAP], 0);
    CHECK_EQ(st.rejected[CS_BROKER_REJECT_FD_LIMIT], 0);
    CHECK_LE(st.open_peak, st.max_per_uid);
    double p50 = id_percentile(lat, NCLIENTS, 50), p99 = id_percentile(lat, NCLIENTS, 99);
    printf("%d clients: all correct; wall %.1f ms, query p50 %.2f ms p99 %.2f ms; "
           "at most %llu held at once (per-uid cap %llu); %d queries took longer than %d ms\n",
           NCLIENTS, wall, p50, p99, (unsigned long long)st.open_peak,
           (unsigned long long)st.max_per_uid, over, CS_BROKER_TIMEOUT_MS);
    id_broker_stop(&b);
    test_bounds_hold();
    return 0;
}

/*
 * ledger_crash_window: a process killed between charging the aggregate and
 * recording the charge in its slot leaves the aggregate over-counted. That
 * must fail closed (admission stays stricter while anyone is live, reaping
 * cannot find those bytes) and is repaired once no slot is LIVE: then the
 * aggregates are reset to 0.
 */
#include "ledger_test.h"

#define LIMIT (100 * MiB)

int main(void)
{
    const char *path = lt_path("window");
    struct cs_ledger_params p = lt_params(LIMIT);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);

    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(cs__ledger_after_fork(&l), 0);
        CHECK_EQ(cs__ledger_claim(&l), 0);
        CHECK_EQ(cs__ledger_reserve(&l, 0, CS_MEM_DATA, 20 * MiB), 0);
        /* The first half of a reserve of 30 MiB, then death. */
        __atomic_fetch_add(&l.hdr->dev[0].used, 30 * MiB, __ATOMIC_SEQ_CST);
        char c = 'x';
        lt_write_full(fds[1], &c, 1);
        for (;;)
            pause();
    }
    char c;
    lt_read_full(fds[0], &c, 1, 10);
    CHECK(kill(pid, SIGKILL) == 0);
    lt_wait(pid, 10);

    /* Reaping returns the 20 MiB the slot knew of; 30 MiB stay counted. */
    CHECK_EQ(cs__ledger_reap(&l), 1);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 30 * MiB);
    CHECK_EQ(cs__ledger_reserve(&l, 0, CS_MEM_DATA, 80 * MiB), -ENOMEM); /* fail closed */
    CHECK_EQ(cs__ledger_reserve(&l, 0, CS_MEM_DATA, 70 * MiB), 0);
    cs__ledger_release(&l, 0, CS_MEM_DATA, 70 * MiB);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 30 * MiB);

    /* The last live process leaves: nothing is held, the aggregate is
     * repaired (with a warning). */
    lt_capture_begin();
    cs__ledger_leave(&l);
    char *err = lt_capture_end();
    CHECK_CONTAINS(err, "no live process, yet device 0 had 31457280 bytes charged");
    free(err);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    CHECK_EQ_U(l.hdr->live, 0);

    /* The same window when the last process dies instead of leaving: its
     * slot stays LIVE (live == 1) until reaped. A reaper without a slot of
     * its own (a process before it claims, a monitor) reaps it, then finds
     * no LIVE slot and reconciles. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(cs__ledger_after_fork(&l), 0);
        CHECK_EQ(cs__ledger_claim(&l), 0);
        __atomic_fetch_add(&l.hdr->dev[0].used, 5 * MiB, __ATOMIC_SEQ_CST);
        _exit(0); /* no leave: a crash */
    }
    lt_wait_ok(pid, 10);
    CHECK_EQ_U(l.hdr->live, 1);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 5 * MiB);
    lt_capture_begin();
    CHECK_EQ(cs__ledger_reap(&l), 1);
    err = lt_capture_end();
    CHECK_CONTAINS(err, "reset to 0");
    free(err);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    CHECK_EQ_U(l.hdr->live, 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    CHECK_EQ(cs__ledger_reserve(&l, 0, CS_MEM_DATA, LIMIT), 0);
    cs__ledger_release(&l, 0, CS_MEM_DATA, LIMIT);
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
    printf("ledger_crash_window: ok\n");
    return 0;
}

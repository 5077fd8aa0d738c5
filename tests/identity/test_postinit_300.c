/*
 * 300 waiter processes queue behind a holder that is then SIGKILLed. Each
 * waiter must acquire exactly once, never two at once (shared counter in a
 * MAP_SHARED mapping), and all must finish. argv[1] picks the strategy:
 * "blocking" (F_OFD_SETLKW, local file systems) or "polling" (NFS).
 * Prints the wall time from SIGKILL to the last release.
 */
#include "postinit_test.h"

#define NWAITERS 300
#define WORK_US 50

static int by_acquire(const void *a, const void *b)
{
    int64_t x = pt->t_acquired[*(const int *)a], y = pt->t_acquired[*(const int *)b];
    return x < y ? -1 : x > y;
}

/* Independent of the counter: sorted by acquisition time, each critical
 * section ends before the next begins. */
static void check_no_overlap(void)
{
    static int order[NWAITERS];
    for (int i = 0; i < NWAITERS; i++)
        order[i] = i + 1;
    qsort(order, NWAITERS, sizeof order[0], by_acquire);
    for (int k = 0; k + 1 < NWAITERS; k++)
        CHECK_LE(pt->t_released[order[k]], pt->t_acquired[order[k + 1]]);
}

int main(int argc, char **argv)
{
    enum cs_postinit_wait mode = CS_POSTINIT_WAIT_BLOCKING;
    if (argc > 1 && !strcmp(argv[1], "polling"))
        mode = CS_POSTINIT_WAIT_POLLING;
    pt_setup();

    pid_t holder = pt_spawn(0, mode, PT_MID_WORK, 0);
    pt_wait_stage(0, PT_MID_WORK, 5000);
    static pid_t pids[NWAITERS + 1];
    for (int i = 1; i <= NWAITERS; i++)
        pids[i] = pt_spawn(i, mode, PT_NO_PAUSE, WORK_US);

    /* Everyone queued: saw the lock busy, and (blocking) sleeps in the
     * kernel. Nobody entered while the holder lives. */
    int64_t t0 = cs_now_ns();
    while (__atomic_load_n(&pt->nbusy, __ATOMIC_ACQUIRE) < NWAITERS) {
        CHECK_LT(cs_ms_since(t0), 20000 * cs_test_scale());
        cs_sleep_ms(2);
    }
    if (mode == CS_POSTINIT_WAIT_BLOCKING)
        pt_wait_blocked(NWAITERS, 20000);
    printf("%d waiters queued in %.0f ms\n", NWAITERS, cs_ms_since(t0));
    for (int i = 1; i <= NWAITERS; i++)
        CHECK_EQ(pt->acquired[i], 0);

    __atomic_store_n(&pt->excused, 1, __ATOMIC_RELEASE);
    int64_t kill_t = cs_now_ns();
    CHECK(kill(holder, SIGKILL) == 0);
    int st = cs_wait_child(holder, 5000);
    CHECK(st >= 0 && WIFSIGNALED(st));

    for (int i = 1; i <= NWAITERS; i++) {
        int code = cs_exit_code(cs_wait_child(pids[i], 30000));
        if (code != 0) {
            fprintf(stderr, "waiter %d exited %d\n", i, code);
            exit(1);
        }
    }
    int64_t last = 0;
    for (int i = 1; i <= NWAITERS; i++) {
        CHECK_EQ(pt->acquired[i], 1);    /* exactly once */
        last = pt->t_released[i] > last ? pt->t_released[i] : last;
    }
    CHECK_EQ(pt->violations, 0);
    check_no_overlap();
    double wall = (double)(last - kill_t) / 1e6;
    printf("%s: %d waiters each acquired exactly once, never two inside; "
           "SIGKILL of the holder to last release: %.1f ms\n",
           pt_mode_name(mode), NWAITERS, wall);
    unlink(pt_path);
    return 0;
}

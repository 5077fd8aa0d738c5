/*
 * ledger_256_workers: 256 processes released together by a pipe barrier
 * open one ledger that does not exist yet (racing on its creation) and
 * claim a slot. Exactly one creates the file; all get distinct slots; no
 * deadlock (outer deadline); once they leave normally, live == 0.
 * Prints the wall time from release to the last claim, and the p50/p99 of
 * the per-worker open+claim time. CS_LEDGER_WORKERS overrides the count.
 */
#include "ledger_test.h"

#include <sys/prctl.h>

struct report {
    int32_t pid;
    int32_t slot;
    int32_t rc;
    int32_t created;
    double seconds;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    int n = 256;
    const char *e = getenv("CS_LEDGER_WORKERS");
    if (e && atoi(e) > 0 && atoi(e) <= CS_LEDGER_SLOTS)
        n = atoi(e);
    const char *path = lt_path("workers");
    struct cs_ledger_params p = lt_params(8ull << 30);

    int go[2], rep[2], done[2];
    CHECK(pipe(go) == 0 && pipe(rep) == 0 && pipe(done) == 0);
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    CHECK(pids != NULL);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed check leaves no workers */
            close(go[1]);
            close(rep[0]);
            close(done[1]);
            char c;
            if (read(go[0], &c, 1) != 0)
                _exit(3);
            int64_t t0 = cs_now_ns();
            struct cs_ledger l;
            struct report r = {.pid = (int32_t)getpid(), .slot = -1};
            r.rc = cs__ledger_open(path, &p, false, &l);
            if (r.rc == 0) {
                r.created = l.created;
                r.rc = cs__ledger_claim(&l);
                r.slot = l.slot;
            }
            r.seconds = cs_ms_since(t0) / 1000;
            lt_write_full(rep[1], &r, sizeof r); /* < PIPE_BUF: atomic */
            /* Stay alive until the parent has verified (EOF on done). */
            if (read(done[0], &c, 1) != 0)
                _exit(4);
            if (r.rc == 0) {
                cs__ledger_leave(&l);
                cs__ledger_close(&l);
            }
            _exit(r.rc == 0 ? 0 : 5);
        }
    }
    close(go[0]);
    close(rep[1]);
    close(done[0]);

    int64_t t0 = cs_now_ns();
    close(go[1]); /* release them all */
    struct report *reps = calloc((size_t)n, sizeof *reps);
    double *secs = calloc((size_t)n, sizeof *secs);
    CHECK(reps && secs);
    for (int i = 0; i < n; i++)
        cs_read_full(rep[0], &reps[i], sizeof reps[i], 60000); /* deadlock deadline */
    double wall = cs_ms_since(t0) / 1000;

    int creators = 0;
    char *seen = calloc(CS_LEDGER_SLOTS, 1);
    CHECK(seen != NULL);
    for (int i = 0; i < n; i++) {
        if (reps[i].rc != 0) {
            fprintf(stderr, "worker %d failed: %d\n", reps[i].pid, reps[i].rc);
            exit(1);
        }
        CHECK(reps[i].slot >= 0 && reps[i].slot < CS_LEDGER_SLOTS);
        CHECK_EQ(seen[reps[i].slot], 0);
        seen[reps[i].slot] = 1;
        creators += reps[i].created;
        secs[i] = reps[i].seconds;
    }
    CHECK_EQ(creators, 1);

    struct cs_ledger ro;
    CHECK_EQ(cs__ledger_open(path, NULL, true, &ro), 0);
    CHECK_EQ_U(ro.hdr->live, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        struct cs_ledger_slot *s = cs__ledger_slot(&ro, reps[i].slot);
        CHECK_EQ(s->state, CS_SLOT_LIVE);
        CHECK_EQ(s->pid, reps[i].pid);
        CHECK(cs__ledger_slot_alive(&ro, reps[i].slot));
    }
    close(done[1]); /* let them leave */
    for (int i = 0; i < n; i++)
        cs_wait_ok(pids[i], 60000);
    CHECK_EQ_U(ro.hdr->live, 0);
    CHECK_EQ_U(ro.hdr->reaped, 0);
    for (int i = 0; i < CS_LEDGER_SLOTS; i++)
        CHECK_EQ(cs__ledger_slot(&ro, i)->state, CS_SLOT_FREE);
    cs__ledger_close(&ro);

    /* No temporary files left next to the ledger. */
    DIR *d = opendir(lt_dir());
    CHECK(d != NULL);
    int entries = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            entries++;
    closedir(d);
    CHECK_EQ(entries, 1);

    qsort(secs, (size_t)n, sizeof *secs, cmp_double);
    printf("ledger_256_workers: %d workers, 1 creator, wall %.1f ms from release to last "
           "claim, open+claim p50 %.2f ms p99 %.2f ms max %.2f ms\n", n, wall * 1e3,
           secs[n / 2] * 1e3, secs[(n * 99) / 100] * 1e3, secs[n - 1] * 1e3);
    free(seen);
    free(secs);
    free(reps);
    free(pids);
    return 0;
}

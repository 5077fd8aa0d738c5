/*
 * ledger_race_budget: two processes race 1000 reserve/release steps each
 * against a small limit. After every successful reserve the shared
 * aggregate is at most the limit; at the end peak <= limit, some reserves
 * were refused (the race was real) and every byte came back.
 */
#include "ledger_test.h"

#define LIMIT (64 * MiB)
#define STEPS 1000
#define HOLD 4

struct result {
    int ok, refused;
};

static void racer(const char *path, int seed, int ready_fd, int go_fd, int res_fd)
{
    struct cs_ledger_params p = lt_params(LIMIT);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    char c = 'r';
    lt_write_full(ready_fd, &c, 1);
    CHECK_EQ(read(go_fd, &c, 1), 0); /* barrier: EOF releases everybody */

    unsigned rng = (unsigned)seed * 2654435761u + 1;
    uint64_t held[HOLD] = {0};
    struct result res = {0, 0};
    for (int step = 0; step < STEPS; step++) {
        rng = rng * 1103515245u + 12345u;
        int k = (int)((rng >> 8) % HOLD);
        if (held[k]) {
            cs__ledger_release(&l, 0, CS_MEM_DATA, held[k]);
            held[k] = 0;
            continue;
        }
        uint64_t sz = (1 + (rng >> 16) % 24) * MiB;
        int r = cs__ledger_reserve(&l, 0, CS_MEM_DATA, sz);
        if (r == 0) {
            held[k] = sz;
            res.ok++;
            CHECK_LE_U(cs__ledger_used(&l, 0), LIMIT);
        } else {
            CHECK_EQ(r, -ENOMEM);
            res.refused++;
        }
        CHECK_LE_U(__atomic_load_n(&l.hdr->dev[0].peak, __ATOMIC_RELAXED), LIMIT);
    }
    for (int k = 0; k < HOLD; k++)
        if (held[k])
            cs__ledger_release(&l, 0, CS_MEM_DATA, held[k]);
    CHECK_EQ_U(cs__ledger_my_slot(&l)->bytes[0][CS_MEM_DATA], 0);
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
    lt_write_full(res_fd, &res, sizeof res);
    _exit(0);
}

int main(void)
{
    const char *path = lt_path("race");
    int go[2], res[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(res) == 0 && pipe(ready) == 0);
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        CHECK(kids[i] >= 0);
        if (kids[i] == 0) {
            close(go[1]);
            close(res[0]);
            close(ready[0]);
            racer(path, i + 1, ready[1], go[0], res[1]);
        }
    }
    close(go[0]);
    close(res[1]);
    close(ready[1]);
    /* Both racers have opened (racing on creating) the file and claimed. */
    char rdy[2];
    cs_read_full(ready[0], rdy, 2, 30000);
    int64_t t0 = cs_now_ns();
    close(go[1]);
    struct result total = {0, 0};
    for (int i = 0; i < 2; i++) {
        struct result r;
        cs_read_full(res[0], &r, sizeof r, 30000);
        total.ok += r.ok;
        total.refused += r.refused;
    }
    for (int i = 0; i < 2; i++)
        cs_wait_ok(kids[i], 30000);

    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, NULL, true, &l), 0);
    uint64_t peak = l.hdr->dev[0].peak;
    CHECK_LE_U(peak, LIMIT);
    CHECK_GT(peak, LIMIT / 2);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    CHECK_EQ_U(l.hdr->live, 0);
    CHECK_EQ_U(l.hdr->reaped, 0);
    CHECK_GT(total.refused, 0);
    CHECK_GT(total.ok, 100);
    cs__ledger_close(&l);
    printf("ledger_race_budget: %d reserved, %d refused, peak %llu of %llu MiB, %.3f s\n",
           total.ok, total.refused, (unsigned long long)(peak / MiB),
           (unsigned long long)(LIMIT / MiB), cs_ms_since(t0) / 1000);
    return 0;
}

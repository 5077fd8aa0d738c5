/*
 * ledger_threads: threads of one process charge and uncharge concurrently
 * through one slot (and trigger reaps on refusal) against a small limit:
 * the aggregate never exceeds the limit and every byte comes back. Runs
 * under TSan (label tsan): no forks here. The main thread holds all but
 * 8 MiB of the limit while they run, so refusals happen whatever the
 * scheduler does (a thread alone soon asks for more than 8 MiB); how the
 * threads overlap only changes how many. A start barrier puts all of them
 * at the line before any begins, so on more than one CPU they do race.
 */
#include "ledger_test.h"

#include <pthread.h>

#define LIMIT (32 * MiB)
#define THREADS 4
#define STEPS 5000

static struct cs_ledger g;
static int refused_total;
static pthread_barrier_t start;

static void *worker(void *arg)
{
    unsigned rng = (unsigned)(uintptr_t)arg * 7919u + 3;
    uint64_t held[3] = {0};
    int refused = 0;
    pthread_barrier_wait(&start);
    for (int i = 0; i < STEPS; i++) {
        rng = rng * 1103515245u + 12345u;
        int k = (int)((rng >> 8) % 3);
        enum cs_mem_category cat = k == 0 ? CS_MEM_DATA : k == 1 ? CS_MEM_POOL : CS_MEM_VMM;
        if (held[k]) {
            cs__ledger_uncharge(&g, 0, cat, held[k]);
            held[k] = 0;
        } else {
            uint64_t sz = (1 + (rng >> 16) % 8) * MiB;
            int r = cs__ledger_charge(&g, 0, cat, sz);
            if (r == 0)
                held[k] = sz;
            else
                refused++;
            CHECK(r == 0 || r == -ENOMEM);
            CHECK_LE_U(cs__ledger_used(&g, 0), LIMIT);
        }
    }
    for (int k = 0; k < 3; k++)
        if (held[k])
            cs__ledger_uncharge(&g, 0, k == 0 ? CS_MEM_DATA : k == 1 ? CS_MEM_POOL : CS_MEM_VMM,
                                held[k]);
    __atomic_fetch_add(&refused_total, refused, __ATOMIC_RELAXED);
    return NULL;
}

int main(void)
{
    struct cs_ledger_params p = lt_params(LIMIT);
    CHECK_EQ(cs__ledger_open(lt_path("threads"), &p, false, &g), 0);
    CHECK_EQ(cs__ledger_claim(&g), 0);
    CHECK_EQ(cs__ledger_charge(&g, 0, CS_MEM_DATA, LIMIT - 8 * MiB), 0);
    pthread_t t[THREADS];
    CHECK(pthread_barrier_init(&start, NULL, THREADS) == 0);
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    CHECK_EQ_U(cs__ledger_used(&g, 0), LIMIT - 8 * MiB);
    cs__ledger_uncharge(&g, 0, CS_MEM_DATA, LIMIT - 8 * MiB);
    CHECK_EQ_U(cs__ledger_used(&g, 0), 0);
    CHECK_LE_U(g.hdr->dev[0].peak, LIMIT);
    CHECK_GT(refused_total, 0);
    for (int c = 0; c < CS_MEM_NCATEGORIES; c++)
        CHECK_EQ_U(cs__ledger_my_slot(&g)->bytes[0][c], 0);
    cs__ledger_leave(&g);
    CHECK_EQ_U(g.hdr->live, 0);
    cs__ledger_close(&g);
    printf("ledger_threads: ok, %d refused\n", refused_total);
    return 0;
}

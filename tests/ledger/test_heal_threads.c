/*
 * ledger_heal_threads: threads charge and uncharge through one slot while
 * another thread reaps and heals without pause, and the main thread leaves
 * over-counts behind every so often, as dead processes would. Whatever the
 * scheduler does, the heal must never take a byte the workers hold or have
 * in flight (a later uncharge would find the aggregate short: checked by
 * its warning), and in the end it must have returned exactly what was left
 * behind, no more, no less. Runs under TSan (label tsan): no forks here.
 */
#include "ledger_test.h"

#include <pthread.h>
#include <sched.h>

#define LIMIT (1024 * MiB)
#define WORKERS 3
#define STEPS 20000
#define LEAKS 40

static struct cs_ledger g;
static int workers_done;
static int progress; /* steps done by all workers */

static void *worker(void *arg)
{
    unsigned rng = (unsigned)(uintptr_t)arg * 7919u + 11;
    uint64_t held[2] = {0};
    for (int i = 0; i < STEPS; i++) {
        rng = rng * 1103515245u + 12345u;
        int k = (int)((rng >> 8) & 1);
        enum cs_mem_category cat = k ? CS_MEM_POOL : CS_MEM_DATA;
        if (held[k]) {
            cs__ledger_uncharge(&g, 0, cat, held[k]);
            held[k] = 0;
        } else {
            uint64_t sz = (1 + (rng >> 16) % 16) * MiB;
            CHECK_EQ(cs__ledger_charge(&g, 0, cat, sz), 0);
            held[k] = sz;
        }
        __atomic_fetch_add(&progress, 1, __ATOMIC_RELAXED);
        if (i % 64 == 0)
            sched_yield(); /* give the healer quiet moments */
    }
    for (int k = 0; k < 2; k++)
        if (held[k])
            cs__ledger_uncharge(&g, 0, k ? CS_MEM_POOL : CS_MEM_DATA, held[k]);
    __atomic_fetch_add(&workers_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *healer(void *arg)
{
    (void)arg;
    while (__atomic_load_n(&workers_done, __ATOMIC_SEQ_CST) < WORKERS) {
        CHECK_GE(cs__ledger_reap(&g), 0);
        sched_yield();
    }
    return NULL;
}

/* Sums N over "had N bytes charged beyond" lines of the heal; *heals
 * gets how many there were. */
static uint64_t returned_in(const char *log, int *heals)
{
    uint64_t sum = 0;
    *heals = 0;
    for (const char *p = log; (p = strstr(p, " had ")) != NULL; p++) {
        unsigned long long n;
        if (sscanf(p, " had %llu bytes charged beyond", &n) == 1) {
            sum += n;
            ++*heals;
        }
    }
    return sum;
}

int main(void)
{
    struct cs_ledger_params p = lt_params(LIMIT);
    CHECK_EQ(cs__ledger_open(lt_path("heal-threads"), &p, false, &g), 0);
    CHECK_EQ(cs__ledger_claim(&g), 0);

    lt_capture_begin();
    pthread_t w[WORKERS], h;
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    CHECK(pthread_create(&h, NULL, healer, NULL) == 0);
    /* Over-counts spread over the workers' run, each once they have done
     * a further share of their steps. */
    uint64_t left = 0;
    for (int i = 0; i < LEAKS; i++) {
        const int due = (i + 1) * (WORKERS * STEPS / (LEAKS + 1));
        while (__atomic_load_n(&progress, __ATOMIC_RELAXED) < due)
            sched_yield();
        uint64_t n = (uint64_t)(i + 1) * 4096;
        __atomic_fetch_add(&g.hdr->dev[0].used, n, __ATOMIC_SEQ_CST);
        left += n;
    }
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_join(w[i], NULL) == 0);
    CHECK(pthread_join(h, NULL) == 0);
    /* Quiet now: one more reap returns whatever is still left over. */
    CHECK_EQ(cs__ledger_reap(&g), 0);
    char *err = lt_capture_end();
    CHECK(strstr(err, "short on uncharge") == NULL);
    int heals;
    CHECK_EQ_U(returned_in(err, &heals), left);
    CHECK_EQ_U(cs__ledger_used(&g, 0), 0);
    free(err);
    cs__ledger_leave(&g);
    cs__ledger_close(&g);
    printf("ledger_heal_threads: ok (%d over-counts, %" PRIu64 " bytes, returned exactly "
           "by %d heals)\n", LEAKS, left, heals);
    return 0;
}

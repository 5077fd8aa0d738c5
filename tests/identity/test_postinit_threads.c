/*
 * Threads of one process share the open file description, so the OFD lock
 * alone would let them all in at once: the local mutex must exclude them.
 * Contention is made, not hoped for: main holds the lock until every
 * worker sleeps in its first acquire, so each of them must count a wait.
 * Also: recursion is refused (-EDEADLK), a non-holder cannot release
 * (-EPERM), and the file-system strategy table.
 */
#include "id_test.h"

#define NTHREADS 8
#define ITERS 300

static struct cs_postinit_lock lock;
static int inside, max_inside, entries;
static uint64_t total_waits;
static pid_t tids[NTHREADS];

static void *worker(void *arg)
{
    __atomic_store_n(&tids[(intptr_t)arg], gettid(), __ATOMIC_RELEASE);
    for (int i = 0; i < ITERS; i++) {
        uint32_t waits = 0;
        CHECK_EQ(cs__postinit_lock_acquire(&lock, &waits), 0);
        int now = __atomic_add_fetch(&inside, 1, __ATOMIC_ACQ_REL);
        if (now > __atomic_load_n(&max_inside, __ATOMIC_RELAXED))
            __atomic_store_n(&max_inside, now, __ATOMIC_RELAXED);
        entries++;                      /* plain: the lock must protect it */
        if (i % 16 == 0)
            sched_yield();
        __atomic_sub_fetch(&inside, 1, __ATOMIC_ACQ_REL);
        __atomic_add_fetch(&total_waits, waits, __ATOMIC_RELAXED);
        CHECK_EQ(cs__postinit_lock_release(&lock), 0);
    }
    return NULL;
}

static void *try_foreign_release(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)cs__postinit_lock_release(&lock);
}

static void test_threads(void)
{
    pthread_t t[NTHREADS];
    uint32_t w;
    CHECK_EQ(cs__postinit_lock_acquire(&lock, &w), 0);
    for (intptr_t i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < NTHREADS; i++) {
        CS_WAIT_FOR(__atomic_load_n(&tids[i], __ATOMIC_ACQUIRE) != 0, 10000, "worker start");
        /* Nothing else sleeps between publishing the tid and the lock. */
        cs_wait_blocked(tids[i], 10000);
    }
    CHECK_EQ(cs__postinit_lock_release(&lock), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(max_inside, 1);
    CHECK_EQ(entries, NTHREADS * ITERS);
    CHECK_GE(total_waits, NTHREADS);     /* every worker waited at least once */
    printf("%d threads x %d entries: never two inside, %llu waits counted\n", NTHREADS, ITERS,
           (unsigned long long)total_waits);
}

static void test_misuse(void)
{
    uint32_t w;
    CHECK_EQ(cs__postinit_lock_release(&lock), -EPERM);    /* not held */
    CHECK_EQ(cs__postinit_lock_acquire(&lock, &w), 0);
    CHECK_EQ(w, 0);
    CHECK_EQ(cs__postinit_lock_acquire(&lock, &w), -EDEADLK);
    pthread_t t;
    void *ret;
    CHECK(pthread_create(&t, NULL, try_foreign_release, NULL) == 0);
    pthread_join(t, &ret);
    CHECK_EQ((intptr_t)ret, -EPERM);
    CHECK_EQ(cs__postinit_lock_release(&lock), 0);
    CHECK_EQ(cs__postinit_lock_acquire(NULL, &w), -EINVAL);
    struct cs_postinit_lock bad;
    CHECK_EQ(cs__postinit_lock_init(&bad, -1, 0, CS_POSTINIT_WAIT_AUTO), -EINVAL);
}

static void test_strategy_table(const char *path)
{
    CHECK_EQ(cs__postinit_wait_for_fs(0x6969), CS_POSTINIT_WAIT_POLLING);       /* NFS */
    CHECK_EQ(cs__postinit_wait_for_fs(0xFF534D42), CS_POSTINIT_WAIT_POLLING);   /* CIFS */
    CHECK_EQ(cs__postinit_wait_for_fs(0x65735546), CS_POSTINIT_WAIT_POLLING);   /* FUSE */
    CHECK_EQ(cs__postinit_wait_for_fs(0x12345678), CS_POSTINIT_WAIT_POLLING);   /* unknown */
    CHECK_EQ(cs__postinit_wait_for_fs(0xEF53), CS_POSTINIT_WAIT_BLOCKING);      /* ext4 */
    CHECK_EQ(cs__postinit_wait_for_fs(0x01021994), CS_POSTINIT_WAIT_BLOCKING);  /* tmpfs */
    CHECK_EQ(cs__postinit_wait_for_fs(0x58465342), CS_POSTINIT_WAIT_BLOCKING);  /* xfs */
    /* AUTO on our temp file (local): blocking. Forced modes stick. */
    int fd = open(path, O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    struct cs_postinit_lock l;
    CHECK_EQ(cs__postinit_lock_init(&l, fd, CS_POSTINIT_LOCK_OFFSET, CS_POSTINIT_WAIT_AUTO), 0);
    CHECK_EQ(cs__postinit_lock_strategy(&l), CS_POSTINIT_WAIT_BLOCKING);
    cs__postinit_lock_destroy(&l);
    CHECK_EQ(cs__postinit_lock_init(&l, fd, CS_POSTINIT_LOCK_OFFSET, CS_POSTINIT_WAIT_POLLING), 0);
    CHECK_EQ(cs__postinit_lock_strategy(&l), CS_POSTINIT_WAIT_POLLING);
    cs__postinit_lock_destroy(&l);
    close(fd);
    CHECK_EQ(CS_POSTINIT_LOCK_OFFSET, CS_LEDGER_LOCK_BASE - 1);
}

int main(void)
{
    char path[] = "/tmp/cs-postinit-thr-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK_EQ(cs__postinit_lock_init(&lock, fd, CS_POSTINIT_LOCK_OFFSET, CS_POSTINIT_WAIT_AUTO), 0);
    test_threads();
    test_misuse();
    test_strategy_table(path);
    cs__postinit_lock_destroy(&lock);
    close(fd);
    unlink(path);
    printf("post-init lock threads ok\n");
    return 0;
}

/*
 * ledger_damaged: a ledger truncated, or overwritten, under a live process
 * (docs/ledger.md, "A ledger damaged in use"). The
 * process never dies of it: it says so once, naming the file and the fix,
 * and fails closed (every charge refused with -ENOTRECOVERABLE, views show
 * the budget used up, releases ignored, no slot claimed afterwards, not
 * even by a fork child). Faults that are not about a ledger still kill
 * (the SIGBUS guard only takes what is its own). On c17f7cb the first
 * charge after `truncate -s 0` dies of SIGBUS.
 */
#include "ledger_test.h"

#include <pthread.h>
#include <setjmp.h>
#include <sys/mman.h>

#define LIMIT (64 * MiB)

static void open_claimed(const char *path, struct cs_ledger *l)
{
    struct cs_ledger_params p = lt_params(LIMIT);
    CHECK_EQ(cs__ledger_open(path, &p, false, l), 0);
    CHECK_EQ(cs__ledger_claim(l), 0);
    CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, 1 * MiB), 0);
}

/* After the damage: refused, once said, and everything else quiet. */
static void expect_fail_closed(struct cs_ledger *l, const char *path, const char *what)
{
    lt_capture_begin();
    int r = cs__ledger_charge(l, 0, CS_MEM_DATA, 1 * MiB);
    int r2 = cs__ledger_charge(l, 0, CS_MEM_DATA, 1);
    cs__ledger_uncharge(l, 0, CS_MEM_DATA, 1 * MiB);
    uint64_t used = cs__ledger_used(l, 0), limit = cs__ledger_limit(l, 0);
    int reaped = cs__ledger_reap(l);
    char *err = lt_capture_end();
    CHECK_EQ(r, -ENOTRECOVERABLE);
    CHECK_EQ(r2, -ENOTRECOVERABLE);
    CHECK_EQ(reaped, -ENOTRECOVERABLE);
    CHECK_EQ_U(limit, LIMIT);   /* the limit it was opened with, not "none" */
    CHECK_EQ_U(used, LIMIT);    /* views: nothing free */
    CHECK_EQ(lt_count_lines(err), 1);
    CHECK_CONTAINS(err, "cushare: ledger: error: ledger ");
    CHECK_CONTAINS(err, path);
    CHECK_CONTAINS(err, what);
    CHECK_CONTAINS(err, "refuses every further allocation (fail closed)");
    CHECK_CONTAINS(err, "restart the tenant's processes");
    printf("  %s", err);
    free(err);
}

/* A fork child of a process whose ledger is lost claims nothing. */
static void expect_child_refused(struct cs_ledger *l)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int r = cs__ledger_after_fork(l);
        if (r == 0)
            r = cs__ledger_claim(l);
        _exit(r == -ENOTRECOVERABLE ? 0 : 1);
    }
    cs_wait_ok(pid, 10000);
}

static void truncated_to_zero(void)
{
    const char *path = lt_path("zero");
    struct cs_ledger l;
    open_claimed(path, &l);
    CHECK_EQ(truncate(path, 0), 0);
    expect_fail_closed(&l, path, "was truncated while in use");
    expect_child_refused(&l);
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
}

/* The header page survives, the slots do not: the charge reaches the
 * aggregate, then faults on our slot. */
static void truncated_to_header(void)
{
    const char *path = lt_path("header");
    struct cs_ledger l;
    open_claimed(path, &l);
    CHECK_EQ(truncate(path, 4096), 0);
    expect_fail_closed(&l, path, "was truncated while in use");
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
}

/* Truncated and extended again before we looked: zeros, no fault. A
 * zeroed header must not read as "no limit". */
static void zeroed(void)
{
    const char *path = lt_path("zeroed");
    struct cs_ledger l;
    open_claimed(path, &l);
    CHECK_EQ(truncate(path, 0), 0);
    CHECK_EQ(truncate(path, CS_LEDGER_FILE_SIZE), 0);
    expect_fail_closed(&l, path, "was overwritten while in use");
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
}

static void garbled(void)
{
    const char *path = lt_path("garbled");
    struct cs_ledger l;
    open_claimed(path, &l);
    char junk[4096];
    unsigned rng = 777;
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)((rng = rng * 1103515245u + 12345u) >> 16);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    /* Slots first: garbage there is undetectable, and must not crash. */
    for (off_t off = 4096; off < (off_t)CS_LEDGER_FILE_SIZE; off += sizeof junk)
        CHECK_EQ(pwrite(fd, junk, sizeof junk, off), (int64_t)sizeof junk);
    cs__ledger_charge(&l, 0, CS_MEM_DATA, 1);
    cs__ledger_uncharge(&l, 0, CS_MEM_DATA, 1);
    CHECK_EQ(pwrite(fd, junk, sizeof junk, 0), (int64_t)sizeof junk);
    close(fd);
    expect_fail_closed(&l, path, "was overwritten while in use");
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
}

/* Four threads charging when the file goes: one message, all refused. */
struct racer {
    struct cs_ledger *l;
    pthread_barrier_t *go;
    int last;
};

/* Charges and gives back until the ledger is gone (bounded in time only
 * so that a broken build fails instead of hanging). */
static void *race_charges(void *arg)
{
    struct racer *r = arg;
    pthread_barrier_wait(r->go);
    int64_t deadline = cs_deadline_ns(30000);
    do {
        r->last = cs__ledger_charge(r->l, 0, CS_MEM_DATA, 1);
        if (r->last == -ENOTRECOVERABLE)
            break;
        cs__ledger_uncharge(r->l, 0, CS_MEM_DATA, 1);
    } while (cs_now_ns() < deadline);
    return NULL;
}

static void truncated_under_threads(void)
{
    const char *path = lt_path("threads");
    struct cs_ledger l;
    open_claimed(path, &l);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 5);
    struct racer r[4];
    pthread_t t[4];
    lt_capture_begin();
    for (int i = 0; i < 4; i++) {
        r[i] = (struct racer){.l = &l, .go = &go};
        CHECK_EQ(pthread_create(&t[i], NULL, race_charges, &r[i]), 0);
    }
    pthread_barrier_wait(&go);
    CHECK_EQ(truncate(path, 0), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    int after = cs__ledger_charge(&l, 0, CS_MEM_DATA, 1);
    char *err = lt_capture_end();
    for (int i = 0; i < 4; i++)
        CHECK_EQ(r[i].last, -ENOTRECOVERABLE);
    CHECK_EQ(after, -ENOTRECOVERABLE);
    if (lt_count_lines(err) != 1) {
        fprintf(stderr, "expected one line, got:\n%s", err);
        exit(1);
    }
    CHECK_CONTAINS(err, "was truncated while in use");
    free(err);
    pthread_barrier_destroy(&go);
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
}

/* A monitor (`cushare top`) reading a ledger that is truncated. */
static void monitor_survives(void)
{
    const char *path = lt_path("monitored");
    struct cs_ledger l, m;
    open_claimed(path, &l);
    CHECK_EQ(cs__ledger_open(path, NULL, true, &m), 0);
    lt_capture_begin();
    CHECK_EQ(truncate(path, 0), 0);
    uint64_t used = cs__ledger_used(&m, 0);
    char *err = lt_capture_end();
    CHECK_EQ_U(used, LIMIT);
    CHECK_CONTAINS(err, "was truncated while in use");
    free(err);
    cs__ledger_close(&m);
    cs__ledger_close(&l);
}

/* A SIGBUS that is not about a ledger is not ours to take: with the
 * default action the process still dies of it, with a handler of the
 * application that handler gets it. */
static sigjmp_buf app_jump;
static volatile sig_atomic_t app_got;

static void app_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    app_got++;
    siglongjmp(app_jump, 1);
}

static volatile char *mapped_then_truncated(const char *name)
{
    const char *path = lt_path(name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(ftruncate(fd, 8192), 0);
    char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    close(fd);
    CHECK_EQ(truncate(path, 0), 0);
    return p;
}

/* What a foreign SIGBUS must do to a child: kill it by SIGBUS when the
 * process had no handler before ours; with one (a sanitizer's), that
 * handler decides, but the child must never carry on as if nothing
 * happened. */
static bool dfl_before_us;

static void expect_not_swallowed(int st)
{
    if (dfl_before_us)
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
    else
        CHECK(!WIFEXITED(st) || WEXITSTATUS(st) != 0);
}

static void foreign_faults_pass_through(void)
{
    struct cs_ledger l;
    open_claimed(lt_path("installed"), &l); /* the guard is installed now */

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        volatile char *p = mapped_then_truncated("foreign-dfl");
        p[0] = 1; /* must kill us */
        _exit(0);
    }
    int st = lt_wait(pid, 10);
    expect_not_swallowed(st);

    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        raise(SIGBUS); /* sent, not a fault: still the default action */
        _exit(0);
    }
    st = lt_wait(pid, 10);
    expect_not_swallowed(st);
    cs__ledger_leave(&l);
    cs__ledger_close(&l);

    /* The application installs its own handler after ours: its choice. */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = app_handler;
    sa.sa_flags = SA_SIGINFO;
    CHECK_EQ(sigaction(SIGBUS, &sa, &old), 0);
    volatile char *p = mapped_then_truncated("foreign-app");
    if (!sigsetjmp(app_jump, 1))
        p[0] = 1;
    CHECK_EQ(app_got, 1);
    CHECK_EQ(sigaction(SIGBUS, &old, NULL), 0);
}

int main(void)
{
    struct sigaction pre;
    CHECK_EQ(sigaction(SIGBUS, NULL, &pre), 0);
    dfl_before_us = !(pre.sa_flags & SA_SIGINFO) && pre.sa_handler == SIG_DFL;
    truncated_to_zero();
    truncated_to_header();
    zeroed();
    garbled();
    truncated_under_threads();
    monitor_survives();
    foreign_faults_pass_through();
    printf("ledger_damaged: ok\n");
    return 0;
}

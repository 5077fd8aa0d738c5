/*
 * `cushare bench init`: start-up density. N fresh processes are released
 * together into cuInit, with and without cushare, and the tail of their
 * start-up latency is reported (docs/bench-init.md).
 *
 * Method. The parent never touches CUDA. It maps one result slot per worker
 * in a memfd, initialised to "did not report", and creates a pipe. Each
 * worker is fork()+exec() of this binary (`cushare bench __worker`), so it
 * is a fresh program image that goes through the loader and, in cushare
 * mode, the preloaded library. A worker loads libcuda.so.1 and resolves its
 * entry points (the preloaded wrappers win through RTLD_DEFAULT), increments
 * a ready counter and blocks in read() on the pipe. When all are ready the
 * parent takes a CLOCK_MONOTONIC release stamp and closes the write end:
 * every read returns EOF at once.
 *
 * What is timed. cuInit latency is from the worker's stamp just before
 * cuInit(0) to just after it returns. Loading libcuda.so.1 happens before
 * the barrier in both modes (as for a program linked against it) and is not
 * timed; in cushare mode the latency includes everything the library does
 * lazily on the first call (configuration, resolving the real driver,
 * opening the ledger and claiming a slot, identity) plus the driver's own
 * cuInit; in baseline mode it is the driver's cuInit alone. Context-ready
 * latency (--ctx) is from the release to the primary context being current,
 * so it includes the release offset (scheduler delay before cuInit).
 *
 * Failures. A slot only says "ok" if the worker wrote it and then exited
 * with status 0; a worker that dies is "crashed", one still running at the
 * deadline is killed and "timeout". Percentiles use successful workers only
 * and are always printed beside the failure counts.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "core/userdir.h"
#include "core/clock.h"
#include "core/config.h"
#include "cushare/phases.h"

/* ---- shared memory between the parent and its workers ------------------ */

#define BENCH_MAGIC 0x31544e4948534355ull /* "UCSHINT1" */
#define BENCH_VERSION 1u

enum bench_mode { MODE_BASELINE = 0, MODE_CUSHARE = 1 };
static const char *const mode_names[] = {[MODE_BASELINE] = "baseline", [MODE_CUSHARE] = "cushare"};

struct bench_header {
    uint64_t magic;         /*  0 BENCH_MAGIC */
    uint32_t version;       /*  8 BENCH_VERSION */
    uint32_t header_size;   /* 12 sizeof(struct bench_header) */
    uint32_t slot_size;     /* 16 sizeof(struct bench_slot) */
    uint32_t nworkers;      /* 20 */
    uint32_t mode;          /* 24 enum bench_mode */
    uint32_t ctx;           /* 28 retain a primary context after cuInit */
    uint64_t alloc_bytes;   /* 32 then allocate and free this much; 0 = no */
    uint32_t ready;         /* 40 atomic: workers at the barrier */
    uint32_t reserved0;     /* 44 */
    uint8_t reserved1[16];  /* 48 */
};

enum slot_state { SLOT_PENDING = 0, SLOT_ARRIVED = 1, SLOT_DONE = 2 };

struct bench_slot {
    uint32_t state;         /*  0 atomic enum slot_state */
    uint32_t reason;        /*  4 enum cs_bench_reason */
    int32_t result;         /*  8 CUresult of the failing (or last) call */
    int32_t pid;            /* 12 */
    uint32_t tier;          /* 16 enum cs_identity_tier or CS_BENCH_TIER_NONE */
    uint32_t reserved0;     /* 20 */
    uint64_t lock_waits;    /* 24 */
    uint64_t t[CS_BENCH_NPHASES]; /* 32 CLOCK_MONOTONIC ns, 0 = not reached */
    uint8_t reserved1[128 - 32 - 8 * CS_BENCH_NPHASES];
};

_Static_assert(sizeof(struct bench_header) == 64, "bench header layout");
_Static_assert(sizeof(struct bench_slot) == 128, "bench slot layout (one slot per two lines)");

static struct bench_slot *slot_at(struct bench_header *h, size_t i)
{
    return (struct bench_slot *)((char *)h + h->header_size + i * h->slot_size);
}

static uint64_t now_ns(void)
{
    return (uint64_t)cs__now_ns();
}

/* ---- the worker ---------------------------------------------------------- */

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_current_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

/* The preloaded wrapper when cushare is active, else the driver's export. */
static void *resolve(void *drv, const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p && drv)
        p = dlsym(drv, name);
    return p;
}

static int worker_report_setup(struct bench_header *h, struct bench_slot *s, long index,
                               const char *what)
{
    fprintf(stderr, "cushare: bench: worker %ld: %s\n", index, what);
    s->reason = CS_BENCH_R_SETUP;
    s->t[CS_BENCH_EXIT] = now_ns();
    __atomic_store_n(&s->state, SLOT_DONE, __ATOMIC_RELEASE);
    __atomic_fetch_add(&h->ready, 1, __ATOMIC_ACQ_REL);
    return CS_EXIT_FAIL;
}

/* cushare's own start-up stamps (a no-op without cushare). */
static void copy_phases(cushare_phases_fn phases, struct bench_slot *s)
{
    if (!phases)
        return;
    struct cushare_phases ph;
    memset(&ph, 0, sizeof ph);
    phases(&ph);
    if (ph.version != CUSHARE_PHASES_VERSION)
        return;
    s->t[CS_BENCH_WRAPPER] = ph.wrapper_enter_ns;
    s->t[CS_BENCH_LEDGER] = ph.ledger_ready_ns;
    s->t[CS_BENCH_REAL_INIT] = ph.real_init_done_ns;
    s->t[CS_BENCH_IDENTITY] = ph.identity_done_ns;
    s->tier = ph.identity_tier < CS_IDENTITY_NTIERS ? ph.identity_tier : CS_IDENTITY_UNKNOWN;
    s->lock_waits = ph.lock_waits;
}

int cs_bench_worker(int argc, char **argv)
{
    long memfd, pipefd, index;
    if (argc != 4 || cs__parse_int(argv[1], 0, INT_MAX, &memfd) ||
        cs__parse_int(argv[2], 0, INT_MAX, &pipefd) ||
        cs__parse_int(argv[3], 0, INT_MAX, &index)) {
        fprintf(stderr, "cushare: bench: __worker is started by `cushare bench init` only\n");
        return CS_EXIT_USAGE;
    }
    struct stat st;
    if (fstat((int)memfd, &st) || (size_t)st.st_size < sizeof(struct bench_header)) {
        fprintf(stderr, "cushare: bench: worker %ld: no result memory\n", index);
        return CS_EXIT_FAIL;
    }
    struct bench_header *h =
        mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)memfd, 0);
    close((int)memfd);
    if (h == MAP_FAILED || h->magic != BENCH_MAGIC || h->version != BENCH_VERSION ||
        h->header_size != sizeof(struct bench_header) ||
        h->slot_size != sizeof(struct bench_slot) || (uint64_t)index >= h->nworkers ||
        (size_t)st.st_size < h->header_size + (size_t)h->nworkers * h->slot_size) {
        fprintf(stderr, "cushare: bench: worker %ld: result memory of another version\n", index);
        return CS_EXIT_FAIL;
    }
    struct bench_slot *s = slot_at(h, (size_t)index);
    s->pid = getpid();
    s->tier = CS_BENCH_TIER_NONE;

    /* Before the barrier, untimed: load the driver library as a program
     * linked against it would have, and resolve every entry point. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv)
        return worker_report_setup(h, s, index, dlerror());
    cushare_phases_fn phases = (cushare_phases_fn)dlsym(RTLD_DEFAULT, CUSHARE_PHASES_SYMBOL);
    if (h->mode == MODE_CUSHARE && !phases)
        return worker_report_setup(h, s, index, "libcushare.so is not preloaded");
    if (phases)
        s->tier = CS_IDENTITY_UNKNOWN;
    init_fn cu_init = (init_fn)resolve(drv, "cuInit");
    device_get_fn cu_device_get = (device_get_fn)resolve(drv, "cuDeviceGet");
    retain_fn cu_retain = (retain_fn)resolve(drv, "cuDevicePrimaryCtxRetain");
    set_current_fn cu_set_current = (set_current_fn)resolve(drv, "cuCtxSetCurrent");
    alloc_fn cu_alloc = (alloc_fn)resolve(drv, "cuMemAlloc_v2");
    free_fn cu_free = (free_fn)resolve(drv, "cuMemFree_v2");
    if (!cu_init || (h->ctx && (!cu_device_get || !cu_retain || !cu_set_current)) ||
        (h->alloc_bytes && (!cu_alloc || !cu_free)))
        return worker_report_setup(h, s, index, "libcuda.so.1 lacks an entry point");

    __atomic_store_n(&s->state, SLOT_ARRIVED, __ATOMIC_RELEASE);
    __atomic_fetch_add(&h->ready, 1, __ATOMIC_ACQ_REL);
    char c;
    while (read((int)pipefd, &c, 1) < 0 && errno == EINTR)
        ;
    s->t[CS_BENCH_WOKE] = now_ns();
    close((int)pipefd);

    enum cs_bench_reason reason = CS_BENCH_R_OK;
    s->t[CS_BENCH_ENTER] = now_ns();
    CUresult r = cu_init(0);
    s->t[CS_BENCH_RETURNED] = now_ns();
    s->result = (int32_t)r;
    if (r != CUDA_SUCCESS)
        reason = CS_BENCH_R_INIT;
    copy_phases(phases, s); /* kept if a later step hangs and is killed */
    if (reason == CS_BENCH_R_OK && h->ctx) {
        CUdevice dev;
        CUcontext ctx;
        r = cu_device_get(&dev, 0);
        if (r == CUDA_SUCCESS)
            r = cu_retain(&ctx, dev);
        if (r == CUDA_SUCCESS)
            r = cu_set_current(ctx);
        if (r == CUDA_SUCCESS)
            s->t[CS_BENCH_CTX] = now_ns();
        else
            reason = CS_BENCH_R_CTX;
    }
    if (reason == CS_BENCH_R_OK && h->alloc_bytes) {
        CUdeviceptr p;
        r = cu_alloc(&p, (size_t)h->alloc_bytes);
        if (r == CUDA_SUCCESS) {
            s->t[CS_BENCH_ALLOC] = now_ns();
            r = cu_free(p);
        }
        if (r != CUDA_SUCCESS)
            reason = CS_BENCH_R_ALLOC;
    }
    copy_phases(phases, s);
    s->result = (int32_t)r;
    s->reason = reason;
    s->t[CS_BENCH_EXIT] = now_ns();
    __atomic_store_n(&s->state, SLOT_DONE, __ATOMIC_RELEASE);
    return reason == CS_BENCH_R_OK ? CS_EXIT_OK : CS_EXIT_FAIL;
}

/* ---- statistics ---------------------------------------------------------- */

size_t cs_bench_rank(unsigned pct, size_t n)
{
    if (n == 0)
        return 0;
    if (pct > 100)
        pct = 100;
    /* ceil(pct * n / 100) in integers: no rounding surprise at 99 * 300. */
    size_t rank = (pct * n + 99) / 100;
    return rank < 1 ? 1 : rank;
}

uint64_t cs_bench_percentile(const uint64_t *sorted, size_t n, unsigned pct)
{
    return n ? sorted[cs_bench_rank(pct, n) - 1] : 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void cs_bench_stats(uint64_t *samples, size_t n, struct cs_bench_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!n)
        return;
    qsort(samples, n, sizeof *samples, cmp_u64);
    out->n = n;
    for (size_t i = 0; i < n; i++)
        out->sum += samples[i];
    out->mean = out->sum / n;
    out->p50 = cs_bench_percentile(samples, n, 50);
    out->p95 = cs_bench_percentile(samples, n, 95);
    out->p99 = cs_bench_percentile(samples, n, 99);
    out->max = samples[n - 1];
}

static uint64_t span(int64_t from, int64_t to)
{
    return to > from ? (uint64_t)(to - from) : 0;
}

static bool reached(const struct cs_bench_record *w, enum cs_bench_phase p)
{
    return w->t[p] != CS_BENCH_NOT_REACHED;
}

int cs_bench_summarize(const struct cs_bench_record *r, size_t n, struct cs_bench_summary *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    out->p99_worker = -1;
    uint64_t *init = calloc(n + 1, sizeof *init);
    uint64_t *ctx = calloc(n + 1, sizeof *ctx);
    uint64_t *off = calloc(n + 1, sizeof *off);
    if (!init || !ctx || !off) {
        free(init);
        free(ctx);
        free(off);
        return -ENOMEM;
    }
    size_t ni = 0, nc = 0, no = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cs_bench_record *w = &r[i];
        out->by_reason[w->reason < CS_BENCH_NREASONS ? w->reason : CS_BENCH_R_NO_REPORT]++;
        out->tiers[w->tier <= CS_BENCH_TIER_NONE ? w->tier : CS_IDENTITY_UNKNOWN]++;
        out->lock_waits += w->lock_waits;
        if (w->done > out->wall)
            out->wall = w->done;
        if (w->t[CS_BENCH_WOKE] != CS_BENCH_NOT_REACHED)
            off[no++] = span(0, w->t[CS_BENCH_WOKE]);
        if (w->reason != CS_BENCH_R_OK) {
            out->failed++;
            continue;
        }
        out->ok++;
        if (reached(w, CS_BENCH_ENTER) && reached(w, CS_BENCH_RETURNED))
            init[ni++] = span(w->t[CS_BENCH_ENTER], w->t[CS_BENCH_RETURNED]);
        if (reached(w, CS_BENCH_CTX))
            ctx[nc++] = span(0, w->t[CS_BENCH_CTX]);
    }
    cs_bench_stats(init, ni, &out->init);
    cs_bench_stats(ctx, nc, &out->ctx);
    cs_bench_stats(off, no, &out->offset);
    for (size_t i = 0; ni && i < n; i++)
        if (r[i].reason == CS_BENCH_R_OK && reached(&r[i], CS_BENCH_ENTER) &&
            reached(&r[i], CS_BENCH_RETURNED) &&
            span(r[i].t[CS_BENCH_ENTER], r[i].t[CS_BENCH_RETURNED]) == out->init.p99) {
            out->p99_worker = (int)i;
            break;
        }
    free(init);
    free(ctx);
    free(off);
    return 0;
}

/* ---- the parent ---------------------------------------------------------- */

static const char init_usage[] =
    "usage: cushare bench init -n N [--ctx] [--alloc SIZE] [--repeat K] [--csv FILE]\n"
    "                          [--baseline] [--json] [--timeout S] [--mem SIZE]\n"
    "  -n N        workers released together (1..1000)\n"
    "  --ctx       after cuInit, retain device 0's primary context and make it current\n"
    "  --alloc SZ  then cuMemAlloc SZ bytes and free them (implies --ctx)\n"
    "  --repeat K  repeat the whole run K times; report each and the mean of p99s\n"
    "  --csv FILE  write one row per worker and run (phases in ns after the release)\n"
    "  --baseline  also run without cushare, alternating baseline and cushare runs,\n"
    "              and report the ratio of p99s\n"
    "  --json      print a machine-readable summary instead of text\n"
    "  --timeout S per-run deadline in seconds (default 600); stragglers are killed\n"
    "  --mem SIZE  memory budget of the cushare workers (CUDA_DEVICE_MEMORY_LIMIT)\n";

#define BENCH_MAX_WORKERS 1000   /* below the ledger's CS_LEDGER_SLOTS */

struct bench_opts {
    long n, repeat, timeout_s;
    bool ctx, baseline, json;
    uint64_t alloc;
    const char *csv, *mem;
};

struct bench {
    struct bench_opts o;
    char self[PATH_MAX];
    char lib[PATH_MAX];
    FILE *csv;
};

struct run_result {
    int run;
    enum bench_mode mode;
    struct cs_bench_summary sum;
    int64_t p99_phases[CS_BENCH_NPHASES]; /* of the init p99 worker */
};

struct proc {
    pid_t pid;
    bool live, spawn_failed, killed;
    int status;
    uint64_t reaped_ns;
};

static const char *const reason_keys[] = {
#define CS_X_KEY(id, key, text) [CS_BENCH_R_##id] = key,
    CS_BENCH_REASONS(CS_X_KEY)
#undef CS_X_KEY
};
static const char *const reason_texts[] = {
#define CS_X_TEXT(id, key, text) [CS_BENCH_R_##id] = text,
    CS_BENCH_REASONS(CS_X_TEXT)
#undef CS_X_TEXT
};
static const char *const phase_names[] = {
#define CS_X_NAME(id, name) [CS_BENCH_##id] = name,
    CS_BENCH_PHASES(CS_X_NAME)
#undef CS_X_NAME
};
static const char *const tier_names[] = {
#define CS_X_NAME(id, name) [CS_IDENTITY_##id] = name,
    CS_IDENTITY_TIERS(CS_X_NAME)
#undef CS_X_NAME
    [CS_BENCH_TIER_NONE] = "none",
};


/* A fresh 0700 directory for one run's ledger (and the ledger's own
 * temporaries), under the per-user directory `cushare run` uses. */
static int make_run_dir(char *out, size_t len)
{
    char dir[PATH_MAX];
    if (cs_cli_user_dir("bench init", dir, sizeof dir))
        return -1;
    if (snprintf(out, len, "%s/bench-XXXXXX", dir) >= (int)len) {
        fprintf(stderr, "cushare: bench init: %s: path too long\n", dir);
        return -1;
    }
    if (!mkdtemp(out)) {
        fprintf(stderr, "cushare: bench init: mkdtemp in %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

static void remove_run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

static bool has_name(const char *entry, const char *name)
{
    size_t len = strlen(name);
    return !strncmp(entry, name, len) && entry[len] == '=';
}

static void free_env(char **env, size_t first_own)
{
    if (!env)
        return;
    for (size_t i = first_own; env[i]; i++)
        free(env[i]);
    free(env);
}

__attribute__((format(printf, 3, 4))) static int add_var(char **env, size_t *k, const char *fmt,
                                                         ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&env[*k], fmt, ap);
    va_end(ap);
    if (n < 0) {
        env[*k] = NULL;
        return 1;
    }
    (*k)++;
    return 0;
}

/* Workers' environment: ours minus what the mode sets. The strings from
 * index *first_own on are malloc'd. */
static char **build_env(const struct bench *b, enum bench_mode mode, const char *ledger,
                        size_t *first_own)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 4, sizeof *env);
    char *preload = cs_cli_preload(getenv("LD_PRELOAD"), b->lib, mode == MODE_CUSHARE);
    if (!env || !preload) {
        free(env);
        free(preload);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (has_name(environ[i], "LD_PRELOAD") ||
            has_name(environ[i], "CUDA_DEVICE_MEMORY_SHARED_CACHE") ||
            (b->o.mem && has_name(environ[i], "CUDA_DEVICE_MEMORY_LIMIT")))
            continue;
        env[k++] = environ[i];
    }
    *first_own = k;
    int bad = 0;
    if (mode == MODE_CUSHARE) {
        bad |= add_var(env, &k, "LD_PRELOAD=%s", preload);
        bad |= add_var(env, &k, "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", ledger);
        if (b->o.mem)
            bad |= add_var(env, &k, "CUDA_DEVICE_MEMORY_LIMIT=%s", b->o.mem);
    } else if (*preload) {
        bad |= add_var(env, &k, "LD_PRELOAD=%s", preload);
    }
    free(preload);
    if (bad) {
        free_env(env, *first_own);
        return NULL;
    }
    return env;
}

struct worker_setup {
    const sigset_t *mask;
    int memfd, pipefd;
};

/* In a worker, before exec: our signal mask back, and the two descriptors
 * its command line names kept open across exec. */
static void setup_worker(void *arg)
{
    const struct worker_setup *w = arg;
    sigprocmask(SIG_SETMASK, w->mask, NULL);
    fcntl(w->memfd, F_SETFD, 0);
    fcntl(w->pipefd, F_SETFD, 0);
}

static void reap(struct proc *p, size_t n, size_t *live, int flags)
{
    int status;
    pid_t pid;
    while (*live && (pid = waitpid(-1, &status, flags)) != 0) {
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (size_t i = 0; i < n; i++)
            if (p[i].live && p[i].pid == pid) {
                p[i].live = false;
                p[i].status = status;
                p[i].reaped_ns = now_ns();
                (*live)--;
                break;
            }
    }
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static enum cs_bench_reason classify(const struct proc *p, const struct bench_slot *s)
{
    if (p->spawn_failed)
        return CS_BENCH_R_SPAWN;
    if (p->killed)
        return CS_BENCH_R_TIMEOUT;
    uint32_t state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    bool clean = WIFEXITED(p->status);
    if (state != SLOT_DONE)
        return clean ? CS_BENCH_R_NO_REPORT : CS_BENCH_R_CRASHED;
    enum cs_bench_reason r = s->reason < CS_BENCH_NREASONS ? s->reason : CS_BENCH_R_NO_REPORT;
    /* Reported success, then died or exited non-zero (an exit handler). */
    if (r == CS_BENCH_R_OK && !(clean && WEXITSTATUS(p->status) == 0))
        return CS_BENCH_R_CRASHED;
    return r;
}

static void csv_header(FILE *f)
{
    fputs("run,mode,worker,pid", f);
    for (int k = 0; k < CS_BENCH_NPHASES; k++)
        fprintf(f, ",%s_ns", phase_names[k]);
    fputs(",init_latency_ns,ctx_latency_ns,result,tier,lock_waits,reason\n", f);
}

static void csv_row(FILE *f, int run, enum bench_mode mode, const struct cs_bench_record *w)
{
    fprintf(f, "%d,%s,%d,%d", run, mode_names[mode], w->worker, w->pid);
    for (int k = 0; k < CS_BENCH_NPHASES; k++) {
        if (reached(w, (enum cs_bench_phase)k))
            fprintf(f, ",%lld", (long long)w->t[k]);
        else
            fputs(",", f);
    }
    if (reached(w, CS_BENCH_ENTER) && reached(w, CS_BENCH_RETURNED))
        fprintf(f, ",%lld", (long long)(w->t[CS_BENCH_RETURNED] - w->t[CS_BENCH_ENTER]));
    else
        fputs(",", f);
    if (reached(w, CS_BENCH_CTX))
        fprintf(f, ",%lld", (long long)w->t[CS_BENCH_CTX]);
    else
        fputs(",", f);
    fprintf(f, ",%d,%s,%llu,%s\n", w->result,
            tier_names[w->tier <= CS_BENCH_TIER_NONE ? w->tier : CS_IDENTITY_UNKNOWN],
            (unsigned long long)w->lock_waits, reason_keys[w->reason]);
}

/* One run of N workers in one mode. 0, or -1 when the run could not be set
 * up at all (nothing measured). */
static int run_once(struct bench *b, int run, enum bench_mode mode, struct run_result *out)
{
    size_t n = (size_t)b->o.n;
    size_t size = sizeof(struct bench_header) + n * sizeof(struct bench_slot);
    int rc = -1, memfd = -1, pfd[2] = {-1, -1};
    struct bench_header *h = MAP_FAILED;
    struct proc *procs = calloc(n, sizeof *procs);
    struct cs_bench_record *rec = calloc(n, sizeof *rec);
    char **env = NULL;
    size_t first_own = 0;
    char dir[PATH_MAX] = "", ledger[PATH_MAX + 16] = "";
    sigset_t chld, old_mask;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    bool masked = false;

    memset(out, 0, sizeof *out);
    out->run = run;
    out->mode = mode;
    if (!procs || !rec) {
        fprintf(stderr, "cushare: bench init: out of memory\n");
        goto done;
    }
    memfd = memfd_create("cushare-bench-init", MFD_CLOEXEC);
    if (memfd < 0 || ftruncate(memfd, (off_t)size) ||
        (h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0)) == MAP_FAILED) {
        fprintf(stderr, "cushare: bench init: result memory: %s\n", strerror(errno));
        goto done;
    }
    *h = (struct bench_header){
        .magic = BENCH_MAGIC,
        .version = BENCH_VERSION,
        .header_size = sizeof(struct bench_header),
        .slot_size = sizeof(struct bench_slot),
        .nworkers = (uint32_t)n,
        .mode = mode,
        .ctx = b->o.ctx,
        .alloc_bytes = b->o.alloc,
    };
    for (size_t i = 0; i < n; i++) {
        struct bench_slot *s = slot_at(h, i);
        memset(s, 0, sizeof *s);
        s->state = SLOT_PENDING;
        s->reason = CS_BENCH_R_NO_REPORT;
        s->result = -1;
        s->tier = CS_BENCH_TIER_NONE;
    }
    if (pipe2(pfd, O_CLOEXEC)) {
        fprintf(stderr, "cushare: bench init: pipe: %s\n", strerror(errno));
        goto done;
    }
    if (mode == MODE_CUSHARE) {
        if (make_run_dir(dir, sizeof dir))
            goto done;
        snprintf(ledger, sizeof ledger, "%s/ledger", dir);
    }
    env = build_env(b, mode, ledger, &first_own);
    if (!env) {
        fprintf(stderr, "cushare: bench init: out of memory\n");
        goto done;
    }
    char memfd_s[16], pipe_s[16];
    snprintf(memfd_s, sizeof memfd_s, "%d", memfd);
    snprintf(pipe_s, sizeof pipe_s, "%d", pfd[0]);

    sigprocmask(SIG_BLOCK, &chld, &old_mask);
    masked = true;
    fflush(NULL);
    uint64_t deadline = now_ns() + (uint64_t)b->o.timeout_s * 1000000000ull;
    size_t live = 0;
    int spawn_errno = 0;
    struct worker_setup setup = {.mask = &old_mask, .memfd = memfd, .pipefd = pfd[0]};
    for (size_t i = 0; i < n; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        char *av[] = {b->self, "bench", "__worker", memfd_s, pipe_s, idx, NULL};
        struct cs_cli_spawn s = {
            .argv = av, .envp = env, .quiet = true, .in_child = setup_worker, .arg = &setup};
        pid_t pid = cs_cli_spawn("bench init", &s);
        if (pid < 0) {
            spawn_errno = errno;
            procs[i].spawn_failed = true;
            continue;
        }
        procs[i].pid = pid;
        procs[i].live = true;
        live++;
    }
    close(pfd[0]);
    pfd[0] = -1;
    if (spawn_errno)
        fprintf(stderr, "cushare: bench init: fork: %s (workers not started count as failed)\n",
                strerror(spawn_errno));

    /* The barrier: every worker is waiting in read(), or will never. */
    for (;;) {
        reap(procs, n, &live, WNOHANG);
        size_t gone = 0;
        for (size_t i = 0; i < n; i++)
            if (procs[i].spawn_failed ||
                (!procs[i].live &&
                 __atomic_load_n(&slot_at(h, i)->state, __ATOMIC_ACQUIRE) == SLOT_PENDING))
                gone++;
        if (__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE) + gone >= n || now_ns() >= deadline)
            break;
        sleep_ns(200000);
    }
    uint64_t release = now_ns();
    close(pfd[1]);
    pfd[1] = -1;

    while (live) {
        reap(procs, n, &live, WNOHANG);
        if (!live)
            break;
        uint64_t now = now_ns();
        if (now >= deadline) {
            for (size_t i = 0; i < n; i++)
                if (procs[i].live) {
                    kill(procs[i].pid, SIGKILL);
                    procs[i].killed = true;
                }
            reap(procs, n, &live, 0);
            break;
        }
        uint64_t wait = deadline - now < 1000000000ull ? deadline - now : 1000000000ull;
        struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull),
                              .tv_nsec = (long)(wait % 1000000000ull)};
        sigtimedwait(&chld, NULL, &ts);
    }

    for (size_t i = 0; i < n; i++) {
        const struct bench_slot *s = slot_at(h, i);
        struct cs_bench_record *w = &rec[i];
        w->worker = (int)i;
        w->pid = procs[i].pid;
        w->reason = classify(&procs[i], s);
        w->result = s->result;
        w->tier = s->tier <= CS_BENCH_TIER_NONE ? s->tier : CS_IDENTITY_UNKNOWN;
        w->lock_waits = s->lock_waits;
        for (int k = 0; k < CS_BENCH_NPHASES; k++)
            w->t[k] = s->t[k] ? (int64_t)(s->t[k] - release) : CS_BENCH_NOT_REACHED;
        if (w->t[CS_BENCH_EXIT] != CS_BENCH_NOT_REACHED && !procs[i].killed)
            w->done = w->t[CS_BENCH_EXIT];
        else if (procs[i].reaped_ns)
            w->done = (int64_t)(procs[i].reaped_ns - release);
        if (b->csv)
            csv_row(b->csv, run, mode, w);
    }
    if (b->csv)
        fflush(b->csv);
    if (cs_bench_summarize(rec, n, &out->sum)) {
        fprintf(stderr, "cushare: bench init: out of memory\n");
        goto done;
    }
    for (int k = 0; k < CS_BENCH_NPHASES; k++)
        out->p99_phases[k] =
            out->sum.p99_worker >= 0 ? rec[out->sum.p99_worker].t[k] : CS_BENCH_NOT_REACHED;
    rc = 0;
done:
    if (masked)
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    if (h != MAP_FAILED)
        munmap(h, size);
    if (memfd >= 0)
        close(memfd);
    free_env(env, first_own);
    if (dir[0])
        remove_run_dir(dir);
    free(procs);
    free(rec);
    return rc;
}

/* ---- reporting ----------------------------------------------------------- */

static void print_ms(FILE *f, uint64_t ns)
{
    fprintf(f, "%.3f", (double)ns / 1e6);
}

static void print_stats(FILE *f, const char *label, const struct cs_bench_stats *st)
{
    fprintf(f, "  %-20s", label);
    if (!st->n) {
        fputs(" no successful sample\n", f);
        return;
    }
    const char *names[] = {"p50", "p95", "p99", "max", "mean"};
    uint64_t vals[] = {st->p50, st->p95, st->p99, st->max, st->mean};
    for (int i = 0; i < 5; i++) {
        fprintf(f, " %s ", names[i]);
        print_ms(f, vals[i]);
    }
    fprintf(f, "  (%zu samples)\n", st->n);
}

static void print_run_text(const struct bench *b, const struct run_result *r)
{
    const struct cs_bench_summary *s = &r->sum;
    printf("run %d %s: ok %zu/%zu, failed %zu, wall ", r->run, mode_names[r->mode], s->ok, s->n,
           s->failed);
    print_ms(stdout, s->wall > 0 ? (uint64_t)s->wall : 0);
    printf(" ms\n");
    print_stats(stdout, "cuInit latency (ms)", &s->init);
    if (b->o.ctx)
        print_stats(stdout, "context ready (ms)", &s->ctx);
    print_stats(stdout, "release offset (ms)", &s->offset);
    if (s->failed) {
        printf("  failures:");
        const char *sep = " ";
        for (int k = 0; k < CS_BENCH_NREASONS; k++)
            if (k != CS_BENCH_R_OK && s->by_reason[k]) {
                printf("%s%s %zu", sep, reason_texts[k], s->by_reason[k]);
                sep = ", ";
            }
        printf("\n");
    }
    printf("  identity:");
    for (int k = 0; k <= CS_BENCH_TIER_NONE; k++)
        if (s->tiers[k])
            printf(" %s %zu", tier_names[k], s->tiers[k]);
    printf("; lock waits %llu\n", (unsigned long long)s->lock_waits);
    if (s->p99_worker >= 0) {
        printf("  cuInit p99 worker %d (ms after release):", s->p99_worker);
        for (int k = 0; k < CS_BENCH_NPHASES; k++) {
            if (r->p99_phases[k] == CS_BENCH_NOT_REACHED)
                continue;
            printf(" %s ", phase_names[k]);
            printf("%.3f", (double)r->p99_phases[k] / 1e6);
        }
        printf("\n");
    }
    fflush(stdout);
}

/* Mean over the runs of one mode of a p99 (runs without a successful
 * sample excluded). false when no run had one. */
static bool mean_p99(const struct run_result *runs, size_t nruns, enum bench_mode mode, bool ctx,
                     double *out, size_t *used)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < nruns; i++) {
        const struct cs_bench_stats *st = ctx ? &runs[i].sum.ctx : &runs[i].sum.init;
        if (runs[i].mode == mode && st->n) {
            sum += (double)st->p99;
            k++;
        }
    }
    *used = k;
    *out = k ? sum / (double)k : 0;
    return k > 0;
}

static size_t failed_in(const struct run_result *runs, size_t nruns, enum bench_mode mode)
{
    size_t f = 0;
    for (size_t i = 0; i < nruns; i++)
        if (runs[i].mode == mode)
            f += runs[i].sum.failed;
    return f;
}

static void print_summary_text(const struct bench *b, const struct run_result *runs, size_t nruns)
{
    int nm = b->o.ctx ? 2 : 1;
    for (int m = 0; m < nm; m++) {
        bool ctx = m == 1;
        double base = 0, cush = 0;
        size_t ub = 0, uc = 0;
        bool hb = b->o.baseline && mean_p99(runs, nruns, MODE_BASELINE, ctx, &base, &ub);
        bool hc = mean_p99(runs, nruns, MODE_CUSHARE, ctx, &cush, &uc);
        printf("mean p99 %s:", ctx ? "context ready" : "cuInit");
        if (b->o.baseline) {
            if (hb)
                printf(" baseline %.3f ms (%zu runs),", base / 1e6, ub);
            else
                printf(" baseline - (no successful run),");
        }
        if (hc)
            printf(" cushare %.3f ms (%zu runs)", cush / 1e6, uc);
        else
            printf(" cushare - (no successful run)");
        if (hb && hc && base > 0)
            printf(", ratio cushare/baseline %.3f", cush / base);
        printf("\n");
    }
    /* One line of key=value pairs for scripts (bench/run_init_sweep.sh). */
    printf("summary n=%ld ctx=%d alloc=%llu repeat=%ld", b->o.n, b->o.ctx,
           (unsigned long long)b->o.alloc, b->o.repeat);
    for (int m = 0; m < 2; m++) {
        bool ctx = m == 1;
        const char *what = ctx ? "ctx" : "init";
        double base = 0, cush = 0;
        size_t u;
        bool hb = b->o.baseline && mean_p99(runs, nruns, MODE_BASELINE, ctx, &base, &u);
        bool hc = mean_p99(runs, nruns, MODE_CUSHARE, ctx, &cush, &u);
        if (hb)
            printf(" baseline_%s_p99_ms=%.3f", what, base / 1e6);
        else
            printf(" baseline_%s_p99_ms=-", what);
        if (hc)
            printf(" cushare_%s_p99_ms=%.3f", what, cush / 1e6);
        else
            printf(" cushare_%s_p99_ms=-", what);
        if (hb && hc && base > 0)
            printf(" %s_ratio=%.3f", what, cush / base);
        else
            printf(" %s_ratio=-", what);
    }
    if (b->o.baseline)
        printf(" baseline_failed=%zu", failed_in(runs, nruns, MODE_BASELINE));
    else
        printf(" baseline_failed=-");
    printf(" cushare_failed=%zu\n", failed_in(runs, nruns, MODE_CUSHARE));
}

static void json_stats(const char *key, const struct cs_bench_stats *st)
{
    if (!st->n) {
        printf("\"%s\":null", key);
        return;
    }
    printf("\"%s\":{\"samples\":%zu,\"p50\":%llu,\"p95\":%llu,\"p99\":%llu,\"max\":%llu,"
           "\"mean\":%llu,\"sum\":%llu}",
           key, st->n, (unsigned long long)st->p50, (unsigned long long)st->p95,
           (unsigned long long)st->p99, (unsigned long long)st->max,
           (unsigned long long)st->mean, (unsigned long long)st->sum);
}

static void json_number_or_null(double v, bool have)
{
    if (have)
        printf("%.0f", v);
    else
        printf("null");
}

static void print_json(const struct bench *b, const struct run_result *runs, size_t nruns,
                       bool all_ok)
{
    printf("{\"benchmark\":\"init\",\"workers\":%ld,\"ctx\":%s,\"alloc_bytes\":%llu,"
           "\"repeat\":%ld,\"timeout_s\":%ld,\"baseline\":%s,\"all_ok\":%s,\"runs\":[\n",
           b->o.n, b->o.ctx ? "true" : "false", (unsigned long long)b->o.alloc, b->o.repeat,
           b->o.timeout_s, b->o.baseline ? "true" : "false", all_ok ? "true" : "false");
    for (size_t i = 0; i < nruns; i++) {
        const struct cs_bench_summary *s = &runs[i].sum;
        printf(" {\"run\":%d,\"mode\":\"%s\",\"workers\":%zu,\"ok\":%zu,\"failed\":%zu,"
               "\"failures\":{",
               runs[i].run, mode_names[runs[i].mode], s->n, s->ok, s->failed);
        for (int k = 1; k < CS_BENCH_NREASONS; k++)
            printf("%s\"%s\":%zu", k > 1 ? "," : "", reason_keys[k], s->by_reason[k]);
        printf("},");
        json_stats("init_ns", &s->init);
        printf(",");
        json_stats("ctx_ns", &s->ctx);
        printf(",");
        json_stats("offset_ns", &s->offset);
        printf(",\"wall_ns\":%lld,\"identity\":{", (long long)(s->wall > 0 ? s->wall : 0));
        for (int k = 0; k <= CS_BENCH_TIER_NONE; k++)
            printf("%s\"%s\":%zu", k ? "," : "", tier_names[k], s->tiers[k]);
        printf("},\"lock_waits\":%llu,\"p99_worker\":%d}%s\n",
               (unsigned long long)s->lock_waits, s->p99_worker, i + 1 < nruns ? "," : "");
    }
    printf("],\"mean_p99_ns\":{");
    double v[2][2];
    bool have[2][2];
    for (int m = 0; m < 2; m++) {
        printf("%s\"%s\":{", m ? "," : "", mode_names[m]);
        for (int c = 0; c < 2; c++) {
            size_t u;
            have[m][c] = (m == MODE_CUSHARE || b->o.baseline) &&
                         mean_p99(runs, nruns, (enum bench_mode)m, c == 1, &v[m][c], &u);
            printf("%s\"%s\":", c ? "," : "", c ? "ctx" : "init");
            json_number_or_null(v[m][c], have[m][c]);
        }
        printf("}");
    }
    printf("},\"ratio\":{");
    for (int c = 0; c < 2; c++) {
        bool h = have[0][c] && have[1][c] && v[0][c] > 0;
        printf("%s\"%s\":", c ? "," : "", c ? "ctx" : "init");
        if (h)
            printf("%.4f", v[1][c] / v[0][c]);
        else
            printf("null");
    }
    printf("}}\n");
}

/* Forks beyond RLIMIT_NPROC fail: raise the soft limit if N needs it. The
 * parent holds a constant number of descriptors whatever N is, so
 * RLIMIT_NOFILE needs no change. */
static void check_nproc(long n)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)n + 64;
    if (getrlimit(RLIMIT_NPROC, &rl) || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NPROC, &rl);
    if (rl.rlim_cur < want)
        fprintf(stderr, "cushare: bench init: RLIMIT_NPROC is %llu; workers that cannot be "
                        "forked count as failed\n", (unsigned long long)rl.rlim_cur);
}

static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    static const struct option opts[] = {
        {"ctx", no_argument, NULL, 'c'},         {"alloc", required_argument, NULL, 'a'},
        {"repeat", required_argument, NULL, 'r'}, {"csv", required_argument, NULL, 'C'},
        {"baseline", no_argument, NULL, 'b'},    {"json", no_argument, NULL, 'j'},
        {"timeout", required_argument, NULL, 't'}, {"mem", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *cmd = "bench init";
    *o = (struct bench_opts){.n = 0, .repeat = 1, .timeout_s = 600};
    int c;
    uint64_t size;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (cs__parse_int(optarg, 1, BENCH_MAX_WORKERS, &o->n))
                return cs_cli_usage_error(cmd, "-n '%s' must be a worker count from 1 to %d",
                                          optarg, BENCH_MAX_WORKERS);
            break;
        case 'c':
            o->ctx = true;
            break;
        case 'a':
            if (cs__parse_size(optarg, &size) || size == 0)
                return cs_cli_usage_error(cmd, "--alloc '%s' is not a size above 0: use bytes "
                                          "or a k/m/g/t suffix, e.g. 64MiB", optarg);
            o->alloc = size;
            o->ctx = true;
            break;
        case 'r':
            if (cs__parse_int(optarg, 1, 1000, &o->repeat))
                return cs_cli_usage_error(cmd, "--repeat '%s' must be from 1 to 1000", optarg);
            break;
        case 'C':
            o->csv = optarg;
            break;
        case 'b':
            o->baseline = true;
            break;
        case 'j':
            o->json = true;
            break;
        case 't':
            if (cs__parse_int(optarg, 1, 86400, &o->timeout_s))
                return cs_cli_usage_error(cmd, "--timeout '%s' must be seconds from 1 to 86400",
                                          optarg);
            break;
        case 'm':
            if (cs__parse_size_unit(optarg, &size))
                return cs_cli_usage_error(cmd, "--mem '%s' is not a size with a unit: use a "
                                          "k/m/g/t (binary) suffix, e.g. 4GiB, or B for bytes",
                                          optarg);
            o->mem = optarg;
            break;
        case 'h':
            fputs(init_usage, stdout);
            return -1;
        case ':':
            fputs(init_usage, stderr);
            return cs_cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        default:
            fputs(init_usage, stderr);
            return cs_cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        fputs(init_usage, stderr);
        return cs_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    }
    if (!o->n) {
        fputs(init_usage, stderr);
        return cs_cli_usage_error(cmd, "missing -n N (the number of workers)");
    }
    return 0;
}

int cs_bench_init(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof b);
    int rc = parse_opts(argc, argv, &b.o);
    if (rc)
        return rc < 0 ? CS_EXIT_OK : rc;

    ssize_t len = readlink("/proc/self/exe", b.self, sizeof b.self - 1);
    if (len <= 0) {
        fprintf(stderr, "cushare: bench init: cannot find my own binary: %s\n", strerror(errno));
        return CS_EXIT_FAIL;
    }
    b.self[len] = '\0';
    if (cs_cli_find_library("bench init", b.lib, sizeof b.lib))
        return CS_EXIT_FAIL;
    if (b.o.csv) {
        b.csv = fopen(b.o.csv, "w");
        if (!b.csv) {
            fprintf(stderr, "cushare: bench init: cannot write %s: %s\n", b.o.csv,
                    strerror(errno));
            return CS_EXIT_FAIL;
        }
        csv_header(b.csv);
    }
    check_nproc(b.o.n);
    struct sigaction dfl = {.sa_handler = SIG_DFL}, old_chld;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &old_chld); /* an inherited SIG_IGN would auto-reap */

    size_t per = b.o.baseline ? 2 : 1, nruns = 0;
    struct run_result *runs = calloc((size_t)b.o.repeat * per, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "cushare: bench init: out of memory\n");
        return CS_EXIT_FAIL;
    }
    if (!b.o.json)
        printf("cushare bench init: %ld workers, ctx %s, alloc %llu B, repeat %ld, timeout %ld s, "
               "modes %s\n", b.o.n, b.o.ctx ? "yes" : "no", (unsigned long long)b.o.alloc,
               b.o.repeat, b.o.timeout_s,
               b.o.baseline ? "baseline,cushare alternating" : "cushare");
    bool all_ok = true;
    rc = CS_EXIT_OK;
    /* Alternate modes run by run so slow drift of the host hits both. */
    for (long k = 0; k < b.o.repeat && rc == CS_EXIT_OK; k++)
        for (size_t m = 0; m < per; m++) {
            enum bench_mode mode = per == 2 && m == 0 ? MODE_BASELINE : MODE_CUSHARE;
            struct run_result *r = &runs[nruns];
            if (run_once(&b, (int)k + 1, mode, r)) {
                rc = CS_EXIT_FAIL;
                break;
            }
            nruns++;
            if (r->sum.failed)
                all_ok = false;
            if (!b.o.json)
                print_run_text(&b, r);
        }
    if (b.o.json)
        print_json(&b, runs, nruns, all_ok && rc == CS_EXIT_OK);
    else if (nruns)
        print_summary_text(&b, runs, nruns);
    if (b.csv && fclose(b.csv)) {
        fprintf(stderr, "cushare: bench init: writing %s: %s\n", b.o.csv, strerror(errno));
        rc = CS_EXIT_FAIL;
    }
    sigaction(SIGCHLD, &old_chld, NULL);
    free(runs);
    if (rc == CS_EXIT_OK && !all_ok)
        rc = CS_EXIT_FAIL;
    return rc;
}

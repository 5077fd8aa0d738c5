/*
 * One `bench init` run: a private ledger directory, the workers'
 * environment, spawning N workers, the release, reaping and classifying
 * each, and a CSV row per worker.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "core/clock.h"

struct proc {
    pid_t pid;
    bool live, spawn_failed, killed;
    int status;
    uint64_t reaped_ns;
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
                p[i].reaped_ns = (uint64_t)cs__now_ns();
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

enum cs_bench_reason classify(const struct proc *p, const struct bench_slot *s)
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

void cs_bench_csv_header(FILE *f)
{
    fputs("run,mode,worker,pid", f);
    for (int k = 0; k < CS_BENCH_NPHASES; k++)
        fprintf(f, ",%s_ns", cs_bench_phase_names[k]);
    fputs(",init_latency_ns,ctx_latency_ns,result,tier,lock_waits,reason\n", f);
}

void csv_row(FILE *f, int run, enum bench_mode mode, const struct cs_bench_record *w)
{
    fprintf(f, "%d,%s,%d,%d", run, cs_bench_mode_names[mode], w->worker, w->pid);
    for (int k = 0; k < CS_BENCH_NPHASES; k++) {
        if (cs_bench_reached(w, (enum cs_bench_phase)k))
            fprintf(f, ",%lld", (long long)w->t[k]);
        else
            fputs(",", f);
    }
    if (cs_bench_reached(w, CS_BENCH_ENTER) && cs_bench_reached(w, CS_BENCH_RETURNED))
        fprintf(f, ",%lld", (long long)(w->t[CS_BENCH_RETURNED] - w->t[CS_BENCH_ENTER]));
    else
        fputs(",", f);
    if (cs_bench_reached(w, CS_BENCH_CTX))
        fprintf(f, ",%lld", (long long)w->t[CS_BENCH_CTX]);
    else
        fputs(",", f);
    fprintf(f, ",%d,%s,%llu,%s\n", w->result,
            cs_bench_tier_names[w->tier <= CS_BENCH_TIER_NONE ? w->tier : CS_IDENTITY_UNKNOWN],
            (unsigned long long)w->lock_waits, cs_bench_reason_keys[w->reason]);
}

/* One run of N workers in one mode. 0, or -1 when the run could not be set
 * up at all (nothing measured). */
int cs_bench_run_once(struct bench *b, int run, enum bench_mode mode, struct run_result *out)
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
        struct bench_slot *s = cs_bench_slot_at(h, i);
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
    uint64_t deadline = (uint64_t)cs__now_ns() + (uint64_t)b->o.timeout_s * 1000000000ull;
    size_t live = 0;
    int spawn_errno = 0;
    struct worker_setup setup = {.mask = &old_mask, .memfd = memfd, .pipefd = pfd[0]};
    for (size_t i = 0; i < n; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        char *av[] = {b->self, "__worker", memfd_s, pipe_s, idx, NULL};
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
                 __atomic_load_n(&cs_bench_slot_at(h, i)->state, __ATOMIC_ACQUIRE) == SLOT_PENDING))
                gone++;
        if (__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE) + gone >= n || (uint64_t)cs__now_ns() >= deadline)
            break;
        sleep_ns(200000);
    }
    uint64_t release = (uint64_t)cs__now_ns();
    close(pfd[1]);
    pfd[1] = -1;

    while (live) {
        reap(procs, n, &live, WNOHANG);
        if (!live)
            break;
        uint64_t now = (uint64_t)cs__now_ns();
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
        const struct bench_slot *s = cs_bench_slot_at(h, i);
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

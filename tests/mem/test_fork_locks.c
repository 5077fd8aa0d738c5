/*
 * Fork safety: a child forked while another thread
 * of the parent holds one of the library's locks must complete its first
 * CUDA work: initialisation, a context, an allocation and a stream-ordered
 * one, a launch, a refused allocation, a graph-memory trim, a suspend and
 * resume, its watcher's ticks and its exit. Before, a child forked at the
 * wrong moment deadlocked on its first allocation.
 *
 * The argument names the lock (cases[] below); one CTest per lock
 * (tests/mem.cmake). How "the other thread holds the lock at fork" is made
 * certain, not likely: this executable defines pthread_mutex_lock and
 * exports it, so the preloaded library's calls bind to it. Armed with the
 * address range of one lock of libcushare.so (found by name in the
 * library's symbol table), it stops the first thread other than main that
 * acquires it, right after acquiring it: that thread reports "held" on a
 * pipe and blocks until main releases it. Main forks in between. In the
 * child the same wrapper counts acquisitions of the lock, so the child
 * proves it took the very lock that was held at fork (the scenario covers
 * it) instead of merely not needing it.
 *
 * Case graph_charges: the parent's graph-memory charge must not carry into
 * the child, where it hid the child's own graph memory from the budget.
 *
 * No sleeps as synchronisation: pipes and the ledger's run_state; every
 * wait has a deadline scaled by CS_TEST_SCALE.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <linux/futex.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "mem_test.h"

#define CK(call) CHECK_EQ((call), CUDA_SUCCESS)
#define WAIT_MS (10000.0 * cs_test_scale())

/* ---- holding a lock of the library ------------------------------------------ */

static int (*real_lock)(pthread_mutex_t *);
static uintptr_t hold_lo, hold_hi;  /* the lock's bytes; set before arming */
static int hold_armed;              /* atomic: the next acquirer is held */
static int main_tid;                /* never held: it forks */
static uint64_t taken;              /* atomic: acquisitions of the lock in this process */
static int held_pipe[2], go_pipe[2];

int pthread_mutex_lock(pthread_mutex_t *m)
{
    int (*real)(pthread_mutex_t *) = __atomic_load_n(&real_lock, __ATOMIC_ACQUIRE);
    if (!real) {
        real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
        __atomic_store_n(&real_lock, real, __ATOMIC_RELEASE);
    }
    int r = real(m);
    uintptr_t a = (uintptr_t)m;
    if (r || a < __atomic_load_n(&hold_lo, __ATOMIC_ACQUIRE) ||
        a >= __atomic_load_n(&hold_hi, __ATOMIC_ACQUIRE))
        return r;
    __atomic_fetch_add(&taken, 1, __ATOMIC_SEQ_CST);
    if (gettid() != main_tid && __atomic_load_n(&hold_armed, __ATOMIC_ACQUIRE) &&
        __atomic_exchange_n(&hold_armed, 0, __ATOMIC_ACQ_REL)) {
        char c = 'h';
        CHECK_EQ(write(held_pipe[1], &c, 1), 1);
        while (read(go_pipe[0], &c, 1) < 0 && errno == EINTR) {
        }
    }
    return r;
}

/* Whether a read on fd becomes possible (data or EOF) within ms. */
static bool readable_within(int fd, double ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r;
    while ((r = poll(&p, 1, (int)ms)) < 0 && errno == EINTR) {
    }
    return r == 1;
}

/* The address range of `symbol` (defined in source file `file`, or NULL if
 * unique) in the loaded libcushare.so, from the file's symbol table. */
static void find_lock(const char *file, const char *symbol, uintptr_t *lo, uintptr_t *hi)
{
    Dl_info info;
    struct link_map *lm = NULL;
    void *anchor = dlsym(RTLD_DEFAULT, "cushare_phases");
    CHECK(anchor && dladdr1(anchor, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm);
    int fd = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);
    const char *img = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(img != MAP_FAILED);
    close(fd);
    const Elf64_Ehdr *eh = (const void *)img;
    const Elf64_Shdr *sh = (const void *)(img + eh->e_shoff);
    *lo = *hi = 0;
    for (int i = 0; i < eh->e_shnum && !*lo; i++) {
        if (sh[i].sh_type != SHT_SYMTAB)
            continue;
        const Elf64_Sym *sym = (const void *)(img + sh[i].sh_offset);
        const char *str = img + sh[sh[i].sh_link].sh_offset;
        const char *cur = "";
        for (size_t k = 0; k < sh[i].sh_size / sizeof *sym; k++) {
            const char *name = str + sym[k].st_name;
            if (ELF64_ST_TYPE(sym[k].st_info) == STT_FILE) {
                const char *slash = strrchr(name, '/');
                cur = slash ? slash + 1 : name;
            } else if (ELF64_ST_TYPE(sym[k].st_info) == STT_OBJECT && !strcmp(name, symbol) &&
                       (!file || !strcmp(cur, file))) {
                *lo = lm->l_addr + sym[k].st_value;
                *hi = *lo + sym[k].st_size;
                break;
            }
        }
    }
    munmap((void *)img, (size_t)st.st_size);
    if (!*lo) {
        fprintf(stderr, "%s (%s) not in the symbol table of %s: built stripped?\n", symbol,
                file ? file : "any file", info.dli_fname);
        exit(1);
    }
}

/* ---- the cases -------------------------------------------------------------- */

enum setup { FRESH, INITED, CONTEXT, LAUNCHED };
/* What the holding thread does to take the lock; OP_NONE: the library's
 * own watcher thread takes it on its tick. */
enum op { OP_NONE, OP_INIT, OP_RETAIN, OP_ALLOC, OP_ALLOC_ASYNC, OP_TRIM, OP_REFUSED, OP_LAUNCH,
          OP_PARK, OP_VMM };

static const struct fork_case {
    const char *name, *file, *symbol;
    enum setup setup;
    enum op op;
} cases[] = {
    {"init", "init.c", "init_mutex", FRESH, OP_INIT},
    /* cuInit's set-up thread, held in its claim: the parent is mid-set-up */
    {"init_setup", "slot.c", "slot_mu", FRESH, OP_INIT},
    {"contexts", "ctx.c", "ctx_mu", INITED, OP_RETAIN},
    {"track", "track.c", "stripes", CONTEXT, OP_ALLOC},
    {"pools", "pool.c", "recharge_lock", CONTEXT, OP_ALLOC_ASYNC},
    {"graph", "graph.c", "graph_lock", CONTEXT, OP_TRIM},
    {"slots", "slot.c", "slot_mu", CONTEXT, OP_REFUSED},
    {"shares", "share.c", "share_mu", CONTEXT, OP_REFUSED}, /* the reap sweeps shares */
    {"vmm", NULL, "cs__vmm_mu", CONTEXT, OP_VMM},
    {"ledger_guard", "guard.c", "guard_mu", FRESH, OP_INIT},
    {"arm", "limiter.c", "arm_mu", CONTEXT, OP_LAUNCH},
    {"watch_start", "watch.c", "watch_mu", CONTEXT, OP_LAUNCH},
    {"limiter_contexts", "limiter.c", "ctx_mu", CONTEXT, OP_LAUNCH},
    {"limiter_devices", NULL, "cs__lim_devs", LAUNCHED, OP_LAUNCH},
    {"watcher_tick", "watch.c", "run_mu", LAUNCHED, OP_NONE},
    {"tenant", "tenant.c", "T", LAUNCHED, OP_NONE},
    {"park", "gate.c", "hold_mu", LAUNCHED, OP_PARK},
};

static CUdevice dev;
static CUcontext ctx;
static CUfunction kernel;
static struct cs_ledger_header *ledger;

static void init_context(void)
{
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CK(cuModuleLoadData(&mod, "fake"));
    CK(cuModuleGetFunction(&kernel, mod, "k"));
}

static void launch(void)
{
    CK(cuLaunchKernel(kernel, 8, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuCtxSynchronize());
}

static void setup(enum setup s)
{
    if (s == FRESH)
        return;
    if (s == INITED) {
        CK(cuInit(0));
        CK(cuDeviceGet(&dev, 0));
        return;
    }
    init_context();
    if (s == LAUNCHED)
        launch(); /* arms the limiter, starts its watcher */
}

static struct cs_ledger_slot *my_slot(void)
{
    if (!ledger)
        ledger = ledger_map();
    struct cs_ledger_slot *slots = (void *)((char *)ledger + ledger->header_size);
    for (uint32_t i = 0; i < ledger->slot_count; i++)
        if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == CS_SLOT_LIVE &&
            slots[i].pid == getpid())
            return &slots[i];
    return NULL;
}

static void resume(struct cs_ledger_slot *s)
{
    __atomic_store_n(&s->run_request, (uint32_t)CS_RUN, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &s->run_request, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* cuMemCreate and cuMemRelease of 2 MiB: the VMM records' lock (vmm.h). */
static void vmm_roundtrip(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, 2 * MiB, &prop, 0));
    CK(cuMemRelease(h));
}

static void *holder(void *arg)
{
    const struct fork_case *c = arg;
    CUdeviceptr p;
    size_t free_b, total_b;
    if (ctx)
        CK(cuCtxSetCurrent(ctx));
    switch (c->op) {
    case OP_INIT: CK(cuInit(0)); break;
    case OP_RETAIN: CK(cuDevicePrimaryCtxRetain(&ctx, dev)); break;
    case OP_ALLOC: CK(cuMemAlloc_v2(&p, MiB)); break;
    case OP_ALLOC_ASYNC: CK(cuMemAllocAsync(&p, MiB, NULL)); break;
    case OP_TRIM: CK(cuDeviceGraphMemTrim(dev)); break;
    case OP_REFUSED: CHECK_EQ(cuMemAlloc_v2(&p, 65 * MiB), CUDA_ERROR_OUT_OF_MEMORY); break;
    case OP_LAUNCH: launch(); break;
    case OP_PARK: CK(cuMemGetInfo_v2(&free_b, &total_b)); break; /* parks: we are suspended */
    case OP_VMM: vmm_roundtrip(); break;
    case OP_NONE: break;
    }
    return NULL;
}

/* ---- the child -------------------------------------------------------------- */

static void *resumer(void *arg)
{
    struct cs_ledger_slot *s = arg;
    struct timespec t0, now, nap = {.tv_nsec = 1000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* a condition, polled: run_state is not a futex word */
        if (__atomic_load_n(&s->run_state, __ATOMIC_ACQUIRE) == 1) {
            resume(s);
            return NULL;
        }
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - t0.tv_sec) * 1e3 + (now.tv_nsec - t0.tv_nsec) / 1e6 < WAIT_MS);
    fprintf(stderr, "child: a suspended call never parked\n");
    _exit(3);
}

/* Suspends this process (its own slot) and resumes it once a call has
 * parked: the suspend hold takes hold_mu and the slot's run_state. */
static void park_once(void)
{
    struct cs_ledger_slot *s = my_slot();
    CHECK(s != NULL);
    __atomic_store_n(&s->run_request, (uint32_t)CS_SUSPEND, __ATOMIC_SEQ_CST);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, resumer, s), 0);
    size_t free_b, total_b;
    CK(cuMemGetInfo_v2(&free_b, &total_b)); /* an intercepted call: parks */
    CHECK_EQ(pthread_join(t, NULL), 0);
}

static void wait_taken(const struct fork_case *c)
{
    for (double waited = 0; !__atomic_load_n(&taken, __ATOMIC_SEQ_CST); waited += 1) {
        if (waited > WAIT_MS) {
            fprintf(stderr, "child: never took %s (%s) in %.0f ms\n", c->symbol,
                    c->file ? c->file : "", WAIT_MS);
            _exit(4);
        }
        struct timespec nap = {.tv_nsec = 1000000};
        nanosleep(&nap, NULL);
    }
}

static void child_work(const struct fork_case *c)
{
    __atomic_store_n(&taken, 0, __ATOMIC_SEQ_CST);
    ctx = NULL;
    init_context();
    CUdeviceptr p;
    CK(cuMemAlloc_v2(&p, MiB));
    CK(cuMemFree_v2(p));
    CK(cuMemAllocAsync(&p, MiB, NULL));
    CK(cuMemFreeAsync(p, NULL));
    launch();
    CHECK_EQ(cuMemAlloc_v2(&p, 65 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CK(cuDeviceGraphMemTrim(dev));
    vmm_roundtrip();
    park_once();
    wait_taken(c); /* the watcher's locks: on its next tick */
    CK(cuDevicePrimaryCtxRelease_v2(dev));
    printf("child: first CUDA work done, %s taken %llu times\n", c->symbol,
           (unsigned long long)__atomic_load_n(&taken, __ATOMIC_SEQ_CST));
    /* exit(), not _exit(): the exit handlers take locks too (run_mu). */
}

/* Forks; the child runs `work` and exits. The child's exit within the
 * deadline is the test: EOF on a pipe only the child holds. */
static void fork_and_wait(const char *what, void (*work)(const void *), const void *arg)
{
    int done[2];
    CHECK_EQ(pipe(done), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(done[0]);
        work(arg);
        exit(0);
    }
    close(done[1]);
    if (!readable_within(done[0], WAIT_MS)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fprintf(stderr, "the fork child deadlocked (%s): no exit in %.0f ms\n", what, WAIT_MS);
        exit(1);
    }
    close(done[0]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the fork child failed (%s): status %#x\n", what, status);
        exit(1);
    }
}

static void child_work_case(const void *arg)
{
    child_work(arg);
}

static void run_lock_case(const struct fork_case *c)
{
    uintptr_t lo, hi;
    find_lock(c->file, c->symbol, &lo, &hi);
    setup(c->setup);
    CHECK_EQ(pipe(held_pipe), 0);
    CHECK_EQ(pipe(go_pipe), 0);
    __atomic_store_n(&hold_lo, lo, __ATOMIC_RELEASE);
    __atomic_store_n(&hold_hi, hi, __ATOMIC_RELEASE);
    __atomic_store_n(&hold_armed, 1, __ATOMIC_RELEASE);
    struct cs_ledger_slot *me = NULL;
    if (c->op == OP_PARK) {
        me = my_slot();
        CHECK(me != NULL);
        __atomic_store_n(&me->run_request, (uint32_t)CS_SUSPEND, __ATOMIC_SEQ_CST);
    }
    pthread_t t;
    if (c->op != OP_NONE)
        CHECK_EQ(pthread_create(&t, NULL, holder, (void *)c), 0);
    if (!readable_within(held_pipe[0], WAIT_MS)) {
        fprintf(stderr, "no thread took %s in %.0f ms\n", c->symbol, WAIT_MS);
        exit(1);
    }
    printf("%s (%s) held by another thread; forking\n", c->symbol, c->file ? c->file : "");
    char what[128];
    snprintf(what, sizeof what, "%s held at fork", c->symbol);
    fork_and_wait(what, child_work_case, c);
    char go = 'g';
    CHECK_EQ(write(go_pipe[1], &go, 1), 1);
    if (me)
        resume(me);
    if (c->op != OP_NONE)
        CHECK_EQ(pthread_join(t, NULL), 0);
    printf("%s: the child completed its first CUDA work and exited\n", c->name);
}

/* ---- graph charges ---------------------------------------------------------- */

static void graph_launch(void)
{
    CUgraph g;
    CUgraphNode n;
    CUgraphExec e;
    CK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS np = {
        .poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                      .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
        .bytesize = 8 * MiB};
    CK(cuGraphAddMemAllocNode(&n, g, NULL, 0, &np));
    CK(cuGraphInstantiateWithFlags(&e, g, 0));
    CK(cuGraphLaunch(e, NULL));
    CK(cuCtxSynchronize());
    CK(cuGraphExecDestroy(e));
    CK(cuGraphDestroy(g));
}

static void graph_child(const void *arg)
{
    (void)arg;
    init_context();
    graph_launch();
    uint64_t mine = slot_bytes(ledger, getpid(), 0, CS_MEM_GRAPH);
    printf("child: its graph memory is charged %llu bytes\n", (unsigned long long)mine);
    if (mine < 8 * MiB) {
        fprintf(stderr, "child: its own 8 MiB of graph memory went uncharged: the parent's "
                "charge carried into the child\n");
        _exit(5);
    }
    CK(cuDeviceGraphMemTrim(dev));
    CHECK_EQ_U(slot_bytes(ledger, getpid(), 0, CS_MEM_GRAPH), 0);
}

static void run_graph_charges(void)
{
    setup(CONTEXT);
    ledger = ledger_map();
    graph_launch();
    uint64_t parent = slot_bytes(ledger, getpid(), 0, CS_MEM_GRAPH);
    CHECK_GE(parent, 8 * MiB);
    fork_and_wait("graph charges", graph_child, NULL);
    CHECK_EQ_U(slot_bytes(ledger, getpid(), 0, CS_MEM_GRAPH), parent);
    printf("graph_charges: the child charged its own graph memory; the parent's %llu bytes "
           "stayed the parent's\n", (unsigned long long)parent);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    main_tid = gettid();
    /* A fresh ledger and simulated device for every run. */
    unlink(getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    unlink(getenv("FAKECUDA_STATE"));
    if (!strcmp(argv[1], "graph_charges")) {
        run_graph_charges();
        return 0;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(argv[1], cases[i].name)) {
            run_lock_case(&cases[i]);
            return 0;
        }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}

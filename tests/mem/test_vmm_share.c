/*
 * mem_vmm_share: memory shared between processes is charged exactly while
 * the device holds it. After every step, and after a SIGKILL at
 * every step, the tenant's ledger must equal what the fake device holds
 * (tests/fakecuda models the driver's reference counting: handles,
 * retains, mappings, imports, IPC opens, in every process), and the
 * tenant's own views (cuMemGetInfo, NVML) must show it.
 *
 * Budget 64 MiB; contexts cost nothing on this fake device, so the device
 * holds exactly the tenant's allocations.
 */
#include "share_worker.h"

#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/kcmp.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>

static struct cs_ledger_header *L;
static struct fakecuda_state *S;
static struct nvml_api N;
static nvmlDevice_t D0;

/* Settles (a view reaps dead slots and frees unheld shares; the fake
 * reaps dead processes) and compares. */
static void same(const char *step, uint64_t want_mib)
{
    size_t free_b, total;
    CHECK_EQ(cuMemGetInfo_v2(&free_b, &total), CUDA_SUCCESS);
    uint64_t dev = fakecuda_load(&S->dev[0].used);
    uint64_t led = ledger_used(L, 0);
    nvmlMemory_t nv = nvml_memory(&N, D0);
    if (dev != led || led != want_mib * MiB || total - free_b != led || nv.used != led) {
        fprintf(stderr, "%s: device holds %llu MiB, ledger %llu MiB, view %llu MiB, NVML %llu "
                "MiB, expected %llu MiB\n", step, (unsigned long long)(dev / MiB),
                (unsigned long long)(led / MiB), (unsigned long long)((total - free_b) / MiB),
                (unsigned long long)(nv.used / MiB), (unsigned long long)want_mib);
        exit(1);
    }
}

#define OK(call) CHECK_EQ((call), CUDA_SUCCESS)

/* Create, map, release, retain, unmap in one process: the charge stays
 * until the last reference (the mapping or the retain) goes. */
static void in_process(void)
{
    struct sw_proc a = sw_start();
    OK(sw_do(&a, SW_CREATE, 0, 16, -1, NULL, NULL));
    same("create", 16);
    OK(sw_do(&a, SW_MAP, 0, 0, -1, NULL, NULL));
    same("map", 16);
    OK(sw_do(&a, SW_RELEASE, 0, 0, -1, NULL, NULL));
    same("release while mapped", 16);
    OK(sw_do(&a, SW_RETAIN, 0, 0, -1, NULL, NULL));
    OK(sw_do(&a, SW_RETAIN, 0, 0, -1, NULL, NULL));
    same("retain twice", 16);
    OK(sw_do(&a, SW_UNMAP, 0, 0, -1, NULL, NULL));
    same("unmap while retained", 16);
    OK(sw_do(&a, SW_UNRETAIN, 0, 0, -1, NULL, NULL));
    same("one retain released", 16);
    OK(sw_do(&a, SW_UNRETAIN, 0, 0, -1, NULL, NULL));
    same("last retain released", 0);
    /* Host-location memory: the driver's business, no device charge, no crash. */
    OK(sw_do(&a, SW_CREATE_HOST, 1, 32, -1, NULL, NULL));
    same("host location", 0);
    /* The same export imported twice in its own process: one allocation. */
    int fd;
    OK(sw_do(&a, SW_CREATE, 2, 8, -1, NULL, NULL));
    /* No fabric here: the driver's answer passes through, nothing moves. */
    CHECK_EQ(sw_do(&a, SW_EXPORT_FABRIC, 2, 0, -1, NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
    same("fabric export refused", 8);
    OK(sw_do(&a, SW_EXPORT, 2, 0, -1, NULL, &fd));
    OK(sw_do(&a, SW_IMPORT, 3, 8, fd, NULL, NULL));
    OK(sw_do(&a, SW_IMPORT, 4, 8, fd, NULL, NULL));
    close(fd);
    same("own export imported twice", 8);
    OK(sw_do(&a, SW_RELEASE, 2, 0, -1, NULL, NULL));
    OK(sw_do(&a, SW_RELEASE, 3, 0, -1, NULL, NULL));
    same("two of three handles released", 8);
    OK(sw_do(&a, SW_FORK, 0, 0, -1, NULL, NULL));
    same("a fork child came and went", 8);
    OK(sw_do(&a, SW_RELEASE, 4, 0, -1, NULL, NULL));
    same("last handle released", 0);
    sw_exit(&a);
    printf("in one process: charged until the last handle, retain or mapping\n");
}

/* The creator (a) and an importer (b) share 32 MiB over SCM_RIGHTS. The
 * steps in order; `who` says which process acts. With kill_at = k, the
 * process acting at step k is SIGKILLed instead, and the survivor goes on
 * with its own steps. Expected holdings follow the driver: memory lives
 * while either process holds a handle or a mapping of it, or while the
 * exported fd is open anywhere (an fd is a reference): this process closes
 * its copy after the last import, while the creator still holds the
 * memory (fd_late below covers memory only an fd keeps). */
struct step {
    char who;  /* 'a' or 'b' */
    char op;
};
static const struct step VMM_STEPS[] = {
    {'a', SW_CREATE}, {'a', SW_MAP}, {'a', SW_EXPORT}, {'b', SW_IMPORT}, {'b', SW_MAP},
    {'b', SW_IMPORT}, /* a second import of the same fd: the same allocation */
    {'a', SW_RELEASE}, {'a', SW_UNMAP}, {'a', SW_EXIT}, {'b', SW_UNMAP}, {'b', SW_RELEASE},
    {'b', SW_RELEASE}, {'b', SW_EXIT},
};
#define NSTEPS (int)(sizeof VMM_STEPS / sizeof VMM_STEPS[0])

/* References each process holds, as the driver counts them. */
struct refs {
    int handles, maps;
    bool alive;
};

static bool holds(const struct refs *r)
{
    return r->alive && (r->handles || r->maps);
}

static void vmm_share(int kill_at)
{
    int last_import = 0;
    for (int k = 0; k < NSTEPS; k++)
        if (VMM_STEPS[k].op == SW_IMPORT)
            last_import = k;
    struct sw_proc p[2] = {sw_start(), sw_start()};
    struct refs r[2] = {{.alive = true}, {.alive = true}};
    bool exists = false;
    int fd = -1;
    char label[96];
    for (int k = 0; k < NSTEPS; k++) {
        int w = VMM_STEPS[k].who == 'a' ? 0 : 1;
        char op = VMM_STEPS[k].op;
        if (k > last_import && fd >= 0) {
            close(fd);
            fd = -1;
        }
        if (!r[w].alive)
            continue;
        snprintf(label, sizeof label, "kill at %d, step %d (%c %c)", kill_at, k,
                 VMM_STEPS[k].who, op);
        if (k == kill_at) {
            sw_kill(&p[w]);
            r[w].alive = false;
        } else if (op == SW_EXIT) {
            sw_exit(&p[w]);
            r[w].alive = false;
        } else if (op == SW_IMPORT) {
            /* The exporter may be gone with every reference: then the
             * driver has freed the memory and refuses the import. */
            CUresult res = sw_do(&p[w], op, 1 + r[w].handles, 32, fd, NULL, NULL);
            if (res != (exists ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE)) {
                fprintf(stderr, "%s: import returned %d\n", label, (int)res);
                exit(1);
            }
            if (res == CUDA_SUCCESS)
                r[w].handles++;
        } else if (w == 1 && (op == SW_MAP || op == SW_UNMAP || op == SW_RELEASE)) {
            if (!r[w].handles && !r[w].maps)
                continue; /* its import was refused: nothing to do */
            int slot = op == SW_RELEASE ? r[w].handles : 1;
            OK(sw_do(&p[w], op, slot, 0, -1, NULL, NULL));
            r[w].maps += op == SW_MAP ? 1 : op == SW_UNMAP ? -1 : 0;
            r[w].handles -= op == SW_RELEASE;
        } else {
            OK(sw_do(&p[w], op, 0, 32, -1, NULL, op == SW_EXPORT ? &fd : NULL));
            r[w].handles += op == SW_CREATE ? 1 : op == SW_RELEASE ? -1 : 0;
            r[w].maps += op == SW_MAP ? 1 : op == SW_UNMAP ? -1 : 0;
        }
        exists = holds(&r[0]) || holds(&r[1]);
        same(label, exists ? 32 : 0);
    }
    if (fd >= 0)
        close(fd);
    for (int w = 0; w < 2; w++)
        if (r[w].alive)
            sw_exit(&p[w]);
    same("all gone", 0);
}

/* The driver's exported fds are all opens of one file (/dev/nvidiactl on
 * the H200; the fake's control file): two allocations exported have the
 * same inode and must still be told apart. a exports 16 and 8 MiB; b
 * imports the 8, c the 16 (whichever of the two a matcher finds first by
 * inode, one importer gets the wrong one); each must stay charged exactly
 * while held. */
static void told_apart(void)
{
    struct sw_proc a = sw_start(), b = sw_start(), c = sw_start();
    int fx = -1, fy = -1;
    OK(sw_do(&a, SW_CREATE, 0, 16, -1, NULL, NULL));
    OK(sw_do(&a, SW_CREATE, 1, 8, -1, NULL, NULL));
    OK(sw_do(&a, SW_EXPORT, 0, 0, -1, NULL, &fx));
    OK(sw_do(&a, SW_EXPORT, 1, 0, -1, NULL, &fy));
    struct stat sx, sy;
    CHECK_EQ(fstat(fx, &sx), 0);
    CHECK_EQ(fstat(fy, &sy), 0);
    if (sx.st_dev != sy.st_dev || sx.st_ino != sy.st_ino) {
        fprintf(stderr, "the fake's exported fds of two allocations differ in inode: it no "
                "longer behaves like the driver\n");
        exit(1);
    }
    OK(sw_do(&b, SW_IMPORT, 1, 8, fy, NULL, NULL));
    OK(sw_do(&b, SW_MAP, 1, 0, -1, NULL, NULL));
    OK(sw_do(&c, SW_IMPORT, 0, 16, fx, NULL, NULL));
    close(fx); /* an fd is a reference: ours go before the counting starts */
    close(fy);
    same("two exports of one inode, each imported by another process", 24);
    OK(sw_do(&a, SW_RELEASE, 1, 0, -1, NULL, NULL));
    same("the creator let go of the 8 MiB", 24);
    sw_exit(&a);
    same("the creator exited: both stay with their importers", 24);
    sw_exit(&c);
    same("the 16 MiB importer exited", 8);
    OK(sw_do(&b, SW_UNMAP, 1, 0, -1, NULL, NULL));
    OK(sw_do(&b, SW_RELEASE, 1, 0, -1, NULL, NULL));
    same("the 8 MiB importer let go", 0);
    sw_exit(&b);
}

/* How many identity markers (src/mem/vmm_fdid.c) of process pid lie in
 * the share directory. */
static int markers_of(pid_t pid)
{
    const char *dir = getenv("CUSHARE_SHARE_DIR");
    DIR *d = opendir(dir && *dir ? dir : "/tmp/vgpulock");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned uid;
        unsigned long long key;
        int p, fd;
        if (sscanf(e->d_name, "cushare-fdid-%u-%llx-%d-%d", &uid, &key, &p, &fd) == 4 &&
            p == pid)
            n++;
    }
    closedir(d);
    return n;
}

/* An exported fd is a reference (the H200's driver): the creator lets go
 * of everything and exits while the fd is in flight (here: held by this
 * process, which no library counts). Nobody holds it then, so nobody is
 * charged; the importer is, from its first mapping (which says the size)
 * until it lets go. */
static void fd_late(void)
{
    struct sw_proc a = sw_start(), b = sw_start();
    int fd = -1;
    OK(sw_do(&a, SW_CREATE, 0, 16, -1, NULL, NULL));
    OK(sw_do(&a, SW_EXPORT, 0, 0, -1, NULL, &fd));
    OK(sw_do(&a, SW_RELEASE, 0, 0, -1, NULL, NULL));
    sw_exit(&a);
    size_t f, t;
    CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS); /* settles */
    CHECK_EQ(fakecuda_load(&S->dev[0].used), 16 * MiB); /* the fd keeps it */
    CHECK_EQ(ledger_used(L, 0), 0);
    OK(sw_do(&b, SW_IMPORT, 1, 16, fd, NULL, NULL));
    OK(sw_do(&b, SW_IMPORT, 2, 16, fd, NULL, NULL)); /* again: the same allocation */
    close(fd);
    OK(sw_do(&b, SW_MAP, 1, 0, -1, NULL, NULL));
    same("imported after the creator left, mapped", 16);
    OK(sw_do(&b, SW_RELEASE, 1, 0, -1, NULL, NULL));
    OK(sw_do(&b, SW_RELEASE, 2, 0, -1, NULL, NULL));
    same("handles released, still mapped", 16);
    OK(sw_do(&b, SW_UNMAP, 1, 0, -1, NULL, NULL));
    same("late importer let go", 0);
    /* Again, the creator killed (its marker stays behind), and the
     * importer dies holding it. */
    struct sw_proc c = sw_start();
    OK(sw_do(&c, SW_CREATE, 0, 8, -1, NULL, NULL));
    OK(sw_do(&c, SW_EXPORT, 0, 0, -1, NULL, &fd));
    pid_t dead = c.pid;
    sw_kill(&c);
    OK(sw_do(&b, SW_IMPORT, 3, 8, fd, NULL, NULL));
    close(fd);
    OK(sw_do(&b, SW_MAP, 3, 0, -1, NULL, NULL));
    same("a second late import", 8);
    sw_kill(&b);
    same("the late importer killed", 0);
    /* The killed creator's identity marker outlived it (nobody locks it
     * any more); a process's first export sweeps such markers of its uid. */
    CHECK(markers_of(dead) > 0);
    struct sw_proc d = sw_start();
    OK(sw_do(&d, SW_CREATE, 0, 2, -1, NULL, NULL));
    OK(sw_do(&d, SW_EXPORT, 0, 0, -1, NULL, &fd));
    close(fd);
    CHECK_EQ(markers_of(dead), 0);
    sw_exit(&d);
    same("the sweeping exporter exited", 0);
}

/* Where a seccomp filter refuses kcmp (Docker's default profile without
 * CAP_SYS_PTRACE), no import can be matched with its exporter: each
 * importer is charged as well (fail closed: an over-count, never less).
 * A child of ours installs such a filter; its workers inherit it. */
static void kcmp_refused(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_kcmp, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
        CHECK_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        CHECK_EQ(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
        CHECK(syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, 0, 0) < 0 && errno == EPERM);
        struct sw_proc a = sw_start(), b = sw_start();
        int fd = -1;
        OK(sw_do(&a, SW_CREATE, 0, 8, -1, NULL, NULL));
        OK(sw_do(&a, SW_EXPORT, 0, 0, -1, NULL, &fd));
        OK(sw_do(&b, SW_IMPORT, 1, 8, fd, NULL, NULL));
        close(fd);
        OK(sw_do(&b, SW_MAP, 1, 0, -1, NULL, NULL));
        CHECK_EQ(fakecuda_load(&S->dev[0].used), 8 * MiB);
        CHECK_EQ(ledger_used(L, 0), 16 * MiB); /* creator and importer */
        OK(sw_do(&b, SW_UNMAP, 1, 0, -1, NULL, NULL));
        OK(sw_do(&b, SW_RELEASE, 1, 0, -1, NULL, NULL));
        CHECK_EQ(ledger_used(L, 0), 8 * MiB);
        sw_exit(&b);
        OK(sw_do(&a, SW_RELEASE, 0, 0, -1, NULL, NULL));
        CHECK_EQ(ledger_used(L, 0), 0);
        sw_exit(&a);
        _exit(0);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    same("kcmp refused: all let go", 0);
}

/* Legacy IPC: a's cuMemAlloc opened twice by b (one pointer, counted). */
static const struct step IPC_STEPS[] = {
    {'a', SW_IPC_ALLOC}, {'a', SW_IPC_GET}, {'b', SW_IPC_OPEN}, {'b', SW_IPC_OPEN},
    {'b', SW_IPC_CLOSE}, {'a', SW_FREE}, {'a', SW_EXIT}, {'b', SW_IPC_CLOSE}, {'b', SW_EXIT},
};
#define NIPC (int)(sizeof IPC_STEPS / sizeof IPC_STEPS[0])

static void ipc_share(int kill_at)
{
    struct sw_proc p[2] = {sw_start(), sw_start()};
    struct refs r[2] = {{.alive = true}, {.alive = true}};
    CUipcMemHandle h;
    memset(&h, 0, sizeof h);
    bool exported = false;
    char label[96];
    for (int k = 0; k < NIPC; k++) {
        int w = IPC_STEPS[k].who == 'a' ? 0 : 1;
        char op = IPC_STEPS[k].op;
        if (!r[w].alive)
            continue;
        snprintf(label, sizeof label, "ipc kill at %d, step %d (%c %c)", kill_at, k,
                 IPC_STEPS[k].who, op);
        if (k == kill_at) {
            sw_kill(&p[w]);
            r[w].alive = false;
        } else if (op == SW_EXIT) {
            sw_exit(&p[w]);
            r[w].alive = false;
        } else if (op == SW_IPC_OPEN) {
            CUresult res = sw_do(&p[w], op, 0, 0, -1, &h, NULL);
            bool live = holds(&r[0]);
            if (res != (exported && live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE)) {
                fprintf(stderr, "%s: open returned %d\n", label, (int)res);
                exit(1);
            }
            r[w].handles += res == CUDA_SUCCESS;
        } else if (op == SW_IPC_CLOSE) {
            if (!r[w].handles)
                continue;
            OK(sw_do(&p[w], op, 0, 0, -1, NULL, NULL));
            r[w].handles--;
        } else {
            OK(sw_do(&p[w], op, 0, 8, -1, op == SW_IPC_GET ? &h : NULL, NULL));
            exported |= op == SW_IPC_GET;
            r[w].handles += op == SW_IPC_ALLOC ? 1 : op == SW_FREE ? -1 : 0;
        }
        same(label, holds(&r[0]) || holds(&r[1]) ? 8 : 0);
    }
    for (int w = 0; w < 2; w++)
        if (r[w].alive)
            sw_exit(&p[w]);
    same("ipc: all gone", 0);
}

/* `cushare status --json` says how much of used shares hold. */
static void status_shows_shared(uint64_t mib)
{
    char cmd[8400], out[16384], want[64];
    snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD %s/cushare status --json --no-reap %s",
             getenv("CS_BUILD_DIR"), getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    CHECK_EQ(pclose(f), 0);
    snprintf(want, sizeof want, "\"shared\":%llu}", (unsigned long long)(mib * MiB));
    if (!strstr(out, want)) {
        fprintf(stderr, "cushare status lacks %s: %s\n", want, out);
        exit(1);
    }
}

/* While an importer keeps 32 MiB alive after its creator exited, the
 * budget still holds them: 48 more do not fit in 64. */
static void budget_held(void)
{
    struct sw_proc a = sw_start(), b = sw_start(), c = sw_start();
    int fd;
    OK(sw_do(&a, SW_CREATE, 0, 32, -1, NULL, NULL));
    OK(sw_do(&a, SW_EXPORT, 0, 0, -1, NULL, &fd));
    OK(sw_do(&b, SW_IMPORT, 1, 32, fd, NULL, NULL));
    close(fd);
    OK(sw_do(&b, SW_MAP, 1, 0, -1, NULL, NULL));
    sw_exit(&a);
    same("creator exited, importer maps", 32);
    status_shows_shared(32);
    CHECK_EQ(sw_do(&c, SW_CREATE, 0, 48, -1, NULL, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    OK(sw_do(&c, SW_CREATE, 0, 32, -1, NULL, NULL));
    same("the rest of the budget", 64);
    sw_kill(&b);
    same("importer killed", 32);
    OK(sw_do(&c, SW_RELEASE, 0, 0, -1, NULL, NULL));
    same("nothing left", 0);
    sw_exit(&c);
    printf("a creator's exit keeps the importer's 32 MiB charged; the importer's death frees them\n");
}

/* Across tenants (docs/accounting.md): A creates and pays; B imports and
 * stands by (charged nothing: never twice); when A lets go (exits, or is
 * killed) B's next view takes the charge over, whatever B's limit; when
 * B's holder dies, B's next process frees it. */
static void across_tenants(const char *self, bool kill_creator)
{
    char lb_path[4200];
    snprintf(lb_path, sizeof lb_path, "%s.b", getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    unlink(lb_path);
    struct sw_proc a = sw_start(), b = sw_start_tenant(self, lb_path);
    int fd;
    OK(sw_do(&a, SW_CREATE, 0, 32, -1, NULL, NULL));
    OK(sw_do(&a, SW_MAP, 0, 0, -1, NULL, NULL));
    OK(sw_do(&a, SW_EXPORT, 0, 0, -1, NULL, &fd));
    OK(sw_do(&b, SW_IMPORT, 1, 32, fd, NULL, NULL));
    close(fd);
    OK(sw_do(&b, SW_MAP, 1, 0, -1, NULL, NULL));
    OK(sw_do(&b, SW_VIEW, 0, 0, -1, NULL, NULL));
    struct cs_ledger_header *LB = ledger_map_path(lb_path);
    same("tenant A pays", 32);
    CHECK_EQ_U(ledger_used(LB, 0), 0);
    if (kill_creator) {
        sw_kill(&a);
    } else {
        OK(sw_do(&a, SW_RELEASE, 0, 0, -1, NULL, NULL));
        OK(sw_do(&a, SW_UNMAP, 0, 0, -1, NULL, NULL));
        sw_exit(&a);
    }
    OK(sw_do(&b, SW_VIEW, 0, 0, -1, NULL, NULL));
    size_t f, t;
    CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    CHECK_EQ_U(ledger_used(LB, 0), 32 * MiB);
    CHECK_EQ_U(fakecuda_load(&S->dev[0].used), 32 * MiB);
    /* B is now over a 16 MiB share of its budget: 40 more do not fit in 64. */
    CHECK_EQ(sw_do(&b, SW_CREATE, 2, 40, -1, NULL, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    sw_kill(&b);
    struct sw_proc c = sw_start_tenant(self, lb_path);
    OK(sw_do(&c, SW_VIEW, 0, 0, -1, NULL, NULL));
    CHECK_EQ_U(ledger_used(LB, 0), 0);
    same("tenant B's holder killed", 0);
    sw_exit(&c);
    munmap(LB, CS_LEDGER_FILE_SIZE);
}

/* The same across tenants for legacy IPC (torch.multiprocessing between
 * slices): A's cuMemAlloc opened by B; A frees and exits, B takes over. */
static void across_tenants_ipc(const char *self)
{
    char lb_path[4200];
    snprintf(lb_path, sizeof lb_path, "%s.b", getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    unlink(lb_path);
    struct sw_proc a = sw_start(), b = sw_start_tenant(self, lb_path);
    CUipcMemHandle h;
    memset(&h, 0, sizeof h);
    OK(sw_do(&a, SW_IPC_ALLOC, 0, 24, -1, NULL, NULL));
    OK(sw_do(&a, SW_IPC_GET, 0, 0, -1, &h, NULL));
    OK(sw_do(&a, SW_IPC_GET, 0, 0, -1, &h, NULL)); /* again: the same memory */
    OK(sw_do(&b, SW_IPC_OPEN, 0, 0, -1, &h, NULL));
    OK(sw_do(&b, SW_IPC_OPEN, 0, 0, -1, &h, NULL));
    OK(sw_do(&b, SW_VIEW, 0, 0, -1, NULL, NULL));
    struct cs_ledger_header *LB = ledger_map_path(lb_path);
    same("ipc: tenant A pays", 24);
    CHECK_EQ_U(ledger_used(LB, 0), 0);
    OK(sw_do(&a, SW_FREE, 0, 0, -1, NULL, NULL));
    sw_exit(&a);
    OK(sw_do(&b, SW_VIEW, 0, 0, -1, NULL, NULL));
    size_t f, t;
    CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    CHECK_EQ_U(ledger_used(LB, 0), 24 * MiB);
    CHECK_EQ_U(fakecuda_load(&S->dev[0].used), 24 * MiB);
    OK(sw_do(&b, SW_IPC_CLOSE, 0, 0, -1, NULL, NULL));
    OK(sw_do(&b, SW_VIEW, 0, 0, -1, NULL, NULL));
    CHECK_EQ_U(ledger_used(LB, 0), 24 * MiB);
    OK(sw_do(&b, SW_IPC_CLOSE, 0, 0, -1, NULL, NULL));
    CHECK_EQ_U(ledger_used(LB, 0), 0);
    same("ipc: last close in tenant B", 0);
    sw_exit(&b);
    munmap(LB, CS_LEDGER_FILE_SIZE);
}

int main(int argc, char **argv)
{
    sw_worker_main(argc, argv);
    context_on_device0();
    L = ledger_map();
    S = fake_state();
    N = nvml_open();
    CHECK_EQ(N.by_index(0, &D0), NVML_SUCCESS);
    same("start", 0);
    in_process();
    budget_held();
    for (int k = -1; k < NSTEPS; k++)
        vmm_share(k);
    printf("VMM share over SCM_RIGHTS: ledger = device after each of %d steps, with no kill "
           "and with a SIGKILL at each\n", NSTEPS);
    told_apart();
    printf("two allocations exported as fds of one inode: told apart (by open file "
           "description)\n");
    fd_late();
    printf("an fd whose creator let go and exited: charged to its importer while it holds "
           "it\n");
    kcmp_refused();
    printf("kcmp refused by seccomp: each importer charged as well (over-count, never "
           "less)\n");
    for (int k = -1; k < NIPC; k++)
        ipc_share(k);
    printf("legacy IPC: ledger = device after each of %d steps, with no kill and with a "
           "SIGKILL at each\n", NIPC);
    across_tenants(argv[0], false);
    across_tenants(argv[0], true);
    across_tenants_ipc(argv[0]);
    printf("across tenants: the creator's tenant pays, the importer's takes over when it "
           "exits or is killed, nobody pays twice\n");
    return 0;
}

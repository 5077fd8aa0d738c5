/*
 * A CUDA program that does nothing to be sliced: it is not linked against
 * libcuda, it reaches the driver only through dlopen(LIBCUDA) (a soname or
 * an absolute path) and dlsym, and it never sets LD_PRELOAD. Whether
 * cushare is in the process is up to the deployment (/etc/ld.so.preload,
 * a CDI spec), which is what the enforcement, CDI and library-replacement
 * tests check.
 *
 *   slice_probe LIBCUDA OK_MIB OVER_MIB [HOLD_DIR]
 *
 * Allocates OK_MIB (must succeed), then OVER_MIB more. One line on stdout:
 *   probe pid=P preload=<LD_PRELOAD or -> cushare=<yes|no> ok=<CUresult> over=<CUresult> total=<bytes>
 * With HOLD_DIR it then writes HOLD_DIR/ready.<pid>, waits (a condition,
 * deadline scaled by CS_TEST_SCALE) for HOLD_DIR/go, and calls into the
 * driver once more (cuMemGetInfo, free, alloc, free): the library-
 * replacement test replaces the library file in between. Exit 0 when the
 * over-budget allocation was refused with CUDA_ERROR_OUT_OF_MEMORY (the
 * process is sliced), 1 when it was granted, 3 when the driver failed
 * otherwise, 4 on a timeout.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult_t;
typedef unsigned long long devptr_t;

static struct {
    CUresult_t (*init)(unsigned);
    CUresult_t (*device_get)(int *, int);
    CUresult_t (*retain)(void **, int);
    CUresult_t (*set_current)(void *);
    CUresult_t (*alloc)(devptr_t *, size_t);
    CUresult_t (*free)(devptr_t);
    CUresult_t (*info)(size_t *, size_t *);
} cu;

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "slice_probe: %s: %s\n", name, dlerror());
        exit(3);
    }
    return p;
}

#define CK(x)                                                                        \
    do {                                                                             \
        CUresult_t r_ = (x);                                                         \
        if (r_ != 0) {                                                               \
            fprintf(stderr, "slice_probe %d: %s = %d\n", (int)getpid(), #x, r_);     \
            exit(3);                                                                 \
        }                                                                            \
    } while (0)

static int find_cushare(struct dl_phdr_info *info, size_t size, void *found)
{
    (void)size;
    if (strstr(info->dlpi_name, "libcushare") || strstr(info->dlpi_name, "libvgpu"))
        *(int *)found = 1;
    return 0;
}

static double scale(void)
{
    const char *s = getenv("CS_TEST_SCALE");
    return s && atof(s) > 0 ? atof(s) : 1.0;
}

static void hold(const char *dir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/ready.%d", dir, (int)getpid());
    FILE *f = fopen(p, "w");
    if (!f || fclose(f)) {
        perror(p);
        exit(3);
    }
    snprintf(p, sizeof p, "%s/go", dir);
    struct timespec step = {0, 5 * 1000 * 1000};
    for (long i = 0; access(p, F_OK); i++) {
        if (i > (long)(12000 * scale())) {
            fprintf(stderr, "slice_probe %d: timed out waiting for %s\n", (int)getpid(), p);
            exit(4);
        }
        nanosleep(&step, NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: slice_probe LIBCUDA OK_MIB OVER_MIB [HOLD_DIR]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "slice_probe: dlopen %s: %s\n", argv[1], dlerror());
        return 3;
    }
    *(void **)&cu.init = sym(h, "cuInit");
    *(void **)&cu.device_get = sym(h, "cuDeviceGet");
    *(void **)&cu.retain = sym(h, "cuDevicePrimaryCtxRetain");
    *(void **)&cu.set_current = sym(h, "cuCtxSetCurrent");
    *(void **)&cu.alloc = sym(h, "cuMemAlloc_v2");
    *(void **)&cu.free = sym(h, "cuMemFree_v2");
    *(void **)&cu.info = sym(h, "cuMemGetInfo_v2");

    int dev, cushare = 0;
    void *ctx;
    devptr_t ok = 0, over = 0;
    size_t free_b, total;
    CK(cu.init(0));
    CK(cu.device_get(&dev, 0));
    CK(cu.retain(&ctx, dev));
    CK(cu.set_current(ctx));
    CUresult_t r_ok = cu.alloc(&ok, (size_t)atol(argv[2]) << 20);
    CUresult_t r_over = cu.alloc(&over, (size_t)atol(argv[3]) << 20);
    CK(cu.info(&free_b, &total));
    dl_iterate_phdr(find_cushare, &cushare);
    const char *pre = getenv("LD_PRELOAD");
    printf("probe pid=%d preload=%s cushare=%s ok=%d over=%d total=%zu\n", (int)getpid(),
           pre ? pre : "-", cushare ? "yes" : "no", r_ok, r_over, total);
    fflush(stdout);
    if (argc == 5) {
        hold(argv[4]);
        devptr_t again;
        CK(cu.info(&free_b, &total));
        CK(cu.free(ok));
        CK(cu.alloc(&again, 1 << 20));
        CK(cu.free(again));
        ok = 0;
        printf("probe pid=%d called into the driver after go\n", (int)getpid());
    }
    if (ok)
        cu.free(ok);
    if (r_over == 0)
        cu.free(over);
    return r_ok != 0 ? 3 : r_over == 2 ? 0 : r_over == 0 ? 1 : 3;
}

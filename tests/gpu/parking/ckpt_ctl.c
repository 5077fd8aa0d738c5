/*
 * The driver's own park and wake of a plain process, for
 * tests/gpu/parking/run.sh: `ckpt_ctl PID CYCLES` locks, checkpoints,
 * restores and unlocks PID CYCLES times (no cushare anywhere) and prints
 * one line per cycle: "cycle I lock_ms L checkpoint_ms C restore_ms R
 * unlock_ms U". The performer needs no cuInit (docs/parking.md).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}


int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_ctl PID CYCLES\n");
        return 2;
    }
    int pid = atoi(argv[1]), cycles = atoi(argv[2]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "ckpt_ctl: %s\n", dlerror());
        return 1;
    }
    CUresult (*lock)(int, CUcheckpointLockArgs *) =
        (CUresult(*)(int, CUcheckpointLockArgs *))dlsym(h, "cuCheckpointProcessLock");
    CUresult (*ckpt)(int, CUcheckpointCheckpointArgs *) =
        (CUresult(*)(int, CUcheckpointCheckpointArgs *))dlsym(h, "cuCheckpointProcessCheckpoint");
    CUresult (*restore)(int, CUcheckpointRestoreArgs *) =
        (CUresult(*)(int, CUcheckpointRestoreArgs *))dlsym(h, "cuCheckpointProcessRestore");
    CUresult (*unlock)(int, CUcheckpointUnlockArgs *) =
        (CUresult(*)(int, CUcheckpointUnlockArgs *))dlsym(h, "cuCheckpointProcessUnlock");
    if (!lock || !ckpt || !restore || !unlock) {
        fprintf(stderr, "ckpt_ctl: the driver has no checkpoint API\n");
        return 1;
    }
    for (int i = 0; i < cycles; i++) {
        CUcheckpointLockArgs la;
        CUcheckpointCheckpointArgs ca;
        CUcheckpointRestoreArgs ra;
        CUcheckpointUnlockArgs ua;
        memset(&la, 0, sizeof la), memset(&ca, 0, sizeof ca);
        memset(&ra, 0, sizeof ra), memset(&ua, 0, sizeof ua);
        la.timeoutMs = 10000;
        double t0 = now_ms();
        CUresult r = lock(pid, &la);
        double t1 = now_ms();
        if (!r)
            r = ckpt(pid, &ca);
        double t2 = now_ms();
        if (!r)
            r = restore(pid, &ra);
        double t3 = now_ms();
        if (!r)
            r = unlock(pid, &ua);
        double t4 = now_ms();
        if (r) {
            fprintf(stderr, "ckpt_ctl: cycle %d: CUresult %d\n", i, (int)r);
            return 1;
        }
        printf("cycle %d lock_ms %.3f checkpoint_ms %.3f restore_ms %.3f unlock_ms %.3f\n", i,
               t1 - t0, t2 - t1, t3 - t2, t4 - t3);
        fflush(stdout);
    }
    return 0;
}

/*
 * HAMi's shared region, layout v1: the file HAMi's vGPU monitor
 * (Project-HAMi/HAMi pkg/monitor/nvidia/v1/spec.go) and KAI scheduler's
 * HAMi isolator map at CUDA_DEVICE_MEMORY_SHARED_CACHE. This is HAMi's
 * ABI, not ours: we write it so that those components work unchanged
 * with cushare (docs/kubernetes.md). Offsets are pinned below and by
 * tests/hami (a Go transcription of HAMi's struct decoding a golden file).
 *
 * What the monitor reads: initialized_flag == CS_HAMI_MAGIC,
 * major_version == 1, file size >= sizeof(struct cs_hami_region); per
 * process slot pid/hostpid and used[dev] (context, module, buffer,
 * total bytes), device_util[dev].sm_util; limit[], sm_limit[], uuids,
 * device_num, priority, last_kernel_time.
 * What the monitor writes: recent_kernel (-1 = block this container's
 * launches, 0 = unblock; it also counts it down from 2 to learn who was
 * active) and utilization_switch (1 = the SM limit applies, 0 = not).
 * Our writers: each process writes only the slot whose index is its
 * ledger slot, and the header fields at creation; recent_kernel and
 * last_kernel_time with atomics (the monitor writes them too).
 */
#ifndef CUSHARE_HAMI_V1_H
#define CUSHARE_HAMI_V1_H

#include <stdint.h>

#define CS_HAMI_MAGIC 19920718
#define CS_HAMI_MAJOR 1
#define CS_HAMI_MINOR 1
#define CS_HAMI_DEVICES 16
#define CS_HAMI_PROCS 1024

struct cs_hami_devmem {
    uint64_t context_size;  /* context bytes */
    uint64_t module_size;   /* module bytes (cushare counts them as context) */
    uint64_t buffer_size;   /* every other category */
    uint64_t offset;
    uint64_t total;         /* all of the process's bytes on the device */
    uint64_t unused[3];
};

struct cs_hami_devutil {
    uint64_t dec_util;
    uint64_t enc_util;
    uint64_t sm_util;       /* percent of the device this process used lately */
    uint64_t unused[3];
};

struct cs_hami_proc {
    int32_t pid;                                /*    0 0 = free slot    */
    int32_t hostpid;                            /*    4 0 = unknown      */
    struct cs_hami_devmem used[CS_HAMI_DEVICES]; /*   8                  */
    uint64_t monitorused[CS_HAMI_DEVICES];      /* 1032                  */
    struct cs_hami_devutil device_util[CS_HAMI_DEVICES]; /* 1160          */
    int32_t status;                             /* 1928 1 = running      */
    uint64_t unused[3];                         /* 1936                  */
};

struct cs_hami_region {
    int32_t initialized_flag;                   /*  0 CS_HAMI_MAGIC      */
    uint32_t major_version;                     /*  4                    */
    uint32_t minor_version;                     /*  8                    */
    int32_t sm_init_flag;                       /* 12                    */
    uint64_t owner_pid;                         /* 16                    */
    uint8_t sem[32];                            /* 24 HAMi's sem_t; unused */
    uint64_t device_num;                        /* 56                    */
    char uuids[CS_HAMI_DEVICES][96];            /* 64 "GPU-…" strings     */
    uint64_t limit[CS_HAMI_DEVICES];            /* 1600 bytes, 0 = none  */
    uint64_t sm_limit[CS_HAMI_DEVICES];         /* 1728 percent, 0 = none */
    struct cs_hami_proc procs[CS_HAMI_PROCS];   /* 1856                  */
    int32_t proc_num;                           /* 2008896 slots in use: highest + 1 */
    int32_t utilization_switch;                 /* 2008900 monitor writes */
    int32_t recent_kernel;                      /* 2008904 both write     */
    int32_t priority;                           /* 2008908 0 high, 1 low  */
    int64_t last_kernel_time;                   /* 2008912 seconds        */
    uint8_t sem_postinit[32];                   /* 2008920                */
};

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#include <stddef.h>
_Static_assert(sizeof(struct cs_hami_proc) == 1960, "HAMi ABI");
_Static_assert(offsetof(struct cs_hami_proc, status) == 1928, "HAMi ABI");
_Static_assert(offsetof(struct cs_hami_region, device_num) == 56, "HAMi ABI");
_Static_assert(offsetof(struct cs_hami_region, limit) == 1600, "HAMi ABI");
_Static_assert(offsetof(struct cs_hami_region, procs) == 1856, "HAMi ABI");
_Static_assert(offsetof(struct cs_hami_region, proc_num) == 2008896, "HAMi ABI");
_Static_assert(offsetof(struct cs_hami_region, last_kernel_time) == 2008912, "HAMi ABI");
_Static_assert(sizeof(struct cs_hami_region) == 2008952, "HAMi ABI");
#endif

#endif

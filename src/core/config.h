/*
 * Configuration: the environment contract of DESIGN.md, read once, parsed
 * strictly, printable. The table in config.c is the one place that knows a
 * variable's name, kind and meaning. Read with getenv elsewhere, on
 * purpose: CUSHARE_LOG_LEVEL (core/log.c: logging works while this is
 * parsed) and, in the command, CUDA_DEVICE_MEMORY_SHARED_CACHE as the
 * default ledger of `status` and `suspend`.
 *
 * A malformed value is an error (never a silently dropped limit): the
 * parser names the variable, the value and the fix.
 */
#ifndef CS_CORE_CONFIG_H
#define CS_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cushare/ledger.h"

#define CS_PARK_IDLE_DEFAULT_MS 10000u /* CUSHARE_PARK_IDLE_MS unset */

struct cs_config {
    uint64_t mem_limit_all;                 /* CUDA_DEVICE_MEMORY_LIMIT */
    uint64_t mem_limit[CS_MAX_DEVICES];     /* CUDA_DEVICE_MEMORY_LIMIT_<i> */
    bool mem_limit_set[CS_MAX_DEVICES];
    uint32_t sm_limit_all;                  /* CUDA_DEVICE_SM_LIMIT */
    uint32_t sm_limit[CS_MAX_DEVICES];      /* CUDA_DEVICE_SM_LIMIT_<i> */
    bool sm_limit_set[CS_MAX_DEVICES];
    char ledger_path[4096];                 /* cushare's ledger: CUDA_DEVICE_MEMORY_SHARED_CACHE,
                                               or beside it when that names a HAMi region */
    char hami_path[4096];                   /* CUDA_DEVICE_MEMORY_SHARED_CACHE when it ends in
                                               ".cache" (HAMi's name): the HAMi v1 region kept
                                               there (src/hami); "" = none */
    uint32_t policy;                        /* GPU_CORE_UTILIZATION_POLICY */
    int32_t priority;                       /* CUDA_TASK_PRIORITY */
    bool priority_set;
    bool hostpid_broker;                    /* LIBVGPU_HOSTPID_BROKER */
    char host_procfs[4096];                 /* LIBVGPU_HOST_PROCFS */
    char board_path[4096];                  /* CUSHARE_BOARD: node board of limited tenants */
    char registry_path[4096];               /* CUSHARE_REGISTRY: node registry of ledgers */
    bool hami_signals;                      /* CUSHARE_HAMI_SIGNALS: SIGUSR2/1 suspend/resume */
    uint32_t sm_burst_us;                   /* CUSHARE_SM_BURST_US: pacing burst, 0 = default */
    uint32_t priority_quiet_us;             /* CUSHARE_PRIORITY_QUIET_US: how long a
                                               higher-priority tenant must have launched
                                               nothing before a lower one launches; 0 = no
                                               yielding */
    uint32_t sm_period_us;                  /* CUSHARE_SM_PERIOD_US: period of the tenants'
                                               coordinated windows, 0 = none */
    bool sm_period_auto;                    /* CUSHARE_SM_PERIOD_US unset: the period
                                               grows with the tenants (watch.c) */
    uint32_t sm_window_lead_us;             /* CUSHARE_SM_WINDOW_LEAD_US: how early a window
                                               opens over the previous owner's end */
    bool mps_turns_filling;                 /* CUSHARE_MPS_TURNS=filling (default): MPS
                                               clients of GPU-filling kernels take turns
                                               in windows; off: never */
    bool sm_share_time;                     /* CUSHARE_SM_SHARE=time: no throughput corrections */
    int log_level;                          /* CUSHARE_LOG_LEVEL, else LIBCUDA_LOG_LEVEL
                                               (log.c reads them itself too) */
    int hami_log_level;                     /* LIBCUDA_LOG_LEVEL mapped, -1 unset */
    bool disable_control;                   /* CUDA_DISABLE_CONTROL=true: no limits, no
                                               shared files (HAMi's meaning) */
    char share_dir[4096];                   /* CUSHARE_SHARE_DIR: payer files of memory
                                               shared across tenants ("" = CS_NODE_DIR) */
    bool ledger_trust_dir;                  /* CUSHARE_LEDGER_TRUST=directory: the ledger's
                                               directory is private to the tenant */
    uint32_t park_pct;                      /* CUSHARE_PARK: budgets may sum to this % of
                                               the card; 0 = parking off (docs/parking.md) */
    uint32_t park_idle_ms;                  /* CUSHARE_PARK_IDLE_MS: idle after this long
                                               without GPU calls */
    bool from_slice_file;                   /* CS_SLICE_FILE existed: the slice's values came
                                               from it, not from the environment */
};

/* Parses the process environment into *out. 0, or -EINVAL after printing
 * one message per bad variable. Besides bad values, a per-device name
 * whose suffix is not a device index from 0 to CS_MAX_DEVICES-1
 * (CUDA_DEVICE_MEMORY_LIMIT_16, _01, _x) is an error: it would otherwise
 * be a limit nobody enforces. */
int cs__config_from_env(struct cs_config *out);

/* The slice file: a read-only file the deployment mounts into a container
 * (`cushare cdi` does), holding the slice's "NAME=value" lines, '#'
 * comments and blank lines allowed. When it exists, every variable of the
 * table except the log levels comes from it alone: the same names in the
 * process's environment are ignored (one warning names them), so a tenant
 * that clears or rewrites its environment stays in its slice. A file that
 * exists but cannot be read, or holds a line that is not a variable of the
 * table, fails the parse (fail closed). Its path is fixed, not
 * configurable, for the same reason. */
#define CS_SLICE_FILE "/etc/cushare/slice.env"

/* Period of the coordinated windows of tenants sharing a device
 * (docs/limiter.md, "Windows"), unless CUSHARE_SM_PERIOD_US fixes it: each
 * context switch between busy tenants costs the GPU work, so it grows with
 * the tenants, DEFAULT per tenant after the first, at most AUTO_MAX. */
#define CS_SM_PERIOD_DEFAULT_US 50000u
#define CS_SM_PERIOD_AUTO_MAX_US 200000u
/* A window opens 150 us early by default: about what the next owner needs
 * to wake and launch, so its first work is queued as the previous owner's
 * last drains. On the H200 it cut the idle gap at each edge of a C tracer
 * from 210 to 140 us, the context switch itself. A longer lead lets the
 * next owner's work reach the GPU while the previous owner's queue (which
 * ends with its window) still runs, and the GPU then switches at once,
 * splitting that owner's tail (docs/results.md, "Window edges"). */
#define CS_SM_WINDOW_LEAD_DEFAULT_US 150u
#define CS_PRIORITY_QUIET_DEFAULT_US 2000u /* yield on activity (limiter/fair.h) */

/* cs__config_parse of `env` under the slice file at `slice_path` (absent:
 * the environment alone). cs__config_from_env is
 * cs__config_load(out, environ, CS_SLICE_FILE). */
int cs__config_load(struct cs_config *out, char *const *env, const char *slice_path);

/* The suffix that marks a HAMi shared-region path, and the one cushare's
 * ledger gets beside it: "<dir>/<uuid>.cache" keeps the HAMi region and
 * "<dir>/<uuid>.cushare" the ledger. The ledger's name must not contain
 * ".cache": HAMi's monitor takes the first such name in the directory. */
#define CS_HAMI_SUFFIX ".cache"
#define CS_HAMI_LEDGER_SUFFIX ".cushare"

/* Same, from `env`: NULL-terminated "NAME=value" strings like environ;
 * the first entry of a name counts, as for getenv (tests, the CLI). */
int cs__config_parse(struct cs_config *out, char *const *env);

/* Effective per-device values (device-specific variable, else the "all"
 * one, else 0 = none). */
uint64_t cs__config_mem_limit(const struct cs_config *c, int dev);
uint32_t cs__config_sm_limit(const struct cs_config *c, int dev);

/* "4GiB", "512m" style strict size parser: digits, optional k/m/g/t
 * (binary) suffix, optionally followed by "i", "ib" or "b" (any case).
 * 0, -EINVAL (not a size) or -ERANGE (overflow). */
int cs__parse_size(const char *s, uint64_t *out);

/* What was wrong with a size a person typed (cs__parse_size_typed). */
enum cs_size_typed {
    CS_SIZE_OK,
    CS_SIZE_NOT_A_SIZE,         /* no digits, or letters that are no unit */
    CS_SIZE_NEGATIVE,           /* "-1GiB" */
    CS_SIZE_NO_UNIT,            /* "3" (other than 0) */
    CS_SIZE_SI_UNIT,            /* "4GB": decimal or binary? refused */
    CS_SIZE_FRACTION,           /* "1.5B": part of a byte */
    CS_SIZE_TOO_LARGE,          /* past 2^64 - 1 bytes */
};

/* A size a person typed (`cushare run --mem`, `cdi --mem`): as
 * cs__parse_size, but a size other than 0 needs its unit ("3" is refused,
 * "3B", "3GiB" are not), because nobody means a budget of 3 bytes; a
 * decimal fraction of a k/m/g/t unit is allowed and rounded to the nearest
 * byte ("1.5GiB"); "kB", "MB", "GB", "TB" are refused, since the units
 * here are binary and a person writing GB may mean 10^9. The environment
 * keeps HAMi's reading (bare number = bytes, whole numbers only), since a
 * control plane writes it. */
enum cs_size_typed cs__parse_size_typed(const char *s, uint64_t *out);

/* cs__parse_size_typed as 0 or -EINVAL. */
int cs__parse_size_unit(const char *s, uint64_t *out);

/* Splits a comma-separated list in place: items[] point into `list`.
 * The number of items, -EINVAL if one is empty ("a,,b", "a,", ",a", "")
 * or -E2BIG if there are more than `max`. */
int cs__split_list(char *list, char **items, int max);

/* Strict decimal integer in [min, max]. 0, -EINVAL or -ERANGE. */
int cs__parse_int(const char *s, long min, long max, long *out);

/* Writes "NAME=value" lines of the effective configuration. */
void cs__config_dump(const struct cs_config *c, char *buf, size_t len);

#endif

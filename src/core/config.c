#define _GNU_SOURCE /* environ */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

/* cs__parse_size; *has_unit says whether a suffix was written. */
static int parse_size(const char *s, uint64_t *out, bool *has_unit)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    uint64_t v = 0;
    const char *p = s;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    const char *unit = p;
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
    }
    if (shift && (*p == 'i' || *p == 'I'))
        p++;
    if (*p == 'b' || *p == 'B')
        p++;
    if (*p != '\0')
        return -EINVAL;
    if (shift && v > (UINT64_MAX >> shift))
        return -ERANGE;
    *has_unit = p != unit;
    *out = v << shift;
    return 0;
}

int cs__parse_size(const char *s, uint64_t *out)
{
    bool has_unit;
    return parse_size(s, out, &has_unit);
}

/* The fraction ".ddd" of a binary unit 2^shift, in bytes, rounded to the
 * nearest byte: digits past the 18th are below a byte of a TiB. */
static uint64_t fraction_bytes(const char *digits, size_t n, unsigned shift)
{
    unsigned __int128 num = 0, den = 1;
    for (size_t i = 0; i < n && i < 18; i++) {
        num = num * 10 + (unsigned)(digits[i] - '0');
        den *= 10;
    }
    return (uint64_t)(((num << shift) + den / 2) / den);
}

enum cs_size_typed cs__parse_size_typed(const char *s, uint64_t *out)
{
    if (!s)
        return CS_SIZE_NOT_A_SIZE;
    if (s[0] == '-' && (isdigit((unsigned char)s[1]) || s[1] == '.'))
        return CS_SIZE_NEGATIVE;
    const char *p = s;
    while (isdigit((unsigned char)*p))
        p++;
    const char *frac = NULL;
    size_t nfrac = 0;
    if (*p == '.') {
        frac = ++p;
        while (isdigit((unsigned char)*p))
            p++;
        nfrac = (size_t)(p - frac);
    }
    if (p == s || (frac && !nfrac) || (frac && frac == s + 1))
        return CS_SIZE_NOT_A_SIZE; /* no digits, "4.", ".5" */
    unsigned shift = 0;
    const char *unit = p;
    switch (*p) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: break;
    }
    if (shift) {
        p++;
        bool binary = *p == 'i' || *p == 'I';
        if (binary)
            p++;
        if (!binary && (*p == 'b' || *p == 'B') && p[1] == '\0')
            return CS_SIZE_SI_UNIT; /* "4GB": 10^9 or 2^30? */
    }
    if (*p == 'b' || *p == 'B')
        p++;
    if (*p != '\0')
        return CS_SIZE_NOT_A_SIZE;
    if (p == unit) {
        bool zero = true;
        for (const char *q = s; q < unit; q++)
            zero = zero && (*q == '0' || *q == '.');
        if (!zero)
            return CS_SIZE_NO_UNIT;
    }
    if (frac && !shift)
        return CS_SIZE_FRACTION;
    uint64_t v = 0;
    for (const char *q = s; isdigit((unsigned char)*q); q++) {
        unsigned d = (unsigned)(*q - '0');
        if (v > (UINT64_MAX - d) / 10)
            return CS_SIZE_TOO_LARGE;
        v = v * 10 + d;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return CS_SIZE_TOO_LARGE;
    uint64_t bytes = v << shift, part = frac ? fraction_bytes(frac, nfrac, shift) : 0;
    if (bytes > UINT64_MAX - part)
        return CS_SIZE_TOO_LARGE;
    *out = bytes + part;
    return CS_SIZE_OK;
}

int cs__parse_size_unit(const char *s, uint64_t *out)
{
    return cs__parse_size_typed(s, out) == CS_SIZE_OK ? 0 : -EINVAL;
}

int cs__split_list(char *list, char **items, int max)
{
    int n = 0;
    for (char *p = list;; p++) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p)
            return -EINVAL; /* "a,,b", ",a", "a," or "": a value went missing */
        if (n == max)
            return -E2BIG;
        items[n++] = p;
        if (!comma)
            return n;
        p = comma;
    }
}

int cs__parse_int(const char *s, long min, long max, long *out)
{
    if (!s || !*s)
        return -EINVAL;
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    if (!isdigit((unsigned char)*p))
        return -EINVAL;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

/* One row per variable family. `indexed` rows also accept NAME_<i>. */
enum opt_kind { OPT_SIZE, OPT_PERCENT, OPT_PATH, OPT_POLICY, OPT_INT, OPT_BOOL, OPT_WORD };

struct opt {
    const char *name;
    enum opt_kind kind;
    bool indexed;
    const char *fix; /* how to write a valid value */
};

enum opt_id {
    O_MEM, O_SM, O_CACHE, O_POLICY, O_PRIORITY, O_BROKER, O_PROCFS, O_BOARD, O_REGISTRY,
    O_HAMI_SIGNALS, O_SM_BURST, O_PRIO_QUIET, O_SM_PERIOD, O_SM_LEAD, O_MPS_TURNS, O_SM_SHARE, O_LOG_LEVEL, O_LEDGER_TRUST, O_HAMI_LOG_LEVEL,
    O_DISABLE_CONTROL, O_OVERSUBSCRIBE, O_SHARE_DIR, O_PARK, O_PARK_IDLE, O_COUNT
};

static const struct opt options[O_COUNT] = {
    [O_MEM] = {"CUDA_DEVICE_MEMORY_LIMIT", OPT_SIZE, true,
               "use bytes or a k/m/g/t suffix (binary), e.g. 4g or 4096m; 0 means no limit"},
    [O_SM] = {"CUDA_DEVICE_SM_LIMIT", OPT_PERCENT, true,
              "use a whole percentage from 1 to 100; 0 means no limit"},
    [O_CACHE] = {"CUDA_DEVICE_MEMORY_SHARED_CACHE", OPT_PATH, false,
                 "use an absolute path to the tenant's ledger file"},
    [O_POLICY] = {"GPU_CORE_UTILIZATION_POLICY", OPT_POLICY, false,
                  "use default, force or disable"},
    [O_PRIORITY] = {"CUDA_TASK_PRIORITY", OPT_INT, false, "use an integer, e.g. 0 or 1"},
    [O_BROKER] = {"LIBVGPU_HOSTPID_BROKER", OPT_BOOL, false, "use 1 to enable or 0 to disable"},
    [O_PROCFS] = {"LIBVGPU_HOST_PROCFS", OPT_PATH, false,
                  "use the absolute path of a procfs mounted from the host PID namespace"},
    [O_BOARD] = {"CUSHARE_BOARD", OPT_PATH, false,
                 "use an absolute path for the node's board of limited tenants"},
    [O_REGISTRY] = {"CUSHARE_REGISTRY", OPT_PATH, false,
                    "use an absolute path DIR/BASE for the node's registry of ledgers"},
    [O_HAMI_SIGNALS] = {"CUSHARE_HAMI_SIGNALS", OPT_BOOL, false,
                        "use 1 to let SIGUSR2/SIGUSR1 suspend/resume (HAMi) or 0"},
    [O_SM_BURST] = {"CUSHARE_SM_BURST_US", OPT_INT, false,
                     "use microseconds from 100 to 100000, e.g. 4000"},
    [O_PRIO_QUIET] = {"CUSHARE_PRIORITY_QUIET_US", OPT_INT, false,
                      "use microseconds from 0 to 100000, e.g. 2000, or 0 for no yielding"},
    [O_SM_PERIOD] = {"CUSHARE_SM_PERIOD_US", OPT_INT, false,
                     "use microseconds from 5000 to 1000000, e.g. 50000, or 0 for no "
                     "coordinated windows"},
    [O_SM_LEAD] = {"CUSHARE_SM_WINDOW_LEAD_US", OPT_INT, false,
                   "use microseconds from 0 to 100000, e.g. 200"},
    [O_MPS_TURNS] = {"CUSHARE_MPS_TURNS", OPT_WORD, false,
                     "use filling (the default: MPS clients whose kernels fill the GPU take "
                     "turns in windows) or off (MPS clients never take turns)"},
    [O_SM_SHARE] = {"CUSHARE_SM_SHARE", OPT_WORD, false,
                    "use throughput (share of the device's full-load work) or time (share of "
                    "GPU time)"},
    [O_LOG_LEVEL] = {"CUSHARE_LOG_LEVEL", OPT_WORD, false,
                     "use error, warn, info or debug (or 0 to 3)"},
    [O_LEDGER_TRUST] = {"CUSHARE_LEDGER_TRUST", OPT_WORD, false,
                        "use owner (only a ledger of this user that nobody else can write) or "
                        "directory (the ledger's directory is private to this tenant, as "
                        "HAMi's per-container mount)"},
    [O_HAMI_LOG_LEVEL] = {"LIBCUDA_LOG_LEVEL", OPT_INT, false,
                          "use HAMi's numbers: 0 or 1 errors, 2 warnings, 3 info, 4 debug "
                          "(CUSHARE_LOG_LEVEL wins when both are set)"},
    [O_DISABLE_CONTROL] = {"CUDA_DISABLE_CONTROL", OPT_BOOL, false,
                           "use true to make the library inert (no limits) or false"},
    /* Oversubscription spills device memory to host memory behind the
     * program's back: the budget would stop being a hard one. Refused with
     * one message instead of being ignored, so nobody believes they have it. */
    [O_OVERSUBSCRIBE] = {"CUDA_OVERSUBSCRIBE", OPT_BOOL, false,
                         "cushare's budgets are hard and never spill to host memory: unset "
                         "it or use false (in HAMi, keep deviceMemoryScaling at 1)"},
    [O_SHARE_DIR] = {"CUSHARE_SHARE_DIR", OPT_PATH, false,
                     "use the absolute path of a directory every tenant of the node can reach "
                     "(default /tmp/vgpulock)"},
    [O_PARK] = {"CUSHARE_PARK", OPT_INT, false,
                "use how far the tenants' budgets may exceed the card, in percent of it, "
                "from 100 to 1000 (e.g. 150), or 0 to never park (docs/parking.md)"},
    [O_PARK_IDLE] = {"CUSHARE_PARK_IDLE_MS", OPT_INT, false,
                     "use milliseconds from 0 to 86400000 without GPU calls after which a "
                     "tenant counts as idle, e.g. 10000"},
};

static int bad_value(const char *var, const char *value, const char *fix)
{
    cs_err("config", "%s='%s' is not valid: %s", var, value, fix);
    return -EINVAL;
}

static int parse_policy(const char *v, uint32_t *out)
{
    if (!strcasecmp(v, "default"))
        *out = CS_POLICY_DEFAULT;
    else if (!strcasecmp(v, "force"))
        *out = CS_POLICY_FORCE;
    else if (!strcasecmp(v, "disable"))
        *out = CS_POLICY_DISABLE;
    else
        return -EINVAL;
    return 0;
}

static int parse_one(struct cs_config *c, enum opt_id id, int dev, const char *var,
                     const char *v)
{
    const struct opt *o = &options[id];
    uint64_t size;
    long n;
    switch (id) {
    case O_MEM:
        if (cs__parse_size(v, &size))
            return bad_value(var, v, o->fix);
        if (dev < 0) {
            c->mem_limit_all = size;
        } else {
            c->mem_limit[dev] = size;
            c->mem_limit_set[dev] = true;
        }
        return 0;
    case O_SM:
        if (cs__parse_int(v, 0, 100, &n))
            return bad_value(var, v, o->fix);
        if (dev < 0) {
            c->sm_limit_all = (uint32_t)n;
        } else {
            c->sm_limit[dev] = (uint32_t)n;
            c->sm_limit_set[dev] = true;
        }
        return 0;
    case O_CACHE:
    case O_PROCFS:
    case O_BOARD:
    case O_REGISTRY:
    case O_SHARE_DIR: {
        char *dst = id == O_CACHE      ? c->ledger_path
                    : id == O_PROCFS   ? c->host_procfs
                    : id == O_BOARD    ? c->board_path
                    : id == O_REGISTRY ? c->registry_path
                                       : c->share_dir;
        if (v[0] != '/' || strlen(v) >= sizeof c->ledger_path)
            return bad_value(var, v, o->fix);
        strcpy(dst, v);
        return 0;
    }
    case O_POLICY:
        if (parse_policy(v, &c->policy))
            return bad_value(var, v, o->fix);
        return 0;
    case O_PRIORITY:
        if (cs__parse_int(v, INT_MIN, INT_MAX, &n))
            return bad_value(var, v, o->fix);
        c->priority = (int32_t)n;
        c->priority_set = true;
        return 0;
    case O_BROKER:
    case O_HAMI_SIGNALS:
        if (strcmp(v, "0") && strcmp(v, "1"))
            return bad_value(var, v, o->fix);
        *(id == O_BROKER ? &c->hostpid_broker : &c->hami_signals) = v[0] == '1';
        return 0;
    case O_SM_BURST:
        if (cs__parse_int(v, 100, 100000, &n))
            return bad_value(var, v, o->fix);
        c->sm_burst_us = (uint32_t)n;
        return 0;
    case O_PRIO_QUIET:
        if (cs__parse_int(v, 0, 100000, &n))
            return bad_value(var, v, o->fix);
        c->priority_quiet_us = (uint32_t)n;
        return 0;
    case O_SM_PERIOD:
        if (cs__parse_int(v, 0, 1000000, &n) || (n && n < 5000))
            return bad_value(var, v, o->fix);
        c->sm_period_us = (uint32_t)n;
        c->sm_period_auto = false;
        return 0;
    case O_SM_LEAD:
        if (cs__parse_int(v, 0, 100000, &n))
            return bad_value(var, v, o->fix);
        c->sm_window_lead_us = (uint32_t)n;
        return 0;
    case O_MPS_TURNS:
        if (strcasecmp(v, "off") && strcasecmp(v, "filling"))
            return bad_value(var, v, o->fix);
        c->mps_turns_filling = !strcasecmp(v, "filling");
        return 0;
    case O_SM_SHARE:
        if (strcasecmp(v, "throughput") && strcasecmp(v, "time"))
            return bad_value(var, v, o->fix);
        c->sm_share_time = !strcasecmp(v, "time");
        return 0;
    case O_LOG_LEVEL:
        if (cs__log_parse_level(v, &c->log_level))
            return bad_value(var, v, o->fix);
        return 0;
    case O_HAMI_LOG_LEVEL:
        if (cs__parse_int(v, 0, 1000, &n))
            return bad_value(var, v, o->fix);
        c->hami_log_level = cs__log_from_hami((int)n);
        return 0;
    case O_DISABLE_CONTROL:
    case O_OVERSUBSCRIBE: {
        bool on = !strcasecmp(v, "true") || !strcmp(v, "1");
        if (!on && strcasecmp(v, "false") && strcmp(v, "0"))
            return bad_value(var, v, o->fix);
        if (id == O_OVERSUBSCRIBE && on)
            return bad_value(var, v, o->fix);
        if (id == O_DISABLE_CONTROL)
            c->disable_control = on;
        return 0;
    }
    case O_PARK:
        if (cs__parse_int(v, 0, 1000, &n) || (n && n < 100))
            return bad_value(var, v, o->fix);
        c->park_pct = (uint32_t)n;
        return 0;
    case O_PARK_IDLE:
        if (cs__parse_int(v, 0, 86400000, &n))
            return bad_value(var, v, o->fix);
        c->park_idle_ms = (uint32_t)n;
        return 0;
    case O_LEDGER_TRUST:
        if (strcasecmp(v, "owner") && strcasecmp(v, "directory"))
            return bad_value(var, v, o->fix);
        c->ledger_trust_dir = !strcasecmp(v, "directory");
        return 0;
    case O_COUNT:
        break;
    }
    return -EINVAL;
}

/* The value of the first "name=value" entry of env, as getenv does. */
static const char *env_value(char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (; env && *env; env++)
        if (!strncmp(*env, name, n) && (*env)[n] == '=')
            return *env + n + 1;
    return NULL;
}

/* Device index of "NAME_<i>": plain decimal as HAMi writes it ("0".."15",
 * no sign, no leading zero). -1 if `suffix` is not such an index. */
static int device_index(const char *suffix)
{
    long v;
    if (!isdigit((unsigned char)suffix[0]) || (suffix[0] == '0' && suffix[1]) ||
        cs__parse_int(suffix, 0, CS_MAX_DEVICES - 1, &v))
        return -1;
    return (int)v;
}

/* A per-device variable that names no device we manage would be dropped
 * without a word (a budget nobody enforces): refuse it instead. An empty
 * value asks for nothing and stays unset, as for every variable. */
static int check_device_names(char *const *env)
{
    int rc = 0;
    for (; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        if (!eq || !eq[1])
            continue;
        for (int id = 0; id < O_COUNT; id++) {
            const struct opt *o = &options[id];
            size_t n = strlen(o->name);
            if (!o->indexed || strncmp(*env, o->name, n) || (*env)[n] != '_')
                continue;
            char suffix[8];
            size_t len = (size_t)(eq - (*env + n + 1));
            snprintf(suffix, sizeof suffix, "%.*s", (int)len, *env + n + 1);
            if (len < sizeof suffix && device_index(suffix) >= 0)
                continue;
            cs_err("config", "%.80s names no device cushare manages: use %s_<i> with i from 0 "
                   "to %d (plain decimal, as HAMi writes it), or remove it",
                   *env, o->name, CS_MAX_DEVICES - 1);
            rc = -EINVAL;
        }
    }
    return rc;
}

/* CUDA_DEVICE_MEMORY_SHARED_CACHE=<stem>.cache is HAMi's region: it stays
 * there, in HAMi's layout, and cushare's ledger lives beside it as
 * <stem>.cushare (docs/kubernetes.md). Any other name is the ledger. */
static int split_hami_path(struct cs_config *c)
{
    size_t n = strlen(c->ledger_path), sn = strlen(CS_HAMI_SUFFIX);
    if (n <= sn || strcmp(c->ledger_path + n - sn, CS_HAMI_SUFFIX))
        return 0;
    if (n - sn + strlen(CS_HAMI_LEDGER_SUFFIX) >= sizeof c->ledger_path)
        return bad_value(options[O_CACHE].name, c->ledger_path, "use a shorter path");
    memcpy(c->hami_path, c->ledger_path, n + 1);
    strcpy(c->ledger_path + n - sn, CS_HAMI_LEDGER_SUFFIX);
    return 0;
}

/* CUDA_DISABLE_CONTROL=true, HAMi's switch for a container that must run
 * unlimited: no budget, no share, no shared file touched (a private
 * ledger keeps `cushare status` truthful). The values were still parsed,
 * so a malformed one is reported all the same. */
static void disable_control(struct cs_config *c)
{
    memset(c->mem_limit, 0, sizeof c->mem_limit);
    memset(c->mem_limit_set, 0, sizeof c->mem_limit_set);
    memset(c->sm_limit, 0, sizeof c->sm_limit);
    memset(c->sm_limit_set, 0, sizeof c->sm_limit_set);
    c->mem_limit_all = 0;
    c->sm_limit_all = 0;
    c->ledger_path[0] = '\0';
    c->hami_path[0] = '\0';
    c->policy = CS_POLICY_DISABLE;
}

int cs__config_parse(struct cs_config *out, char *const *env)
{
    memset(out, 0, sizeof *out);
    out->log_level = CS_LOG_WARN;
    out->sm_period_us = CS_SM_PERIOD_DEFAULT_US;
    out->sm_period_auto = true;
    out->sm_window_lead_us = CS_SM_WINDOW_LEAD_DEFAULT_US;
    out->priority_quiet_us = CS_PRIORITY_QUIET_DEFAULT_US;
    out->mps_turns_filling = true; /* an element-wise 25 + 75 pair: A:B 0.296 without */
    out->hami_log_level = -1;
    out->park_idle_ms = CS_PARK_IDLE_DEFAULT_MS;
    int rc = check_device_names(env);
    for (int id = 0; id < O_COUNT; id++) {
        const struct opt *o = &options[id];
        const char *v = env_value(env, o->name);
        /* An empty value is treated as unset, as HAMi does. */
        if (v && *v && parse_one(out, (enum opt_id)id, -1, o->name, v))
            rc = -EINVAL;
        if (!o->indexed)
            continue;
        for (int dev = 0; dev < CS_MAX_DEVICES; dev++) {
            char var[64];
            snprintf(var, sizeof var, "%s_%d", o->name, dev);
            v = env_value(env, var);
            if (v && *v && parse_one(out, (enum opt_id)id, dev, var, v))
                rc = -EINVAL;
        }
    }
    if (out->ledger_path[0] && split_hami_path(out))
        rc = -EINVAL;
    const char *own_level = env_value(env, options[O_LOG_LEVEL].name);
    if (out->hami_log_level >= 0 && (!own_level || !*own_level))
        out->log_level = out->hami_log_level;
    if (out->disable_control)
        disable_control(out);
    return rc;
}

/* ---- the slice file (config.h: CS_SLICE_FILE) --------------------------- */

#define SLICE_FILE_MAX 8192    /* bytes: a slice is a few dozen short lines */
#define SLICE_LINES_MAX 128

/* The variables a tenant may still set for itself under a slice file: they
 * change what it is told, never what it may use. */
static bool tenant_may_set(enum opt_id id)
{
    return id == O_LOG_LEVEL || id == O_HAMI_LOG_LEVEL;
}

/* The table row "NAME" or "NAME_<i>" of an entry "NAME=value"; -1 none. */
static int option_of(const char *entry)
{
    const char *eq = strchr(entry, '=');
    size_t len = eq ? (size_t)(eq - entry) : strlen(entry);
    for (int id = 0; id < O_COUNT; id++) {
        size_t n = strlen(options[id].name);
        if (len < n || strncmp(entry, options[id].name, n))
            continue;
        if (len == n || (options[id].indexed && entry[n] == '_'))
            return id;
    }
    return -1;
}

/* Reads the slice file into buf (NUL-terminated) and points lines[] at its
 * "NAME=value" lines. The number of lines, 0 if the file does not exist,
 * or -EINVAL after one message. */
static int read_slice_file(const char *path, char *buf, size_t cap, char **lines, int max)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0) {
        cs_err("config", "slice file %s cannot be read (%s): the slice would be lost; fix its "
               "mount or permissions", path, strerror(errno));
        return -EINVAL;
    }
    struct stat st;
    size_t n = 0;
    ssize_t r = 0;
    bool regular = !fstat(fd, &st) && S_ISREG(st.st_mode);
    while (regular && n < cap && (r = read(fd, buf + n, cap - n)) > 0)
        n += (size_t)r;
    close(fd);
    if (!regular || r < 0) {
        cs_err("config", "slice file %s is not a readable regular file: the slice would be "
               "lost; fix its mount", path);
        return -EINVAL;
    }
    if (n == cap) {
        cs_err("config", "slice file %s is larger than %zu bytes: keep one NAME=value per line",
               path, cap - 1);
        return -EINVAL;
    }
    buf[n] = '\0';
    int count = 0;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t')
            line++;
        if (!*line || *line == '#')
            continue;
        if (!strchr(line, '=') || option_of(line) < 0 || count == max) {
            cs_err("config", "slice file %s: '%.80s' is not a cushare variable (NAME=value, "
                   "one per line, at most %d): fix the file", path, line, max);
            return -EINVAL;
        }
        lines[count++] = line;
    }
    return count;
}

/* Whether the file holds exactly this entry: the deployment usually sets
 * the same values in the environment too, which is not worth a warning. */
static bool in_file(char *const *lines, int n, const char *entry)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(lines[i], entry))
            return true;
    return false;
}

int cs__config_load(struct cs_config *out, char *const *env, const char *slice_path)
{
    char buf[SLICE_FILE_MAX];
    char *lines[SLICE_LINES_MAX];
    int nfile = read_slice_file(slice_path, buf, sizeof buf, lines, SLICE_LINES_MAX);
    if (nfile < 0) {
        memset(out, 0, sizeof *out);
        return -EINVAL;
    }
    if (nfile == 0 && access(slice_path, F_OK))
        return cs__config_parse(out, env);
    /* The file's lines, then what the tenant may still set itself. */
    size_t nenv = 0;
    while (env && env[nenv])
        nenv++;
    char **merged = calloc((size_t)nfile + nenv + 1, sizeof *merged);
    if (!merged) {
        memset(out, 0, sizeof *out);
        return -EINVAL;
    }
    int k = 0, ignored = 0;
    for (int i = 0; i < nfile; i++)
        merged[k++] = lines[i];
    for (size_t i = 0; i < nenv; i++) {
        int id = option_of(env[i]);
        if (id < 0 || tenant_may_set((enum opt_id)id))
            merged[k++] = env[i];
        else if (!in_file(lines, nfile, env[i]) && !ignored++)
            cs_warn("config", "%.80s and any other slice variable of the environment are "
                    "ignored: the slice file %s sets the slice", env[i], slice_path);
    }
    int rc = cs__config_parse(out, merged);
    out->from_slice_file = true;
    free(merged);
    return rc;
}

int cs__config_from_env(struct cs_config *out)
{
    return cs__config_load(out, environ, CS_SLICE_FILE);
}

uint64_t cs__config_mem_limit(const struct cs_config *c, int dev)
{
    if (dev >= 0 && dev < CS_MAX_DEVICES && c->mem_limit_set[dev])
        return c->mem_limit[dev];
    return c->mem_limit_all;
}

uint32_t cs__config_sm_limit(const struct cs_config *c, int dev)
{
    uint32_t v = c->sm_limit_all;
    if (dev >= 0 && dev < CS_MAX_DEVICES && c->sm_limit_set[dev])
        v = c->sm_limit[dev];
    return v >= 100 ? 0 : v; /* 100% is no limit */
}

void cs__config_dump(const struct cs_config *c, char *buf, size_t len)
{
    static const char *const policy_names[] = {"default", "force", "disable"};
    static const char *const log_names[] = {"error", "warn", "info", "debug"};
    size_t n = 0;
#define APPEND(...)                                                         \
    do {                                                                    \
        if (n < len) {                                                      \
            int w_ = snprintf(buf + n, len - n, __VA_ARGS__);               \
            n += w_ > 0 ? (size_t)w_ : 0;                                   \
        }                                                                   \
    } while (0)
    for (int dev = 0; dev < CS_MAX_DEVICES; dev++) {
        uint64_t m = cs__config_mem_limit(c, dev);
        uint32_t s = cs__config_sm_limit(c, dev);
        if (m || s)
            APPEND("device %d: memory limit %llu bytes, sm limit %u%%\n", dev,
                   (unsigned long long)m, s);
    }
    if (c->from_slice_file)
        APPEND("slice file: %s\n", CS_SLICE_FILE);
    APPEND("ledger: %s\n", c->ledger_path[0] ? c->ledger_path : "(private)");
    if (c->hami_path[0])
        APPEND("hami region: %s\n", c->hami_path);
    if (c->disable_control)
        APPEND("control: disabled (CUDA_DISABLE_CONTROL)\n");
    APPEND("ledger trust: %s\n", c->ledger_trust_dir ? "directory" : "owner");
    APPEND("policy: %s\npriority: %d\n", policy_names[c->policy % 3], (int)c->priority);
    APPEND("hostpid broker: %s\nhost procfs: %s\n", c->hostpid_broker ? "on" : "off",
           c->host_procfs[0] ? c->host_procfs : "(none)");
    APPEND("log level: %s\n", log_names[c->log_level & 3]);
    if (c->park_pct)
        APPEND("parking: budgets up to %u%% of the card, idle after %u ms\n", c->park_pct,
               c->park_idle_ms);
#undef APPEND
}

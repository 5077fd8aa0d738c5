/*
 * `cushare cdi --name NAME [--mem ..] [--sm ..] [...]`: a Container Device
 * Interface spec (cncf-tags/container-device-interface SPEC.md) for one
 * slice, so that DRA or the device-plugin API can hand a container a
 * slice without HAMi: `--device cushare.io/slice=NAME`.
 *
 * The device's containerEdits carry the environment contract (HAMi's
 * names, as `cushare run` writes them), and five bind mounts:
 *   the library (read-only) at CS_CDI_LIB;
 *   STATE/slices/NAME.env (read-only) at CS_SLICE_FILE: the same variables,
 *     which the library then takes from there and not from the environment,
 *     so a process that clears or rewrites its environment stays sliced;
 *   STATE/ld.so.preload (read-only, naming CS_CDI_LIB) at /etc/ld.so.preload,
 *     so the library is in every dynamic process of the container, whatever
 *     the process does to its environment (docs/interposition.md);
 *   STATE/slices/NAME, the slice's ledger directory, at the same path (so
 *     `cushare status` on the node reads the path the tenants write);
 *   CS_NODE_DIR (the board, the registry and the broker's socket
 *     directory) at the same path.
 * It makes the host files the spec names (the preload file, the slice file
 * and the slice directory) and writes the spec by temporary file and rename, so a
 * runtime never reads half of one. cdiVersion 0.5.0: the oldest that has
 * everything used here, so podman 4.3 (Debian 12) reads it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/config.h"
#include "core/path.h"
#include "cushare/ledger.h"

#define CS_CDI_VERSION "0.5.0"
#define CS_CDI_KIND "cushare.io/slice"
#define CS_CDI_LIB "/usr/local/cushare/libcushare.so"
#define CS_CDI_HOST_LIB "/usr/local/vgpu/libvgpu.so"
#define CS_CDI_STATE "/var/lib/cushare"
#define MAX_ENV (2 * CS_MAX_DEVICES + 8)

static const char usage[] =
    "usage: cushare cdi --name NAME [--mem SIZE[,SIZE...]] [--sm PCT[,PCT...]]\n"
    "                   [--kind VENDOR/CLASS] [--library PATH] [--state DIR]\n"
    "                   [--output FILE]\n"
    "  --name     the device name: --device " CS_CDI_KIND "=NAME\n"
    "             (letters, digits, _ . : -)\n"
    "  --mem/--sm the slice's budget and compute share, as for `cushare run`\n"
    "             (one is needed)\n"
    "  --kind     the spec's kind (default " CS_CDI_KIND ")\n"
    "  --library  libcushare.so on the node (default " CS_CDI_HOST_LIB ")\n"
    "  --state    node directory for the preload file and the slices' ledger\n"
    "             directories\n"
    "             (default " CS_CDI_STATE ")\n"
    "  --output   the spec file, e.g. /etc/cdi/cushare-NAME.json (default: stdout)\n"
    "examples:\n"
    "  cushare cdi --name team-a --mem 8GiB --sm 50 \\\n"
    "              --output /etc/cdi/cushare-team-a.json\n"
    "  podman run --device " CS_CDI_KIND "=team-a IMAGE nvidia-smi\n";

struct cdi_args {
    const char *name, *mem, *sm, *kind, *library, *state, *output;
};

/* SPEC.md: a device name is alphanumerics, '-', '_', '.' and ':', starting
 * with an alphanumeric. */
static int valid_name(const char *s)
{
    if (!*s || !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", *s))
        return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:") ==
           strlen(s) && strlen(s) < 128;
}

/* SPEC.md: kind is VENDOR/CLASS; vendor a domain-like name, class
 * alphanumerics, '-', '_' and '.'. */
static int valid_kind(const char *s)
{
    const char *slash = strchr(s, '/');
    static const char an[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/') || strlen(s) > 200)
        return 0;
    size_t vlen = (size_t)(slash - s);
    return strchr(an, s[0]) && strchr(an, s[vlen - 1]) &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") == vlen &&
           strchr(an, slash[1]) &&
           strspn(slash + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
               strlen(slash + 1);
}

/* An absolute path that needs no JSON escaping and that ld.so.preload
 * (whitespace- and colon-separated) can name. */
static int valid_path(const char *s)
{
    if (s[0] != '/' || strlen(s) >= 2048)
        return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x21 || *p == 0x7f || *p == '"' || *p == '\\' || *p == ':')
            return 0;
    return 1;
}

/* --mem/--sm LIST → "VAR=v" (one value) or "VAR_<i>=v" entries appended to
 * env[*n]; values checked as `cushare run` checks them. */
static int limit_env(const char *opt, const char *var, const char *list, char env[][256], int *n)
{
    char buf[1024];
    char *items[CS_MAX_DEVICES];
    if (strlen(list) >= sizeof buf)
        return cs_cli_usage_error("cdi", "--%s value is too long", opt);
    strcpy(buf, list);
    int k = cs__split_list(buf, items, CS_MAX_DEVICES);
    if (k == -E2BIG)
        return cs_cli_usage_error("cdi", "--%s: at most %d devices", opt, CS_MAX_DEVICES);
    if (k < 0)
        return cs_cli_usage_error("cdi", "--%s '%s' has an empty value: give one value for "
                                  "every device, e.g. %s", opt, list,
                                  strcmp(opt, "mem") ? "25,50" : "2GiB,6GiB");
    for (int i = 0; i < k; i++) {
        char val[64];
        int rc = cs_cli_limit_value("cdi", !strcmp(opt, "mem"), items[i], val, sizeof val);
        if (rc)
            return rc;
        if (k == 1)
            snprintf(env[(*n)++], 256, "%s=%s", var, val);
        else
            snprintf(env[(*n)++], 256, "%s_%d=%s", var, i, val);
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct cdi_args *a)
{
    static const struct { const char *flag; size_t off; } flags[] = {
        {"--name", offsetof(struct cdi_args, name)},
        {"--mem", offsetof(struct cdi_args, mem)},
        {"--sm", offsetof(struct cdi_args, sm)},
        {"--kind", offsetof(struct cdi_args, kind)},
        {"--library", offsetof(struct cdi_args, library)},
        {"--state", offsetof(struct cdi_args, state)},
        {"--output", offsetof(struct cdi_args, output)},
    };
    *a = (struct cdi_args){.kind = CS_CDI_KIND, .library = CS_CDI_HOST_LIB,
                           .state = CS_CDI_STATE};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return -1;
        }
        size_t f = 0;
        while (f < sizeof flags / sizeof flags[0] && strcmp(argv[i], flags[f].flag))
            f++;
        if (f == sizeof flags / sizeof flags[0])
            return cs_cli_unknown_option("cdi", argv[i], usage);
        if (i + 1 == argc)
            return cs_cli_usage_error("cdi", "%s needs a value; see cushare help cdi", argv[i]);
        *(const char **)((char *)a + flags[f].off) = argv[++i];
    }
    if (!a->name)
        return cs_cli_usage_error("cdi", "--name is missing: the device name containers ask "
                                  "for, e.g. --name team-a");
    if (!valid_name(a->name))
        return cs_cli_usage_error("cdi", "--name '%s' is not a CDI device name: use letters, "
                                  "digits, '_', '.', ':' and '-', starting with a letter or "
                                  "digit", a->name);
    if (!valid_kind(a->kind))
        return cs_cli_usage_error("cdi", "--kind '%s' is not VENDOR/CLASS, e.g. %s", a->kind,
                                  CS_CDI_KIND);
    if (!a->mem && !a->sm)
        return cs_cli_usage_error("cdi", "a slice needs --mem or --sm (or both), e.g. --mem "
                                  "4GiB --sm 25");
    if (!valid_path(a->library) || !valid_path(a->state))
        return cs_cli_usage_error("cdi", "--library and --state must be absolute paths without "
                                  "spaces, ':', '\"' or '\\' (got '%s' and '%s')", a->library,
                                  a->state);
    if (access(a->library, R_OK))
        return cs_cli_usage_error("cdi", "--library %s: %s: install libcushare.so there first, "
                                  "by copy and rename, or name where it is", a->library,
                                  strerror(errno));
    return 0;
}

/* Writes `text` to `path` (mode 0644) by temporary file and rename: a
 * runtime or a starting tenant never reads half of one. */
static int write_by_rename(const char *path, const char *text)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (f) {
        ok = fputs(text, f) >= 0 && fchmod(fileno(f), 0644) == 0;
        ok = fclose(f) == 0 && ok && rename(tmp, path) == 0;
    }
    if (!ok) {
        fprintf(stderr, "cushare: cdi: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* STATE/slices/NAME.env: the slice file (core/config.h), mounted read-only
 * at CS_SLICE_FILE. Outside the slice's directory, which its containers
 * may write. */
static void slice_file_path(const struct cdi_args *a, char *path, size_t len)
{
    snprintf(path, len, "%s/slices/%s.env", a->state, a->name);
}

/* STATE/ld.so.preload naming the library's container path, the slice file, CS_NODE_DIR,
 * and the slice's ledger directory (1777: the container's processes, whatever
 * their uid, create and join the ledger there; only this slice's
 * containers see it). */
static int make_host_files(const struct cdi_args *a, const char *slice_dir,
                           const char *slice_text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/slices", a->state);
    if ((mkdir(a->state, 0755) && errno != EEXIST) || (mkdir(path, 0755) && errno != EEXIST) ||
        (mkdir(slice_dir, 01777) && errno != EEXIST) || chmod(slice_dir, 01777)) {
        fprintf(stderr, "cushare: cdi: cannot make %s: %s (is --state writable?)\n", slice_dir,
                strerror(errno));
        return -1;
    }
    /* The node directory is a mount source: a runtime refuses a spec whose
     * source is missing, and no broker may have made it yet. */
    if (mkdir(CS_NODE_DIR, CS_NODE_DIR_MODE) == 0)
        chmod(CS_NODE_DIR, CS_NODE_DIR_MODE);
    else if (errno != EEXIST) {
        fprintf(stderr, "cushare: cdi: cannot make %s: %s\n", CS_NODE_DIR, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/ld.so.preload", a->state);
    char preload[sizeof CS_CDI_LIB + 1];
    snprintf(preload, sizeof preload, "%s\n", CS_CDI_LIB);
    if (write_by_rename(path, preload))
        return -1;
    slice_file_path(a, path, sizeof path);
    return write_by_rename(path, slice_text);
    return 0;
}

static void print_mount(FILE *f, const char *host, const char *ctr, int ro, int last)
{
    fprintf(f, "          {\"hostPath\": \"%s\", \"containerPath\": \"%s\", \"type\": \"bind\",\n"
               "           \"options\": [\"rbind\", \"%s\", \"nosuid\", \"nodev\"]}%s\n",
            host, ctr, ro ? "ro" : "rw", last ? "" : ",");
}

static void print_spec(FILE *f, const struct cdi_args *a, char env[][256], int nenv,
                       const char *slice_dir)
{
    char preload[4096];
    snprintf(preload, sizeof preload, "%s/ld.so.preload", a->state);
    fprintf(f, "{\n  \"cdiVersion\": \"%s\",\n  \"kind\": \"%s\",\n  \"devices\": [\n"
               "    {\n      \"name\": \"%s\",\n      \"containerEdits\": {\n        \"env\": [\n",
            CS_CDI_VERSION, a->kind, a->name);
    for (int i = 0; i < nenv; i++)
        fprintf(f, "          \"%s\"%s\n", env[i], i + 1 < nenv ? "," : "");
    fprintf(f, "        ],\n        \"mounts\": [\n");
    print_mount(f, a->library, CS_CDI_LIB, 1, 0);
    print_mount(f, preload, "/etc/ld.so.preload", 1, 0);
    char slice_file[4096];
    slice_file_path(a, slice_file, sizeof slice_file);
    print_mount(f, slice_file, CS_SLICE_FILE, 1, 0);
    print_mount(f, slice_dir, slice_dir, 0, 0);
    print_mount(f, CS_NODE_DIR, CS_NODE_DIR, 0, 1);
    fprintf(f, "        ]\n      }\n    }\n  ]\n}\n");
}

int cs_cmd_cdi(int argc, char **argv)
{
    struct cdi_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? CS_EXIT_OK : rc;
    char env[MAX_ENV][256];
    int nenv = 0;
    if ((a.mem && (rc = limit_env("mem", "CUDA_DEVICE_MEMORY_LIMIT", a.mem, env, &nenv))) ||
        (a.sm && (rc = limit_env("sm", "CUDA_DEVICE_SM_LIMIT", a.sm, env, &nenv))))
        return rc;
    char slice_dir[4096];
    snprintf(slice_dir, sizeof slice_dir, "%s/slices/%s", a.state, a.name);
    if (strlen(slice_dir) > 200)
        return cs_cli_usage_error("cdi", "--state '%s' is too long", a.state);
    /* The slice's directory is only its containers': its ledger may be
     * joined by every uid there (docs/ledger.md, "directory" trust). */
    snprintf(env[nenv++], 256, "CUDA_DEVICE_MEMORY_SHARED_CACHE=%.200s/ledger", slice_dir);
    snprintf(env[nenv++], 256, "CUSHARE_LEDGER_TRUST=directory");
    snprintf(env[nenv++], 256, "LIBVGPU_HOSTPID_BROKER=1");
    /* The same lines as the environment, in the slice file the library
     * reads instead of the environment when it exists. */
    char slice_text[MAX_ENV * 257 + 64] = "# cushare slice (cushare cdi): read-only in the container\n";
    for (int i = 0; i < nenv; i++) {
        strcat(slice_text, env[i]);
        strcat(slice_text, "\n");
    }
    if (make_host_files(&a, slice_dir, slice_text))
        return CS_EXIT_FAIL;
    if (!a.output) {
        print_spec(stdout, &a, env, nenv, slice_dir);
        return fflush(stdout) ? CS_EXIT_FAIL : CS_EXIT_OK;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", a.output, (int)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (f) {
        print_spec(f, &a, env, nenv, slice_dir);
        ok = fchmod(fileno(f), 0644) == 0;
        ok = fclose(f) == 0 && ok && rename(tmp, a.output) == 0;
    }
    if (!ok) {
        fprintf(stderr, "cushare: cdi: cannot write %s: %s\n", a.output, strerror(errno));
        unlink(tmp);
        return CS_EXIT_FAIL;
    }
    return CS_EXIT_OK;
}

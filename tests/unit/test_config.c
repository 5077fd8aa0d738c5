/*
 * The configuration table parses strictly: sizes with binary suffixes and
 * overflow checks, percentages, policies, booleans, absolute paths and the
 * log level; any malformed value is an error (never a silently dropped
 * limit), a per-device name that names no device we manage is an error,
 * lists with a missing value are errors, and the per-device variable wins
 * over the all-devices one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/config.h"
#include "core/log.h"

static int parse(struct cs_config *c, const char *const *env)
{
    return cs__config_parse(c, (char *const *)env);
}

/* Each environment alone must fail the whole parse. */
static void refused(const char *const env[])
{
    struct cs_config c;
    for (int i = 0; env[i]; i++) {
        const char *one[] = {env[i], NULL};
        if (parse(&c, one) != -EINVAL) {
            fprintf(stderr, "%s was accepted\n", env[i]);
            exit(1);
        }
    }
}

static void sizes(void)
{
    uint64_t v;
    CHECK_EQ(cs__parse_size("4096", &v), 0);
    CHECK_EQ_U(v, 4096);
    CHECK_EQ(cs__parse_size("4g", &v), 0);
    CHECK_EQ_U(v, 4ull << 30);
    CHECK_EQ(cs__parse_size("4GiB", &v), 0);
    CHECK_EQ_U(v, 4ull << 30);
    CHECK_EQ(cs__parse_size("4096m", &v), 0);
    CHECK_EQ_U(v, 4ull << 30);
    CHECK_EQ(cs__parse_size("1T", &v), 0);
    CHECK_EQ_U(v, 1ull << 40);
    CHECK_EQ(cs__parse_size("0", &v), 0);
    CHECK_EQ_U(v, 0);
    const char *bad[] = {"", "g", "4x", "4 g", "-1", "4gb2", "4.5g", " 4", "4gig", NULL};
    for (int i = 0; bad[i]; i++)
        CHECK_EQ(cs__parse_size(bad[i], &v), -EINVAL);
    CHECK_EQ(cs__parse_size("18446744073709551616", &v), -ERANGE);
    CHECK_EQ(cs__parse_size("17179869184g", &v), -ERANGE);

    /* What a person types on the command line needs a unit, but 0. */
    CHECK_EQ(cs__parse_size_unit("3", &v), -EINVAL);
    CHECK_EQ(cs__parse_size_unit("4096", &v), -EINVAL);
    CHECK_EQ(cs__parse_size_unit("3B", &v), 0);
    CHECK_EQ_U(v, 3);
    CHECK_EQ(cs__parse_size_unit("3GiB", &v), 0);
    CHECK_EQ_U(v, 3ull << 30);
    CHECK_EQ(cs__parse_size_unit("0", &v), 0);
    CHECK_EQ_U(v, 0);
    CHECK_EQ(cs__parse_size_unit("4x", &v), -EINVAL);

    /* Fractions of a binary unit, rounded to the nearest byte. */
    CHECK_EQ(cs__parse_size_typed("1.5GiB", &v), CS_SIZE_OK);
    CHECK_EQ_U(v, 3ull << 29);
    CHECK_EQ(cs__parse_size_typed("0.5k", &v), CS_SIZE_OK);
    CHECK_EQ_U(v, 512);
    CHECK_EQ(cs__parse_size_typed("1.3KiB", &v), CS_SIZE_OK);
    CHECK_EQ_U(v, 1331); /* 1331.2 */
    CHECK_EQ(cs__parse_size_typed("1.0007KiB", &v), CS_SIZE_OK);
    CHECK_EQ_U(v, 1025); /* 1024.7168 rounds up */
    CHECK_EQ(cs__parse_size_typed("4gib", &v), CS_SIZE_OK);
    CHECK_EQ_U(v, 4ull << 30);
    CHECK_EQ(cs__parse_size_typed("4G", &v), CS_SIZE_OK);
    CHECK_EQ_U(v, 4ull << 30);
    CHECK_EQ(cs__parse_size_typed("16777215.5TiB", &v), CS_SIZE_OK);
    CHECK_EQ_U(v, (16777215ull << 40) + (1ull << 39));
    /* Each mistake has its own answer (the CLI's message names the fix). */
    CHECK_EQ(cs__parse_size_typed("-1GiB", &v), CS_SIZE_NEGATIVE);
    CHECK_EQ(cs__parse_size_typed("-.5GiB", &v), CS_SIZE_NEGATIVE);
    CHECK_EQ(cs__parse_size_typed("4gb", &v), CS_SIZE_SI_UNIT);
    CHECK_EQ(cs__parse_size_typed("4GB", &v), CS_SIZE_SI_UNIT);
    CHECK_EQ(cs__parse_size_typed("1.5MB", &v), CS_SIZE_SI_UNIT);
    CHECK_EQ(cs__parse_size_typed("3", &v), CS_SIZE_NO_UNIT);
    CHECK_EQ(cs__parse_size_typed("1.5B", &v), CS_SIZE_FRACTION);
    CHECK_EQ(cs__parse_size_typed("16777216TiB", &v), CS_SIZE_TOO_LARGE);
    CHECK_EQ(cs__parse_size_typed("16777215.99999999999999999TiB", &v), CS_SIZE_TOO_LARGE); /* 2^64 */
    const char *junk[] = {"", "GiB", ".5GiB", "4.GiB", "4..5GiB", "4 GiB", "+4GiB", "4GiBs",
                          "4xB", "1e9B", NULL};
    for (int i = 0; junk[i]; i++)
        CHECK_EQ(cs__parse_size_typed(junk[i], &v), CS_SIZE_NOT_A_SIZE);
}

static void lists(void)
{
    char *items[4];
    char ok[] = "1GiB,2GiB,3GiB";
    CHECK_EQ(cs__split_list(ok, items, 4), 3);
    CHECK_STREQ(items[0], "1GiB");
    CHECK_STREQ(items[2], "3GiB");
    char one[] = "25";
    CHECK_EQ(cs__split_list(one, items, 4), 1);
    CHECK_STREQ(items[0], "25");
    /* An empty field is refused (it used to shift "3" onto device 2). */
    const char *holes[] = {"1GiB,2GiB,,3", ",1g", "1g,", "", ",", "1g,,", NULL};
    for (int i = 0; holes[i]; i++) {
        char buf[32];
        strcpy(buf, holes[i]);
        if (cs__split_list(buf, items, 4) != -EINVAL) {
            fprintf(stderr, "list '%s' was accepted\n", holes[i]);
            exit(1);
        }
    }
    char many[] = "1,2,3,4,5";
    CHECK_EQ(cs__split_list(many, items, 4), -E2BIG);
}

static void log_levels(void)
{
    int l;
    const char *ok[][2] = {{"error", "0"}, {"warn", "1"}, {"info", "2"}, {"debug", "3"}};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(cs__log_parse_level(ok[i][0], &l), 0);
        CHECK_EQ(l, i);
        CHECK_EQ(cs__log_parse_level(ok[i][1], &l), 0);
        CHECK_EQ(l, i);
    }
    CHECK_EQ(cs__log_parse_level("WARNING", &l), 0);
    CHECK_EQ(l, CS_LOG_WARN);
    const char *bad[] = {"garbage", "4", "-1", "warn ", "verbose", "", NULL};
    for (int i = 0; bad[i]; i++)
        CHECK_EQ(cs__log_parse_level(bad[i], &l), -EINVAL);
}

static void table(void)
{
    struct cs_config c;
    const char *ok[] = {"CUDA_DEVICE_MEMORY_LIMIT=8g",
                        "CUDA_DEVICE_MEMORY_LIMIT_1=2g",
                        "CUDA_DEVICE_MEMORY_LIMIT_15=1g",
                        "CUDA_DEVICE_SM_LIMIT=25",
                        "CUDA_DEVICE_SM_LIMIT_2=100",
                        "GPU_CORE_UTILIZATION_POLICY=FORCE",
                        "CUDA_TASK_PRIORITY=-3",
                        "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/x.ledger",
                        "LIBVGPU_HOSTPID_BROKER=1",
                        "CUSHARE_HAMI_SIGNALS=1",
                        "CUSHARE_BOARD=/tmp/board",
                        "CUSHARE_SM_BURST_US=4000",
                        "CUSHARE_SM_SHARE=time",
                        "CUSHARE_LOG_LEVEL=debug",
                        "CUSHARE_LEDGER_TRUST=directory",
                        "UNRELATED=x",
                        NULL};
    CHECK_EQ(parse(&c, ok), 0);
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 8ull << 30);
    CHECK_EQ_U(cs__config_mem_limit(&c, 1), 2ull << 30);
    CHECK_EQ_U(cs__config_mem_limit(&c, 15), 1ull << 30);
    CHECK_EQ(cs__config_sm_limit(&c, 0), 25);
    CHECK_EQ(cs__config_sm_limit(&c, 2), 0); /* 100 % is no limit */
    CHECK_EQ(c.policy, CS_POLICY_FORCE);
    CHECK_EQ(c.priority, -3);
    CHECK_STREQ(c.ledger_path, "/tmp/x.ledger");
    CHECK(c.hostpid_broker);
    CHECK(c.hami_signals);
    CHECK_STREQ(c.board_path, "/tmp/board");
    CHECK_EQ(c.sm_burst_us, 4000);
    CHECK(c.sm_share_time);
    CHECK_EQ(c.log_level, CS_LOG_DEBUG);
    CHECK(c.ledger_trust_dir);

    const char *bad[] = {
        "CUDA_DEVICE_MEMORY_LIMIT=4x",
        "CUDA_DEVICE_MEMORY_LIMIT_3=lots",
        "CUDA_DEVICE_SM_LIMIT=101",
        "CUDA_DEVICE_SM_LIMIT_0=25%",
        "GPU_CORE_UTILIZATION_POLICY=sometimes",
        "CUDA_TASK_PRIORITY=high",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=relative/path",
        "LIBVGPU_HOSTPID_BROKER=yes",
        "CUSHARE_HAMI_SIGNALS=2",
        "CUSHARE_BOARD=board",
        "CUSHARE_SM_BURST_US=50",
        "CUSHARE_SM_BURST_US=4ms",
        "CUSHARE_SM_SHARE=clock",
        "CUSHARE_LEDGER_TRUST=any",
        /* Before, a bad log level and per-device names that name no
         * device we manage were accepted without a word. */
        "CUSHARE_LOG_LEVEL=garbage",
        "CUDA_DEVICE_MEMORY_LIMIT_16=1g",
        "CUDA_DEVICE_SM_LIMIT_16=10",
        "CUDA_DEVICE_MEMORY_LIMIT_99999999999999999999=1g",
        "CUDA_DEVICE_MEMORY_LIMIT_01=1g",
        "CUDA_DEVICE_MEMORY_LIMIT_-1=1g",
        "CUDA_DEVICE_MEMORY_LIMIT_+1=1g",
        "CUDA_DEVICE_MEMORY_LIMIT_x=1g",
        "CUDA_DEVICE_MEMORY_LIMIT_=1g",
        NULL,
    };
    refused(bad);

    /* An empty value is unset (HAMi's behaviour), not an error. */
    const char *empty[] = {"CUDA_DEVICE_MEMORY_LIMIT=", "CUSHARE_LOG_LEVEL=",
                           "CUDA_DEVICE_SM_LIMIT_16=", NULL};
    CHECK_EQ(parse(&c, empty), 0);
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 0);
    CHECK_EQ(c.log_level, CS_LOG_WARN);
    /* The first entry of a name counts, as for getenv. */
    const char *twice[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", "CUDA_DEVICE_MEMORY_LIMIT=2g", NULL};
    CHECK_EQ(parse(&c, twice), 0);
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 1ull << 30);
}

/* HAMi's variables keep HAMi's meanings (docs/kubernetes.md). */
static void hami_contract(void)
{
    struct cs_config c;
    const char *cache[] = {"CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/ab-12.cache",
                           "CUDA_DEVICE_MEMORY_LIMIT_0=3000m", "CUDA_DEVICE_SM_LIMIT=0", NULL};
    CHECK_EQ(parse(&c, cache), 0);
    CHECK_STREQ(c.hami_path, "/usr/local/vgpu/ab-12.cache");
    CHECK_STREQ(c.ledger_path, "/usr/local/vgpu/ab-12.cushare");
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 3000ull << 20);
    CHECK_EQ_U(cs__config_sm_limit(&c, 0), 0);
    const char *plain[] = {"CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/t.ledger", NULL};
    CHECK_EQ(parse(&c, plain), 0);
    CHECK_STREQ(c.hami_path, "");
    CHECK_STREQ(c.ledger_path, "/tmp/t.ledger");

    const char *logs[] = {"LIBCUDA_LOG_LEVEL=4", NULL};
    CHECK_EQ(parse(&c, logs), 0);
    CHECK_EQ(c.log_level, CS_LOG_DEBUG);
    const char *both[] = {"LIBCUDA_LOG_LEVEL=4", "CUSHARE_LOG_LEVEL=error", NULL};
    CHECK_EQ(parse(&c, both), 0);
    CHECK_EQ(c.log_level, CS_LOG_ERROR);
    const char *zero[] = {"LIBCUDA_LOG_LEVEL=0", NULL};
    CHECK_EQ(parse(&c, zero), 0);
    CHECK_EQ(c.log_level, CS_LOG_ERROR);

    const char *off[] = {"CUDA_DISABLE_CONTROL=true", "CUDA_DEVICE_MEMORY_LIMIT=1g",
                         "CUDA_DEVICE_SM_LIMIT_0=20", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/v/x.cache",
                         NULL};
    CHECK_EQ(parse(&c, off), 0);
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 0);
    CHECK_EQ_U(cs__config_sm_limit(&c, 0), 0);
    CHECK_STREQ(c.ledger_path, "");
    CHECK_STREQ(c.hami_path, "");
    const char *on[] = {"CUDA_DISABLE_CONTROL=false", "CUDA_DEVICE_MEMORY_LIMIT=1g",
                        "CUDA_OVERSUBSCRIBE=false", NULL};
    CHECK_EQ(parse(&c, on), 0);
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 1ull << 30);

    const char *bad[] = {"CUDA_OVERSUBSCRIBE=true", "CUDA_DISABLE_CONTROL=yes",
                         "LIBCUDA_LOG_LEVEL=loud", "LIBCUDA_LOG_LEVEL=-1", NULL};
    refused(bad);
}

/* Writes `text` to a fresh file and returns its path (static storage). */
static const char *slice_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/cs_slice_XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK_EQ((long)write(fd, text, strlen(text)), (long)strlen(text));
    close(fd);
    return path;
}

static int load(struct cs_config *c, const char *const *env, const char *path)
{
    return cs__config_load(c, (char *const *)env, path);
}

/* The slice file wins over everything the tenant's environment says about
 * the slice; only the log levels stay the tenant's; a file that exists
 * but cannot be used fails the parse. */
static void slice_file_locks_the_slice(void)
{
    struct cs_config c;
    const char *escape[] = {"CUDA_DEVICE_MEMORY_LIMIT=100g", "CUDA_DEVICE_MEMORY_LIMIT_0=100g",
                            "CUDA_DEVICE_SM_LIMIT=0", "CUDA_DISABLE_CONTROL=true",
                            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/mine.ledger",
                            "GPU_CORE_UTILIZATION_POLICY=disable", "CUSHARE_LOG_LEVEL=debug",
                            "HOME=/root", NULL};
    const char *none[] = {NULL};

    CHECK_EQ(load(&c, escape, "/nonexistent/slice.env"), 0); /* no file: the environment */
    CHECK(!c.from_slice_file);
    CHECK(c.disable_control);

    const char *p = slice_file("# slice t1\n\nCUDA_DEVICE_MEMORY_LIMIT=1g\n"
                               "  CUDA_DEVICE_SM_LIMIT=25\n"
                               "CUDA_DEVICE_MEMORY_SHARED_CACHE=/var/slices/t1/ledger\n");
    CHECK_EQ(load(&c, escape, p), 0);
    CHECK(c.from_slice_file);
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 1ull << 30);
    CHECK_EQ_U(cs__config_mem_limit(&c, 3), 1ull << 30);
    CHECK_EQ(cs__config_sm_limit(&c, 0), 25);
    CHECK(!c.disable_control);
    CHECK_EQ(c.policy, CS_POLICY_DEFAULT);
    CHECK_STREQ(c.ledger_path, "/var/slices/t1/ledger");
    CHECK_EQ(c.log_level, CS_LOG_DEBUG); /* the tenant's own */
    CHECK_EQ(load(&c, none, p), 0);     /* cleared environment: the same slice */
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 1ull << 30);
    CHECK_STREQ(c.ledger_path, "/var/slices/t1/ledger");
    unlink(p);

    p = slice_file(""); /* an empty slice file: no limits, still not the tenant's say */
    CHECK_EQ(load(&c, escape, p), 0);
    CHECK(c.from_slice_file && !c.disable_control && !c.ledger_path[0]);
    unlink(p);

    p = slice_file("CUDA_DEVICE_MEMORY_LIMIT=1g\nPATH=/bin\n"); /* not ours: refused */
    CHECK_EQ(load(&c, none, p), -EINVAL);
    unlink(p);
    p = slice_file("CUDA_DEVICE_MEMORY_LIMIT=lots\n"); /* a bad value: refused */
    CHECK_EQ(load(&c, none, p), -EINVAL);
    unlink(p);
    CHECK_EQ(load(&c, none, "/tmp"), -EINVAL); /* exists, unreadable as a file */
}

int main(void)
{
    slice_file_locks_the_slice();
    hami_contract();
    sizes();
    lists();
    log_levels();
    table();
    printf("configuration parses strictly\n");
    return 0;
}

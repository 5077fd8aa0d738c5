/*
 * The configuration table parses strictly: sizes with binary suffixes and
 * overflow checks, percentages, policies, booleans and absolute paths; any
 * malformed value is an error (never a silently dropped limit), and the
 * per-device variable wins over the all-devices one.
 */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "core/config.h"

struct kv {
    const char *k, *v;
};

static const char *lookup(const char *name, void *ctx)
{
    for (const struct kv *p = ctx; p->k; p++)
        if (!strcmp(p->k, name))
            return p->v;
    return NULL;
}

static int parse(struct cs_config *c, const struct kv *env)
{
    return cs__config_parse(c, lookup, (void *)env);
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
}

static void table(void)
{
    struct cs_config c;
    const struct kv ok[] = {{"CUDA_DEVICE_MEMORY_LIMIT", "8g"},
                            {"CUDA_DEVICE_MEMORY_LIMIT_1", "2g"},
                            {"CUDA_DEVICE_SM_LIMIT", "25"},
                            {"CUDA_DEVICE_SM_LIMIT_2", "100"},
                            {"GPU_CORE_UTILIZATION_POLICY", "FORCE"},
                            {"CUDA_TASK_PRIORITY", "-3"},
                            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/x.ledger"},
                            {"LIBVGPU_HOSTPID_BROKER", "1"},
                            {"CUSHARE_HAMI_SIGNALS", "1"},
                            {"CUSHARE_BOARD", "/tmp/board"},
                            {"CUSHARE_SM_BURST_US", "4000"},
                            {"CUSHARE_SM_SHARE", "time"},
                            {NULL, NULL}};
    CHECK_EQ(parse(&c, ok), 0);
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 8ull << 30);
    CHECK_EQ_U(cs__config_mem_limit(&c, 1), 2ull << 30);
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

    /* Each malformed value alone fails the whole parse. */
    const struct kv bad[][2] = {
        {{"CUDA_DEVICE_MEMORY_LIMIT", "4x"}, {NULL, NULL}},
        {{"CUDA_DEVICE_MEMORY_LIMIT_3", "lots"}, {NULL, NULL}},
        {{"CUDA_DEVICE_SM_LIMIT", "101"}, {NULL, NULL}},
        {{"CUDA_DEVICE_SM_LIMIT_0", "25%"}, {NULL, NULL}},
        {{"GPU_CORE_UTILIZATION_POLICY", "sometimes"}, {NULL, NULL}},
        {{"CUDA_TASK_PRIORITY", "high"}, {NULL, NULL}},
        {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "relative/path"}, {NULL, NULL}},
        {{"LIBVGPU_HOSTPID_BROKER", "yes"}, {NULL, NULL}},
        {{"CUSHARE_HAMI_SIGNALS", "2"}, {NULL, NULL}},
        {{"CUSHARE_BOARD", "board"}, {NULL, NULL}},
        {{"CUSHARE_SM_BURST_US", "50"}, {NULL, NULL}},
        {{"CUSHARE_SM_BURST_US", "4ms"}, {NULL, NULL}},
        {{"CUSHARE_SM_SHARE", "clock"}, {NULL, NULL}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (parse(&c, bad[i]) != -EINVAL) {
            fprintf(stderr, "%s=%s was accepted\n", bad[i][0].k, bad[i][0].v);
            exit(1);
        }
    /* An empty value is unset (HAMi's behaviour), not an error. */
    const struct kv empty[] = {{"CUDA_DEVICE_MEMORY_LIMIT", ""}, {NULL, NULL}};
    CHECK_EQ(parse(&c, empty), 0);
    CHECK_EQ_U(cs__config_mem_limit(&c, 0), 0);
}

int main(void)
{
    sizes();
    table();
    printf("configuration parses strictly\n");
    return 0;
}

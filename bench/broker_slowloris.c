/*
 * The broker under a slowloris: latency of legitimate queries from root
 * while a throwaway unprivileged user holds N idle connections to a real
 * `cushare broker` process. The target: every request answered,
 * p99 under 50 ms. The regression test (tests/identity/
 * test_broker_slowloris.c) asserts only what a busy CI runner cannot
 * flake; this program measures, for docs/broker.md.
 *
 * Three modes, each on a fresh broker:
 *   none   no attacker: the baseline;
 *   hold   the attacker opens N connections (half silent, half with 3
 *          bytes of a request) and leaves each closed once the broker
 *          closes it;
 *   churn  the same, but it reconnects every connection the broker closes,
 *          as fast as it can: N held at all times.
 *
 *   usage: bench_broker_slowloris [--cushare PATH] [--attack N]
 *                                 [--requests N] [--rounds N]
 *
 * Requests are sequential, through the real client with the production
 * deadline (500 ms); between them the broker's descriptors and resident
 * memory are sampled. Exit 0 when every request succeeded with p99 < 50 ms
 * in every mode, 1 otherwise, 77 when it cannot run (not root, no
 * useradd).
 */
#include "identity/slowloris.h"

#include <libgen.h>

#define TARGET_P99_MS 50.0

struct opts {
    char cli[512];
    int attack, requests, rounds;
};

static struct sl_user user;
static struct sl_attack attack;
static struct sl_broker broker;

static void cleanup(void)
{
    sl_kill(&attack.pid);
    sl_kill(&broker.pid);
    sl_user_delete(&user);
}

static long rss_kib(pid_t pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    sl_slurp(path, buf, sizeof buf);
    const char *p = strstr(buf, "VmRSS:");
    return p ? atol(p + 6) : -1;
}

static void parse(int argc, char **argv, struct opts *o)
{
    char self[512];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(o->cli, sizeof o->cli, "%s/cushare", dirname(self));
    o->attack = 1000;
    o->requests = 40;
    o->rounds = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cushare"))
            snprintf(o->cli, sizeof o->cli, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--attack"))
            o->attack = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--requests"))
            o->requests = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            o->rounds = atoi(argv[i + 1]);
    }
    if (argc % 2 == 0 || o->attack < 1 || o->requests < 1 || o->rounds < 1 ||
        o->requests * o->rounds > 1024) {
        fprintf(stderr, "usage: %s [--cushare PATH] [--attack N] [--requests N] [--rounds N]"
                        " (requests x rounds <= 1024)\n", argv[0]);
        exit(2);
    }
}

enum mode { NONE, HOLD, CHURN };
static const char *const mode_name[] = {"none", "hold", "churn"};

/* One mode on a fresh broker; true when it met the target. */
static bool run_mode(const struct opts *o, enum mode m)
{
    sl_broker_start(&broker, o->cli);
    long rss0 = rss_kib(broker.pid);
    if (m != NONE)
        sl_attack_start(&attack, &user, broker.sock, o->attack, m == CHURN);
    static struct sl_queries q;
    memset(&q, 0, sizeof q);
    long rss_max = rss0;
    int total = o->requests * o->rounds;
    for (int r = 0; r < o->rounds; r++) {
        struct sl_queries part = {0};
        sl_query_many(&part, broker.sock, o->requests, CS_BROKER_TIMEOUT_MS, broker.pid);
        memcpy(q.ms + q.n, part.ms, sizeof part.ms[0] * (size_t)part.n);
        q.n += part.n;
        q.ok += part.ok;
        q.max_fds = part.max_fds > q.max_fds ? part.max_fds : q.max_fds;
        long rss = rss_kib(broker.pid);
        rss_max = rss > rss_max ? rss : rss_max;
    }
    if (m != NONE)
        sl_attack_stop(&attack);
    sl_broker_stop(&broker);
    const char *fm = broker.final_metrics;
    double p50 = id_percentile(q.ms, (size_t)total, 50);
    double p95 = id_percentile(q.ms, (size_t)total, 95);
    double p99 = id_percentile(q.ms, (size_t)total, 99);
    int over = 0;
    for (int i = 0; i < total; i++)
        over += q.ms[i] > TARGET_P99_MS;
    printf("%-5s attack %4d: %d/%d ok; p50 %.3f ms, p95 %.3f ms, p99 %.3f ms, max %.3f ms; "
           "%d over %.0f ms | broker: <= %d fds, RSS %ld -> <= %ld KiB, refused over cap %.0f, "
           "open peak %.0f",
           mode_name[m], m == NONE ? 0 : o->attack, q.ok, total, p50, p95, p99, q.ms[total - 1],
           over, TARGET_P99_MS, q.max_fds, rss0, rss_max,
           sl_metric(fm, "cushare_broker_rejected_total{reason=\"uid_cap\"}"),
           sl_metric(fm, "cushare_broker_connections_open_peak"));
    if (m != NONE)
        printf(" | attacker: %llu connects, %llu closed by the broker",
               (unsigned long long)attack.stats->connects,
               (unsigned long long)attack.stats->closed_by_broker);
    printf("\n");
    return q.ok == total && p99 < TARGET_P99_MS;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct opts o;
    parse(argc, argv, &o);
    if (geteuid() != 0)
        cs_skip("needs root to create a throwaway user (useradd) and drop to it");
    if (access(o.cli, X_OK) != 0)
        cs_skip("no cushare at %s (use --cushare PATH)", o.cli);
    sl_raise_nofile((rlim_t)o.attack + 256);
    char why[256];
    atexit(cleanup);
    if (sl_user_create(&user, why, sizeof why) != 0)
        cs_skip("%s", why);
    printf("broker %s; attacker %s (uid %u); %d rounds x %d sequential requests per mode, "
           "client deadline %d ms\n", o.cli, user.name, (unsigned)user.uid, o.rounds, o.requests,
           CS_BROKER_TIMEOUT_MS);
    bool ok = true;
    for (enum mode m = NONE; m <= CHURN; m++)
        ok &= run_mode(&o, m);
    printf("%s: every request answered and p99 < %.0f ms in every mode\n",
           ok ? "PASS" : "FAIL", TARGET_P99_MS);
    return ok ? 0 : 1;
}

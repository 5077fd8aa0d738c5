/*
 * `cushare exporter --listen ADDR:PORT [--interval MS] [--registry DIR/BASE]
 * [--scan DIR]... [--no-scan]`: the node view model (node_model.h) as
 * Prometheus text at GET /metrics, over HTTP/1.0 on an IPv4 address
 * (127.0.0.1 unless the operator says otherwise). Metric names and
 * labels: docs/node.md; HAMi's vGPU monitor names are served too, so
 * existing dashboards keep working.
 *
 * Bounded by construction: one thread, one poll loop; at most
 * MAX_CONNS connections (more wait in the kernel's backlog), each with a
 * REQ_MAX-byte request buffer and a READ_DEADLINE_MS deadline for its
 * whole request; responses are written with a send timeout, so a client
 * that stops reading costs SEND_TIMEOUT_S at most. The model is sampled
 * every interval whether or not anyone scrapes, so rates are always over
 * the model's window.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/node_model.h"
#include "core/clock.h"
#include "core/config.h"

#define MAX_CONNS 16
#define REQ_MAX 4096
#define READ_DEADLINE_MS 5000
#define SEND_TIMEOUT_S 5

static const char usage[] =
    "usage: cushare exporter --listen ADDR:PORT [--interval MS] [--registry DIR/BASE]\n"
    "                        [--scan DIR]... [--no-scan]\n"
    "  --listen ADDR:PORT  IPv4 address and port to serve GET /metrics on, e.g. 127.0.0.1:9400\n"
    "  --interval MS       sampling period (default 1000, 100..60000)\n"
    "  --registry, --scan, --no-scan  where tenants are found, as for `cushare top`\n";

struct conn {
    int fd;                     /* -1: free */
    int64_t deadline_ms;
    size_t len;
    char buf[REQ_MAX];
};

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
    stop_signal = sig;
}

static int64_t now_ms(void)
{
    return cs__now_ns() / 1000000;
}

static int parse_listen(const char *s, struct sockaddr_in *a)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    long port;
    if (!colon || (size_t)(colon - s) >= sizeof host ||
        cs__parse_int(colon + 1, 1, 65535, &port))
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -1;
}

/* ---- Prometheus text ----------------------------------------------------- */

static void label_value(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(out, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", out);
        else
            fputc(*s, out);
    }
}

static void head(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* {ledger="..",container="..",uid="..",device="d",uuid=".."} without the
 * closing brace, so callers may add labels. */
static void tenant_labels(FILE *out, const struct cs_node_tenant *t, int d)
{
    fputs("{ledger=\"", out);
    label_value(out, t->where.path);
    fputs("\",container=\"", out);
    label_value(out, t->where.container);
    fprintf(out, "\",uid=\"%u\"", (unsigned)t->where.uid);
    if (d >= 0) {
        fprintf(out, ",device=\"%d\",uuid=\"", d);
        label_value(out, t->devinfo[d].uuid);
        fputc('"', out);
    }
}

/* HAMi's vGPU monitor labels: pod namespace and name are not known to
 * cushare; the container is HAMi's cache directory name when found there. */
static void hami_labels(FILE *out, const struct cs_node_tenant *t, int d)
{
    fputs("{podnamespace=\"\",podname=\"\",ctrname=\"", out);
    label_value(out, t->where.container[0] ? t->where.container : t->where.path);
    fprintf(out, "\",vdeviceid=\"%d\",deviceuuid=\"", d);
    label_value(out, t->devinfo[d].uuid);
    fputs("\"}", out);
}

typedef void (*dev_metric)(FILE *out, const struct cs_node_tenant *t, int d);

static void each_dev(FILE *out, const struct cs_node_model *m, dev_metric f)
{
    for (int i = 0; i < m->ntenants; i++) {
        const struct cs_node_tenant *t = m->tenant[i];
        for (int d = 0; d < CS_MAX_DEVICES; d++)
            if (!t->gone && t->dev[d].shown)
                f(out, t, d);
    }
}

#define DEV_METRIC(fname, metric, fmt, expr)                                                   \
    static void fname(FILE *out, const struct cs_node_tenant *t, int d)                         \
    {                                                                                           \
        fputs(metric, out);                                                                     \
        tenant_labels(out, t, d);                                                               \
        fprintf(out, "} " fmt "\n", expr);                                                      \
    }
DEV_METRIC(m_limit, "cushare_tenant_memory_limit_bytes", "%" PRIu64, t->devinfo[d].limit)
DEV_METRIC(m_used, "cushare_tenant_memory_used_bytes", "%" PRIu64, t->devinfo[d].used)
DEV_METRIC(m_peak, "cushare_tenant_memory_peak_bytes", "%" PRIu64, t->devinfo[d].peak)
DEV_METRIC(m_smlim, "cushare_tenant_sm_limit_ratio", "%.2f", t->devinfo[d].sm_limit / 100.0)
DEV_METRIC(m_share, "cushare_tenant_sm_share_ratio", "%.4f", t->dev[d].share)
DEV_METRIC(m_gpus, "cushare_tenant_gpu_seconds_total", "%.6f", (double)t->cum_gpu_ns[d] * 1e-9)
DEV_METRIC(m_starved, "cushare_tenant_starved", "%d", t->dev[d].starved ? 1 : 0)

static void m_bycat(FILE *out, const struct cs_node_tenant *t, int d)
{
    for (int c = 0; c < CS_MEM_NCATEGORIES; c++) {
        fputs("cushare_tenant_memory_category_bytes", out);
        tenant_labels(out, t, d);
        fprintf(out, ",category=\"%s\"} %" PRIu64 "\n", cs__ledger_category_name(c),
                t->dev[d].bytes[c]);
    }
}

static void m_hami_used(FILE *out, const struct cs_node_tenant *t, int d)
{
    fputs("vGPU_device_memory_usage_in_bytes", out);
    hami_labels(out, t, d);
    fprintf(out, " %" PRIu64 "\n", t->devinfo[d].used);
}

static void m_hami_limit(FILE *out, const struct cs_node_tenant *t, int d)
{
    fputs("vGPU_device_memory_limit_in_bytes", out);
    hami_labels(out, t, d);
    fprintf(out, " %" PRIu64 "\n", t->devinfo[d].limit);
}

static void m_hami_util(FILE *out, const struct cs_node_tenant *t, int d)
{
    fputs("Device_utilization_desc_of_container", out);
    hami_labels(out, t, d);
    fprintf(out, " %.2f\n", t->dev[d].share * 100);
}

static void tenant_metrics(FILE *out, const struct cs_node_model *m)
{
    struct { const char *name, *type, *help; dev_metric f; } rows[] = {
        {"cushare_tenant_memory_limit_bytes", "gauge", "Device memory budget of the tenant (0: none).", m_limit},
        {"cushare_tenant_memory_used_bytes", "gauge", "Device memory charged to the tenant.", m_used},
        {"cushare_tenant_memory_peak_bytes", "gauge", "Highest device memory the tenant was charged.", m_peak},
        {"cushare_tenant_memory_category_bytes", "gauge", "Device memory of the tenant's live processes by category.", m_bycat},
        {"cushare_tenant_sm_limit_ratio", "gauge", "Compute share limit (0: none).", m_smlim},
        {"cushare_tenant_sm_share_ratio", "gauge", "Compute share achieved over the last seconds (limited tenants measure it).", m_share},
        {"cushare_tenant_gpu_seconds_total", "counter", "GPU time measured for the tenant since the exporter found it.", m_gpus},
        {"cushare_tenant_starved", "gauge", "1 while the tenant is held under its share by others.", m_starved},
        {"vGPU_device_memory_usage_in_bytes", "gauge", "HAMi name: device memory used by the container.", m_hami_used},
        {"vGPU_device_memory_limit_in_bytes", "gauge", "HAMi name: device memory limit of the container.", m_hami_limit},
        {"Device_utilization_desc_of_container", "gauge", "HAMi name: compute utilisation of the container in percent.", m_hami_util},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        head(out, rows[i].name, rows[i].type, rows[i].help);
        each_dev(out, m, rows[i].f);
    }
}

static void tenant_scalars(FILE *out, const struct cs_node_model *m)
{
    head(out, "cushare_tenant_processes", "gauge", "Live processes of the tenant by identity tier.");
    for (int i = 0; i < m->ntenants; i++) {
        const struct cs_node_tenant *t = m->tenant[i];
        for (int k = 0; k < CS_IDENTITY_NTIERS && !t->gone; k++) {
            fputs("cushare_tenant_processes", out);
            tenant_labels(out, t, -1);
            fprintf(out, ",tier=\"%s\"} %d\n", cs__ledger_identity_name((uint32_t)k), t->tiers[k]);
        }
    }
    struct { const char *name, *type, *help; int what; } rows[] = {
        {"cushare_tenant_throttled_seconds_total", "counter", "Time the tenant's compute pacing slept since the exporter found it.", 0},
        {"cushare_tenant_suspended_seconds_total", "counter", "Time the exporter saw the tenant suspended.", 1},
        {"cushare_tenant_suspended", "gauge", "1 while a process of the tenant is parked by cushare suspend.", 2},
        {"cushare_tenant_lock_waits_total", "counter", "Post-init lock waits of the tenant's live processes.", 3},
        {"cushare_tenant_priority", "gauge", "CUDA_TASK_PRIORITY of the tenant.", 4},
        {"cushare_tenant_park_state", "gauge", "0 running, 1 parking, 2 parked off the GPU, 3 waking (docs/parking.md).", 5},
        {"cushare_tenant_parked_bytes", "gauge", "Device memory of the tenant parked in host memory.", 6},
        {"cushare_tenant_parks_total", "counter", "Completed parks of the tenant.", 7},
        {"cushare_tenant_wakes_total", "counter", "Completed wakes of the tenant.", 8},
        {"cushare_tenant_park_seconds_total", "counter", "Time spent parking the tenant.", 9},
        {"cushare_tenant_wake_seconds_total", "counter", "Time spent waking the tenant.", 10},
        {"cushare_tenant_park_refusals_total", "counter", "Parks of the tenant refused (busy, shared memory, host memory, driver).", 11},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        head(out, rows[r].name, rows[r].type, rows[r].help);
        for (int i = 0; i < m->ntenants; i++) {
            const struct cs_node_tenant *t = m->tenant[i];
            if (t->gone)
                continue;
            fputs(rows[r].name, out);
            tenant_labels(out, t, -1);
            fputs("} ", out);
            switch (rows[r].what) {
            case 0: fprintf(out, "%.6f\n", (double)t->cum_throttled_ns * 1e-9); break;
            case 1: fprintf(out, "%.6f\n", (double)t->suspended_ns * 1e-9); break;
            case 2: fprintf(out, "%d\n", t->suspended ? 1 : 0); break;
            case 3: fprintf(out, "%" PRIu32 "\n", t->lock_waits); break;
            case 4: fprintf(out, "%" PRId32 "\n", t->priority); break;
            case 5: fprintf(out, "%" PRIu32 "\n", t->park.state); break;
            case 6: fprintf(out, "%" PRIu64 "\n", t->park.host_bytes); break;
            case 7: fprintf(out, "%" PRIu64 "\n", t->park.parks); break;
            case 8: fprintf(out, "%" PRIu64 "\n", t->park.wakes); break;
            case 9: fprintf(out, "%.6f\n", (double)t->park.park_ns_total * 1e-9); break;
            case 10: fprintf(out, "%.6f\n", (double)t->park.wake_ns_total * 1e-9); break;
            default: fprintf(out, "%" PRIu64 "\n", t->park.refusals); break;
            }
        }
    }
}

/* Per live process of a live tenant (a process holds one slot of a ledger,
 * so the labels are unique): the tenant's labels and the process's pids
 * (its own, and the host's that NVML and nvidia-smi show). */
static void process_metrics(FILE *out, const struct cs_node_model *m)
{
    head(out, "cushare_process_mps", "gauge",
         "1 while NVML lists the process as an MPS client (concurrent mode), 0 time-sliced.");
    for (int i = 0; i < m->ntenants; i++) {
        const struct cs_node_tenant *t = m->tenant[i];
        for (int k = 0; k < t->nproc && !t->gone; k++) {
            if (!t->proc[k].alive)
                continue;
            fputs("cushare_process_mps", out);
            tenant_labels(out, t, -1);
            fprintf(out, ",pid=\"%" PRId32 "\",host_pid=\"%" PRId32 "\"} %d\n", t->proc[k].pid,
                    t->proc[k].host_pid, t->proc[k].mps ? 1 : 0);
        }
    }
}

static void gpu_metrics(FILE *out, const struct cs_node_model *m)
{
    head(out, "cushare_gpu_memory_total_bytes", "gauge", "Physical memory of the GPU (NVML).");
    for (int g = 0; g < m->ngpus; g++)
        fprintf(out, "cushare_gpu_memory_total_bytes{uuid=\"%s\",index=\"%d\"} %" PRIu64 "\n",
                m->gpu[g].uuid, m->gpu[g].nvml_index, m->gpu[g].mem_total);
    head(out, "cushare_gpu_memory_used_bytes", "gauge", "Memory in use on the GPU (NVML).");
    for (int g = 0; g < m->ngpus; g++)
        fprintf(out, "cushare_gpu_memory_used_bytes{uuid=\"%s\",index=\"%d\"} %" PRIu64 "\n",
                m->gpu[g].uuid, m->gpu[g].nvml_index, m->gpu[g].mem_used);
    head(out, "cushare_gpu_utilization_ratio", "gauge", "GPU utilisation (NVML).");
    for (int g = 0; g < m->ngpus; g++)
        if (m->gpu[g].util >= 0)
            fprintf(out, "cushare_gpu_utilization_ratio{uuid=\"%s\",index=\"%d\"} %.2f\n",
                    m->gpu[g].uuid, m->gpu[g].nvml_index, m->gpu[g].util / 100.0);
    head(out, "HostGPUMemoryUsage", "gauge", "HAMi name: memory in use on the GPU in bytes.");
    for (int g = 0; g < m->ngpus; g++)
        fprintf(out, "HostGPUMemoryUsage{deviceidx=\"%d\",deviceuuid=\"%s\"} %" PRIu64 "\n",
                m->gpu[g].nvml_index, m->gpu[g].uuid, m->gpu[g].mem_used);
    head(out, "HostCoreUtilization", "gauge", "HAMi name: GPU utilisation in percent.");
    for (int g = 0; g < m->ngpus; g++)
        if (m->gpu[g].util >= 0)
            fprintf(out, "HostCoreUtilization{deviceidx=\"%d\",deviceuuid=\"%s\"} %d\n",
                    m->gpu[g].nvml_index, m->gpu[g].uuid, m->gpu[g].util);
}

void cs_node_print_prom(FILE *out, const struct cs_node_model *m)
{
    tenant_metrics(out, m);
    tenant_scalars(out, m);
    process_metrics(out, m);
    gpu_metrics(out, m);
}

/* ---- HTTP ---------------------------------------------------------------- */

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* peer gone or send timeout: drop it */
        p += w;
        n -= (size_t)w;
    }
}

static void respond(int fd, const char *status, const char *type, const char *body, size_t len)
{
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n", status, type, len);
    write_all(fd, hdr, (size_t)n);
    write_all(fd, body, len);
}

static void serve(struct conn *c, const struct cs_node_model *m)
{
    if (strncmp(c->buf, "GET ", 4)) {
        respond(c->fd, "405 Method Not Allowed", "text/plain", "GET only\n", 9);
        return;
    }
    const char *path = c->buf + 4;
    if (strncmp(path, "/metrics ", 9) && strncmp(path, "/metrics?", 9)) {
        respond(c->fd, "404 Not Found", "text/plain", "see /metrics\n", 13);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&body, &len);
    if (!f) {
        respond(c->fd, "500 Internal Server Error", "text/plain", "out of memory\n", 14);
        return;
    }
    cs_node_print_prom(f, m);
    if (fclose(f) == 0)
        respond(c->fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len);
    free(body);
}

static void conn_close(struct conn *c)
{
    close(c->fd);
    c->fd = -1;
}

/* Reads what the client sent; serves once the headers are complete. */
static void conn_read(struct conn *c, const struct cs_node_model *m)
{
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
    if (n < 0 && errno == EINTR)
        return;
    if (n <= 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    c->buf[c->len] = 0;
    if (strstr(c->buf, "\r\n\r\n") || strstr(c->buf, "\n\n")) {
        serve(c, m);
        conn_close(c);
    } else if (c->len == sizeof c->buf - 1) {
        respond(c->fd, "431 Request Header Fields Too Large", "text/plain", "too large\n", 10);
        conn_close(c);
    }
}

static void accept_one(int lfd, struct conn *conns)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    for (int i = 0; i < MAX_CONNS; i++)
        if (conns[i].fd < 0) {
            int fl = 0;
            struct timeval tv = {.tv_sec = SEND_TIMEOUT_S};
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            (void)fl;
            conns[i].fd = fd;
            conns[i].len = 0;
            conns[i].deadline_ms = now_ms() + READ_DEADLINE_MS;
            return;
        }
    close(fd); /* unreachable: the listener is not polled while full */
}

static int serve_loop(int lfd, struct cs_node_model *m, int interval_ms)
{
    static struct conn conns[MAX_CONNS];
    for (int i = 0; i < MAX_CONNS; i++)
        conns[i].fd = -1;
    int64_t next = 0;
    while (!stop_signal) {
        int64_t now = now_ms();
        if (now >= next) {
            cs_node_model_refresh(m);
            next = now + interval_ms;
        }
        struct pollfd p[MAX_CONNS + 1];
        int map[MAX_CONNS + 1], n = 0, used = 0;
        int64_t wake = next;
        for (int i = 0; i < MAX_CONNS; i++) {
            if (conns[i].fd < 0)
                continue;
            if (now >= conns[i].deadline_ms) {
                conn_close(&conns[i]);
                continue;
            }
            used++;
            wake = conns[i].deadline_ms < wake ? conns[i].deadline_ms : wake;
            p[n] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
            map[n++] = i;
        }
        if (used < MAX_CONNS) {
            p[n] = (struct pollfd){.fd = lfd, .events = POLLIN};
            map[n++] = -1;
        }
        int r = poll(p, (nfds_t)n, (int)(wake > now ? wake - now : 0));
        for (int k = 0; r > 0 && k < n; k++) {
            if (!p[k].revents)
                continue;
            if (map[k] < 0)
                accept_one(lfd, conns);
            else
                conn_read(&conns[map[k]], m);
        }
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (conns[i].fd >= 0)
            conn_close(&conns[i]);
    return CS_EXIT_OK;
}

int cs_cmd_exporter(int argc, char **argv)
{
    const char *listen_at = NULL;
    long interval = 1000;
    struct cs_node_where where;
    int rc = cs_node_where_defaults("exporter", &where);
    if (rc)
        return rc;
    for (int i = 1; i < argc; i++) {
        int w = cs_node_where_arg("exporter", argc, argv, &i, &where);
        if (w < 0)
            return -w;
        if (w)
            continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return CS_EXIT_OK;
        } else if (!strcmp(argv[i], "--listen") && i + 1 < argc) {
            listen_at = argv[++i];
        } else if (!strcmp(argv[i], "--interval") && i + 1 < argc) {
            if (cs__parse_int(argv[++i], 100, 60000, &interval))
                return cs_cli_usage_error("exporter", "--interval needs milliseconds from 100 "
                                                      "to 60000, e.g. --interval 1000");
        } else {
            return cs_cli_usage_error("exporter", "unknown or incomplete option '%s' (see --help)",
                                      argv[i]);
        }
    }
    struct sockaddr_in addr;
    if (!listen_at || parse_listen(listen_at, &addr))
        return cs_cli_usage_error("exporter", "--listen needs an IPv4 ADDR:PORT, e.g. --listen "
                                              "127.0.0.1:9400");
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 64)) {
        fprintf(stderr, "cushare: exporter: cannot listen on %s: %s\n", listen_at, strerror(errno));
        if (lfd >= 0)
            close(lfd);
        return CS_EXIT_FAIL;
    }
    struct cs_node_model *m = cs_node_model_new(&where);
    if (!m) {
        close(lfd);
        fprintf(stderr, "cushare: exporter: out of memory\n");
        return CS_EXIT_FAIL;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "cushare: exporter: serving http://%s/metrics\n", listen_at);
    rc = serve_loop(lfd, m, (int)interval);
    cs_node_model_free(m);
    close(lfd);
    return rc;
}

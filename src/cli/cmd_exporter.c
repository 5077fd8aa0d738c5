/*
 * `cushare exporter --listen ADDR:PORT [--interval MS] [--registry DIR/BASE]
 * [--scan DIR]... [--no-scan]`: the node view model (node_model.h) as
 * Prometheus text at GET /metrics, over HTTP/1.0 on an IPv4 address
 * (127.0.0.1 unless the operator says otherwise). Metric names and
 * labels: docs/node.md; HAMi's vGPU monitor names are served too, so
 * existing dashboards keep working.
 *
 * Bounded by construction: one thread, one poll loop, non-blocking
 * sockets; at most MAX_CONNS connections and PEER_MAX of one client
 * address. Every pending connection is accepted at once, and one over
 * its address's cap takes the place of that address's oldest connection
 * still waiting for a request (a full table: of the address holding the
 * most), so a flood drains from the kernel's backlog instead of queueing
 * scrapers behind it, and idle connections cannot keep a scraper out. Each connection has a
 * REQ_MAX-byte request buffer and a READ_DEADLINE_MS deadline for its
 * whole request, then WRITE_DEADLINE_MS for its whole response, which is
 * sent as the socket takes it (poll), so a client that stops reading
 * costs one table entry until its deadline, never the loop. The metrics
 * text is rendered once per model refresh and shared by every scrape of
 * it. The model is sampled every interval whether or not anyone scrapes,
 * so rates are always over the model's window.
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
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/node_model.h"
#include "cli/text.h"
#include "core/clock.h"
#include "core/config.h"

#define MAX_CONNS 64
#define PEER_MAX 4              /* connections one client address may hold */
#define REQ_MAX 4096
#define READ_DEADLINE_MS 5000
#define WRITE_DEADLINE_MS 10000

static const char usage[] =
    "usage: cushare exporter --listen ADDR:PORT [--interval MS] [--registry DIR/BASE]\n"
    "                        [--scan DIR]... [--no-scan]\n"
    "  --listen ADDR:PORT  IPv4 address and port to serve GET /metrics on,\n"
    "                      e.g. 127.0.0.1:9400\n"
    "  --interval MS       sampling period (default 1000, 100..60000)\n"
    "  --registry, --scan, --no-scan  where tenants are found, as for `cushare top`\n"
    "examples:\n"
    "  cushare exporter --listen 127.0.0.1:9400\n"
    "  curl -s 127.0.0.1:9400/metrics | grep cushare_\n";

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

/* Every label value goes through here: ledger paths and container names
 * are chosen by tenants, and one byte that is not UTF-8 would make
 * Prometheus drop the whole scrape (every tenant's metrics). */
static void label_value(FILE *out, const char *s)
{
    cs_text_prom_label(out, s);
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

/* {uuid="..",index="n"} or HAMi's {deviceidx="n",deviceuuid=".."}. */
static void gpu_labels(FILE *out, const struct cs_node_gpu *g, bool hami)
{
    if (hami)
        fprintf(out, "{deviceidx=\"%d\",deviceuuid=\"", g->nvml_index);
    else
        fputs("{uuid=\"", out);
    label_value(out, g->uuid);
    if (hami)
        fputs("\"}", out);
    else
        fprintf(out, "\",index=\"%d\"}", g->nvml_index);
}

static void gpu_metrics(FILE *out, const struct cs_node_model *m)
{
    struct { const char *name, *help; bool hami; int what; } rows[] = {
        {"cushare_gpu_memory_total_bytes", "Physical memory of the GPU (NVML).", false, 0},
        {"cushare_gpu_memory_used_bytes", "Memory in use on the GPU (NVML).", false, 1},
        {"cushare_gpu_utilization_ratio", "GPU utilisation (NVML).", false, 2},
        {"HostGPUMemoryUsage", "HAMi name: memory in use on the GPU in bytes.", true, 1},
        {"HostCoreUtilization", "HAMi name: GPU utilisation in percent.", true, 3},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        head(out, rows[r].name, "gauge", rows[r].help);
        for (int i = 0; i < m->ngpus; i++) {
            const struct cs_node_gpu *g = &m->gpu[i];
            if (rows[r].what >= 2 && g->util < 0)
                continue;
            fputs(rows[r].name, out);
            gpu_labels(out, g, rows[r].hami);
            switch (rows[r].what) {
            case 0: fprintf(out, " %" PRIu64 "\n", g->mem_total); break;
            case 1: fprintf(out, " %" PRIu64 "\n", g->mem_used); break;
            case 2: fprintf(out, " %.2f\n", g->util / 100.0); break;
            default: fprintf(out, " %d\n", g->util); break;
            }
        }
    }
}

void cs_node_print_prom(FILE *out, const struct cs_node_model *m)
{
    tenant_metrics(out, m);
    tenant_scalars(out, m);
    process_metrics(out, m);
    gpu_metrics(out, m);
}

/* ---- HTTP ---------------------------------------------------------------- */

/* The metrics text of one model refresh, rendered once at its first
 * scrape and shared by every connection sending it (refs: the cache's one
 * and one per sending connection; the serving thread only). */
struct body {
    int refs;
    uint64_t refresh;           /* the model's refresh it shows */
    size_t len;
    char data[];
};

static void body_put(struct body *b)
{
    if (b && --b->refs == 0)
        free(b);
}

struct conn {
    int fd;                     /* -1: free */
    struct in_addr peer;        /* for the per-peer cap */
    int64_t since_ms;           /* accepted: the oldest goes first */
    int64_t deadline_ms;        /* of the request, then of the response */
    bool writing;
    size_t len;                 /* request bytes, NUL-terminated in buf */
    char buf[REQ_MAX];
    char hdr[256];              /* response: hdr[0..hdr_len), then text */
    size_t hdr_len, sent;       /* bytes of header + text sent */
    const char *text;
    size_t text_len;
    struct body *body;          /* held while text points into it */
};

struct server {
    int lfd;
    struct conn conn[MAX_CONNS];
    struct cs_node_model *m;
    struct body *cache;         /* the newest rendering, or NULL */
};

static void conn_close(struct conn *c)
{
    close(c->fd);
    c->fd = -1;
    body_put(c->body);
    c->body = NULL;
    c->writing = false;
}

/* Sends what the socket takes now (it is non-blocking: a client that stops
 * reading holds its connection until its deadline, never the loop).
 * Closes the connection once all is sent or the client is gone. */
static void conn_write(struct conn *c)
{
    size_t total = c->hdr_len + c->text_len;
    while (c->sent < total) {
        struct iovec v[2];
        int n = 0;
        if (c->sent < c->hdr_len)
            v[n++] = (struct iovec){c->hdr + c->sent, c->hdr_len - c->sent};
        size_t off = c->sent > c->hdr_len ? c->sent - c->hdr_len : 0;
        if (c->text_len > off)
            v[n++] = (struct iovec){(char *)c->text + off, c->text_len - off};
        struct msghdr msg = {.msg_iov = v, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return; /* poll says when it takes more */
        if (w <= 0)
            break;
        c->sent += (size_t)w;
    }
    conn_close(c);
}

/* Starts the response; body (may be NULL for a static text) is held
 * until it is sent. */
static void respond(struct conn *c, const char *status, const char *type, const char *text,
                    size_t len, struct body *body)
{
    int n = snprintf(c->hdr, sizeof c->hdr, "HTTP/1.0 %s\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, type, len);
    c->hdr_len = (size_t)n < sizeof c->hdr ? (size_t)n : sizeof c->hdr - 1;
    c->text = text;
    c->text_len = len;
    c->sent = 0;
    c->body = body;
    if (body)
        body->refs++;
    c->writing = true;
    c->deadline_ms = now_ms() + WRITE_DEADLINE_MS;
    conn_write(c);
}

static void respond_text(struct conn *c, const char *status, const char *text)
{
    respond(c, status, "text/plain", text, strlen(text), NULL);
}

/* The metrics of the model's last refresh: rendered at most once per
 * refresh, however many scrape it. NULL when memory is short. */
static struct body *metrics(struct server *s)
{
    if (s->cache && s->cache->refresh == s->m->refreshes)
        return s->cache;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    cs_node_print_prom(f, s->m);
    struct body *b = fclose(f) == 0 ? malloc(sizeof *b + len) : NULL;
    if (b) {
        b->refs = 1;
        b->refresh = s->m->refreshes;
        b->len = len;
        memcpy(b->data, text, len);
        body_put(s->cache);
        s->cache = b;
    }
    free(text);
    return b;
}

static void serve(struct server *s, struct conn *c)
{
    if (strncmp(c->buf, "GET ", 4)) {
        respond_text(c, "405 Method Not Allowed", "GET only\n");
        return;
    }
    const char *path = c->buf + 4;
    if (strncmp(path, "/metrics ", 9) && strncmp(path, "/metrics?", 9)) {
        respond_text(c, "404 Not Found", "see /metrics\n");
        return;
    }
    struct body *b = metrics(s);
    if (!b)
        respond_text(c, "500 Internal Server Error", "out of memory\n");
    else
        respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", b->data, b->len, b);
}

/* Reads what the client sent; answers once the headers are complete. */
static void conn_read(struct server *s, struct conn *c)
{
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    c->buf[c->len] = 0;
    if (strstr(c->buf, "\r\n\r\n") || strstr(c->buf, "\n\n"))
        serve(s, c);
    else if (c->len == sizeof c->buf - 1)
        respond_text(c, "431 Request Header Fields Too Large", "too large\n");
}

/* The oldest connection of `peer` still waiting for its request (a
 * connection sending a response is never given up), or -1. */
static int oldest_waiting(const struct server *s, struct in_addr peer)
{
    int oldest = -1;
    for (int i = 0; i < MAX_CONNS; i++) {
        const struct conn *c = &s->conn[i];
        if (c->fd >= 0 && !c->writing && c->peer.s_addr == peer.s_addr &&
            (oldest < 0 || c->since_ms < s->conn[oldest].since_ms))
            oldest = i;
    }
    return oldest;
}

/* Where a new connection from `peer` goes: a free entry while the peer
 * holds fewer than PEER_MAX; else the peer's own oldest connection that
 * has not sent its request yet makes room (a client that connects and
 * sends at once is served however many idle ones its address keeps). In
 * a full table, the oldest waiting connection of the address holding the
 * most gives way, when that address holds more than `peer` will. -1:
 * refused. */
static int admit(struct server *s, struct in_addr peer)
{
    int mine = 0, free_at = -1, most = 0;
    struct in_addr big = peer;
    for (int i = 0; i < MAX_CONNS; i++) {
        const struct conn *c = &s->conn[i];
        if (c->fd < 0) {
            free_at = free_at < 0 ? i : free_at;
            continue;
        }
        mine += c->peer.s_addr == peer.s_addr;
        int n = 0;
        for (int j = 0; j < MAX_CONNS; j++)
            n += s->conn[j].fd >= 0 && s->conn[j].peer.s_addr == c->peer.s_addr;
        if (n > most) {
            most = n;
            big = c->peer;
        }
    }
    int give_up = -1;
    if (mine >= PEER_MAX)
        give_up = oldest_waiting(s, peer);
    else if (free_at >= 0)
        return free_at;
    else if (most > mine + 1)
        give_up = oldest_waiting(s, big);
    if (give_up >= 0)
        conn_close(&s->conn[give_up]);
    return give_up;
}

/* Takes every pending connection, admitted or closed at once, so a flood
 * drains from the kernel's backlog instead of queueing scrapers behind it.
 * At most ACCEPT_BATCH a turn: bounded, so a peer that reconnects as fast
 * as we close cannot keep the loop here; large, so one turn empties a
 * full backlog (listen's SOMAXCONN). */
#define ACCEPT_BATCH 4096

static void accept_all(struct server *s)
{
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        struct sockaddr_in a;
        socklen_t alen = sizeof a;
        int fd = accept4(s->lfd, (struct sockaddr *)&a, &alen, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        int i = admit(s, a.sin_addr);
        if (i < 0) {
            close(fd);
            continue;
        }
        struct conn *c = &s->conn[i];
        c->fd = fd;
        c->peer = a.sin_addr;
        c->since_ms = now_ms();
        c->deadline_ms = c->since_ms + READ_DEADLINE_MS;
        c->len = 0;
        c->writing = false;
        c->body = NULL;
    }
}

static int serve_loop(struct server *s, int interval_ms)
{
    for (int i = 0; i < MAX_CONNS; i++)
        s->conn[i].fd = -1;
    int64_t next = 0;
    while (!stop_signal) {
        int64_t now = now_ms();
        if (now >= next) {
            cs_node_model_refresh(s->m);
            next = now + interval_ms;
        }
        struct pollfd p[MAX_CONNS + 1];
        int map[MAX_CONNS + 1], n = 0;
        int64_t wake = next;
        for (int i = 0; i < MAX_CONNS; i++) {
            struct conn *c = &s->conn[i];
            if (c->fd < 0)
                continue;
            if (now >= c->deadline_ms) {
                conn_close(c);
                continue;
            }
            wake = c->deadline_ms < wake ? c->deadline_ms : wake;
            p[n] = (struct pollfd){.fd = c->fd, .events = c->writing ? POLLOUT : POLLIN};
            map[n++] = i;
        }
        p[n] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        map[n++] = -1;
        int r = poll(p, (nfds_t)n, (int)(wake > now ? wake - now : 0));
        for (int k = 0; r > 0 && k < n; k++) {
            if (!p[k].revents)
                continue;
            if (map[k] < 0)
                accept_all(s);
            else if (s->conn[map[k]].writing)
                conn_write(&s->conn[map[k]]);
            else
                conn_read(s, &s->conn[map[k]]);
        }
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conn[i].fd >= 0)
            conn_close(&s->conn[i]);
    body_put(s->cache);
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
            return cs_cli_unknown_option("exporter", argv[i], usage);
        }
    }
    struct sockaddr_in addr;
    if (!listen_at || parse_listen(listen_at, &addr))
        return cs_cli_usage_error("exporter", "--listen needs an IPv4 ADDR:PORT, e.g. --listen "
                                              "127.0.0.1:9400");
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, SOMAXCONN)) {
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
    static struct server srv; /* the one server of this command */
    srv.lfd = lfd;
    srv.m = m;
    rc = serve_loop(&srv, (int)interval);
    cs_node_model_free(m);
    close(lfd);
    return rc;
}

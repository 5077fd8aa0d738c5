/*
 * TEST TOOL (tests/fakecuda), never shipped: stream capture in the fake
 * libcuda.so.1, held to what the real driver does (driver 580.159.04 on an
 * H200, asked by capture_probe.c; the answers are capture_probe.h200.txt).
 *
 * A capture begins on a created stream or a thread's per-thread default
 * stream (never the legacy stream) and builds a graph (fake_mem.c) until
 * cuStreamEndCapture on that origin stream. Work pushed to a stream of an
 * active capture becomes a node after the stream's current dependencies
 * instead of running; a stream joins a capture by waiting on an event
 * recorded inside it. A capture is ACTIVE or INVALIDATED (an error
 * happened; pushes fail until it is ended); ending it, in any way, makes
 * every stream of it not capturing again. Everything here is per process,
 * under fc_mu; a thread's capture interaction mode is thread-local.
 *
 * Streams and events hold only the id of a capture (struct fc_capref): a
 * capture that has ended is not found by its id any more, so nothing has
 * to visit the streams and events that still name it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fake_internal.h"

enum { CAP_ACTIVE = 1, CAP_INVALIDATED = 2 };

/* A set of graph nodes: what the next node of a stream depends on. */
struct depset {
    struct fc_gnode **v;
    size_t n, cap;
};

/* A stream of a capture: the origin (index 0) or one that joined. */
struct member {
    const void *key;       /* the stream (struct fc_sref.key) */
    int blocking;          /* synchronises with the legacy stream */
    struct depset deps;
    CUgraphEdgeData *edges; /* zeroed, parallel to deps (cuStreamGetCaptureInfo) */
};

struct fc_capture {
    struct fc_capture *next;
    uint64_t id;           /* unique over the process's lifetime */
    int mode;              /* CUstreamCaptureMode given to cuStreamBeginCapture */
    int status;
    pthread_t thread;      /* that began it */
    struct fc_ctx *ctx;
    struct fc_graph *graph;
    int owns_graph;        /* 0: cuStreamBeginCaptureToGraph's graph */
    struct member *m;
    size_t nm, capm;
    struct depset *snaps;  /* dependencies of each event recorded inside */
    size_t nsnaps, capsnaps;
};

static struct fc_capture *g_caps; /* unfinished captures */
static uint64_t g_next_id;
static uint64_t g_mark;
/* The thread's capture interaction mode (cuThreadExchangeStreamCaptureMode). */
static __thread int tls_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* ---- small helpers ---------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 4;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, c * elem);
    if (!n)
        return -1;
    *p = n;
    *cap = c;
    return 0;
}

static int ds_add(struct depset *d, struct fc_gnode *x)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->v[i] == x)
            return 0;
    if (grow((void **)&d->v, &d->cap, d->n + 1, sizeof(d->v[0])))
        return -1;
    d->v[d->n++] = x;
    return 0;
}

static int ds_union(struct depset *d, const struct depset *o)
{
    for (size_t i = 0; i < o->n; i++)
        if (ds_add(d, o->v[i]))
            return -1;
    return 0;
}

static void ds_free(struct depset *d)
{
    free(d->v);
    memset(d, 0, sizeof(*d));
}

static struct fc_capture *find(uint64_t id)
{
    for (struct fc_capture *c = g_caps; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* The unfinished capture a stream belongs to (and its member index), or
 * NULL: a stale link (capture ended) is cleared. */
static struct fc_capture *stream_cap(struct fc_sref *s, size_t *idx)
{
    if (!s->cap || !s->cap->id)
        return NULL;
    struct fc_capture *c = find(s->cap->id);
    if (!c || s->cap->idx >= c->nm || c->m[s->cap->idx].key != s->key) {
        s->cap->id = 0;
        return NULL;
    }
    if (idx)
        *idx = s->cap->idx;
    return c;
}

static void invalidate(struct fc_capture *c)
{
    c->status = CAP_INVALIDATED;
}

/* Ends a capture: off the list (its streams and events stop naming it);
 * `discard`: its own graph is destroyed (ToGraph's graph is the user's). */
static void terminate(struct fc_capture *c, int discard)
{
    for (struct fc_capture **pp = &g_caps; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (discard && c->owns_graph)
        fc_graph_free(c->graph);
    for (size_t i = 0; i < c->nm; i++) {
        ds_free(&c->m[i].deps);
        free(c->m[i].edges);
    }
    for (size_t i = 0; i < c->nsnaps; i++)
        ds_free(&c->snaps[i]);
    free(c->m);
    free(c->snaps);
    free(c);
}

/* Any unfinished capture of the context with a blocking stream: the legacy
 * stream has an implicit dependency on it. `inval`: invalidate them. */
static int legacy_blocked(struct fc_ctx *ctx, int inval)
{
    int found = 0;
    for (struct fc_capture *c = g_caps; c; c = c->next) {
        if (c->ctx != ctx)
            continue;
        for (size_t i = 0; i < c->nm; i++)
            if (c->m[i].blocking) {
                found = 1;
                if (inval)
                    invalidate(c);
                break;
            }
    }
    return found;
}

static int add_member(struct fc_capture *c, struct fc_sref *s, const struct depset *deps)
{
    if (grow((void **)&c->m, &c->capm, c->nm + 1, sizeof(c->m[0])))
        return -1;
    struct member *m = &c->m[c->nm];
    memset(m, 0, sizeof(*m));
    m->key = s->key;
    m->blocking = s->blocking;
    if (deps && ds_union(&m->deps, deps)) {
        ds_free(&m->deps);
        return -1;
    }
    s->cap->id = c->id;
    s->cap->idx = (uint32_t)c->nm++;
    return 0;
}

/* ---- the checks other files make --------------------------------------------- */

CUresult fc_cap_check(struct fc_sref *s, struct fc_capture **cap)
{
    *cap = NULL;
    if (s->legacy)
        return legacy_blocked(s->ctx, 1) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
    struct fc_capture *c = stream_cap(s, NULL);
    if (c && c->status != CAP_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    *cap = c;
    return CUDA_SUCCESS;
}

/* The new node becomes the stream's only dependency. */
static struct fc_gnode *append(struct fc_capture *c, struct fc_sref *s, struct fc_gnode *x)
{
    struct depset *d = &c->m[s->cap->idx].deps;
    if (x) {
        d->n = 0;
        if (ds_add(d, x))
            return NULL; /* cannot happen: the set had room for one */
    }
    return x;
}

struct fc_gnode *fc_cap_node(struct fc_capture *c, struct fc_sref *s, int kind, int phys, uint64_t work_ns)
{
    struct depset *d = &c->m[s->cap->idx].deps;
    struct fc_gnode *x = fc_gnode_new(c->graph, kind, phys, d->v, d->n);
    if (x)
        x->work_ns = work_ns;
    return append(c, s, x);
}

struct fc_gnode *fc_cap_kernel_node(struct fc_capture *c, struct fc_sref *s, int phys, uint64_t work_ns,
                                    const struct fc_kshape *k)
{
    struct fc_gnode *x = fc_cap_node(c, s, FC_GN_KERNEL, phys, work_ns);
    if (x)
        x->kshape = *k;
    return x;
}

struct fc_gnode *fc_cap_alloc_node(struct fc_capture *c, struct fc_sref *s, int phys, uint64_t bytes)
{
    struct depset *d = &c->m[s->cap->idx].deps;
    return append(c, s, fc_gnode_alloc(c->graph, phys, bytes, d->v, d->n));
}

CUresult fc_cap_uncapturable(struct fc_sref *s)
{
    if (s->legacy)
        return legacy_blocked(s->ctx, 1) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
    struct fc_capture *c = stream_cap(s, NULL);
    if (c) {
        invalidate(c);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

CUresult fc_cap_stream_sync(struct fc_sref *s)
{
    CUresult r = fc_cap_uncapturable(s);
    return r == CUDA_SUCCESS ? fc_cap_unsafe() : r;
}

/* cuThreadExchangeStreamCaptureMode's rule: a thread not in RELAXED mode is
 * prohibited by its own unfinished captures not begun in RELAXED mode and,
 * in GLOBAL mode, by other threads' unfinished captures begun in GLOBAL
 * mode. Measured on driver 580: an invalidated capture still prohibits
 * until it is ended. */
CUresult fc_cap_unsafe(void)
{
    int mode = tls_mode;
    if (mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    pthread_t self = pthread_self();
    int prohibited = 0;
    for (struct fc_capture *c = g_caps; c; c = c->next) {
        int own = pthread_equal(c->thread, self);
        if ((own && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!own && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            prohibited = 1;
            invalidate(c);
        }
    }
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult fc_cap_ctx_sync(struct fc_ctx *ctx)
{
    int any = 0;
    for (struct fc_capture *c = g_caps; c; c = c->next)
        if (c->ctx == ctx) {
            any = 1;
            invalidate(c);
        }
    return any ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : fc_cap_unsafe();
}

/* ---- events -------------------------------------------------------------------- */

enum ev_state { EV_NORMAL, EV_CAPTURED, EV_VOID };

/* An event last recorded in a capture that is still active is "captured";
 * once that capture is invalidated or ended the event is unusable until
 * recorded again (measured: CUDA_ERROR_INVALID_VALUE). */
static enum ev_state event_state(struct fc_event *e, struct fc_capture **cap)
{
    *cap = NULL;
    if (!e->cap.id)
        return EV_NORMAL;
    struct fc_capture *c = find(e->cap.id);
    if (!c || c->status != CAP_ACTIVE || e->cap.idx >= c->nsnaps)
        return EV_VOID;
    *cap = c;
    return EV_CAPTURED;
}

CUresult fc_cap_event_record(struct fc_sref *s, struct fc_event *e, unsigned flags, int *captured)
{
    *captured = 0;
    struct fc_capture *c;
    CUresult r = fc_cap_check(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!c) {
        e->cap.id = 0;
        return CUDA_SUCCESS;
    }
    if ((flags & CU_EVENT_RECORD_EXTERNAL) && !fc_cap_node(c, s, FC_GN_EVENT_RECORD, s->ctx->o.phys, 0))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (grow((void **)&c->snaps, &c->capsnaps, c->nsnaps + 1, sizeof(c->snaps[0])))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct depset *snap = &c->snaps[c->nsnaps];
    memset(snap, 0, sizeof(*snap));
    if (ds_union(snap, &c->m[s->cap->idx].deps)) {
        ds_free(snap);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->cap.id = c->id;
    e->cap.idx = (uint32_t)c->nsnaps++;
    *captured = 1;
    return CUDA_SUCCESS;
}

CUresult fc_cap_event_use(struct fc_event *e, enum fc_event_use how)
{
    struct fc_capture *c;
    switch (event_state(e, &c)) {
    case EV_NORMAL: return CUDA_SUCCESS;
    case EV_VOID: return CUDA_ERROR_INVALID_VALUE;
    case EV_CAPTURED: break;
    }
    if (how != FC_EV_ELAPSED)
        invalidate(c);
    return CUDA_ERROR_CAPTURED_EVENT;
}

CUresult fc_cap_wait(struct fc_sref *s, struct fc_event *e, unsigned flags, int *handled)
{
    *handled = 0;
    struct fc_capture *ec, *sc;
    size_t idx = 0;
    enum ev_state es = event_state(e, &ec);
    if (s->legacy) {
        if (legacy_blocked(s->ctx, 1))
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        sc = NULL;
    } else {
        sc = stream_cap(s, &idx);
    }
    if (sc && sc->status != CAP_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (es == EV_VOID) {
        if (sc)
            invalidate(sc);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (es == EV_CAPTURED) {
        const struct depset *snap = &ec->snaps[e->cap.idx];
        if (s->legacy) { /* the legacy stream cannot join a capture */
            invalidate(ec);
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
        if (sc && sc != ec) { /* two captures would become one */
            invalidate(sc);
            invalidate(ec);
            return CUDA_ERROR_STREAM_CAPTURE_MERGE;
        }
        *handled = 1;
        if (sc) /* fork inside the capture: depend on the event's work too */
            return ds_union(&sc->m[idx].deps, snap) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
        return add_member(ec, s, snap) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS; /* joins */
    }
    if (!sc) /* outside any capture: the external-wait flag is for captures only */
        return (flags & CU_EVENT_WAIT_EXTERNAL) ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
    *handled = 1;
    if (!e->recorded)
        return CUDA_SUCCESS; /* nothing to wait for: no node */
    if (flags & CU_EVENT_WAIT_EXTERNAL)
        return fc_cap_node(sc, s, FC_GN_EVENT_WAIT, s->ctx->o.phys, 0) ? CUDA_SUCCESS
                                                                       : CUDA_ERROR_OUT_OF_MEMORY;
    invalidate(sc); /* a dependency on work outside the capture */
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
}

/* ---- lifetime ------------------------------------------------------------------- */

int fc_cap_graph_busy(const struct fc_graph *g)
{
    for (struct fc_capture *c = g_caps; c; c = c->next)
        if (c->graph == g)
            return 1;
    return 0;
}

void fc_cap_stream_destroy(struct fc_stream *st)
{
    struct fc_sref s = {.cap = &st->cap, .key = st};
    size_t idx;
    struct fc_capture *c = stream_cap(&s, &idx);
    if (c && idx == 0)
        terminate(c, 1);
}

void fc_cap_ctx_teardown(struct fc_ctx *ctx)
{
    struct fc_capture *c = g_caps, *next;
    for (; c; c = next) {
        next = c->next;
        if (c->ctx == ctx)
            terminate(c, 1);
    }
}

/* Fork child: no captures (their graphs go with every other object). */
void fc_cap_reset(void)
{
    while (g_caps) {
        struct fc_capture *c = g_caps;
        c->owns_graph = 0;
        terminate(c, 0);
    }
    tls_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
}

/* ---- UNJOINED ---------------------------------------------------------------------- */

/* Every stream that joined must have been joined back: each node it would
 * depend on next is the origin's next dependency or an ancestor of one. */
static int unjoined(struct fc_capture *c)
{
    uint64_t mark = ++g_mark;
    struct fc_gnode **stack = NULL;
    size_t n = 0, cap = 0;
    int oom = 0;
    for (size_t i = 0; i < c->m[0].deps.n && !oom; i++) {
        oom = grow((void **)&stack, &cap, n + 1, sizeof(stack[0]));
        if (!oom)
            stack[n++] = c->m[0].deps.v[i];
    }
    while (n && !oom) {
        struct fc_gnode *x = stack[--n];
        if (x->mark == mark)
            continue;
        x->mark = mark;
        oom = grow((void **)&stack, &cap, n + x->ndeps, sizeof(stack[0]));
        for (size_t i = 0; i < x->ndeps && !oom; i++)
            stack[n++] = x->deps[i];
    }
    free(stack);
    for (size_t i = 1; i < c->nm; i++)
        for (size_t j = 0; j < c->m[i].deps.n; j++)
            if (c->m[i].deps.v[j]->mark != mark)
                return 1;
    return 0;
}

/* ---- the exports -------------------------------------------------------------------- */

static int mode_valid(int m)
{
    return m == CU_STREAM_CAPTURE_MODE_GLOBAL || m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
           m == CU_STREAM_CAPTURE_MODE_RELAXED;
}

static CUresult begin(CUstream h, int ptsz, CUgraph hGraph, const CUgraphNode *deps, size_t ndeps,
                      CUstreamCaptureMode mode, int to_graph)
{
    if (!mode_valid((int)mode) || (ndeps && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_sref s;
    struct fc_graph *g = NULL;
    struct fc_capture *c = NULL;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS && s.legacy)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS && stream_cap(&s, NULL))
        r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS && to_graph) {
        g = (struct fc_graph *)fc_obj_get(hGraph, FC_T_GRAPH);
        if (!g)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (fc_cap_graph_busy(g))
            r = CUDA_ERROR_ILLEGAL_STATE;
        for (size_t i = 0; r == CUDA_SUCCESS && i < ndeps; i++) {
            struct fc_gnode *d = (struct fc_gnode *)fc_obj_get(deps[i], FC_T_GNODE);
            if (!d || d->o.owner != g)
                r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (r == CUDA_SUCCESS && !(c = calloc(1, sizeof(*c))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        c->id = ++g_next_id;
        c->mode = (int)mode;
        c->status = CAP_ACTIVE;
        c->thread = pthread_self();
        c->ctx = s.ctx;
        c->owns_graph = !to_graph;
        c->graph = to_graph ? g : fc_graph_new();
        struct depset d0 = {(struct fc_gnode **)deps, ndeps, ndeps};
        if (!c->graph || add_member(c, &s, to_graph ? &d0 : NULL)) {
            if (c->graph && c->owns_graph)
                fc_graph_free(c->graph);
            free(c->m);
            free(c);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            c->next = g_caps;
            g_caps = c;
        }
    }
    fc_unlock();
    return r;
}

/* CUDA 10.0's cuStreamBeginCapture had no mode: GLOBAL. */
FC_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
    FC_BEGIN(cuStreamBeginCapture);
    return begin(hStream, 0, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream)
{
    FC_BEGIN(cuStreamBeginCapture_ptsz);
    return begin(hStream, 1, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    FC_BEGIN(cuStreamBeginCapture_v2);
    return begin(hStream, 0, NULL, NULL, 0, mode, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    FC_BEGIN(cuStreamBeginCapture_v2_ptsz);
    return begin(hStream, 1, NULL, NULL, 0, mode, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                       const CUgraphNode *dependencies,
                                                       const CUgraphEdgeData *dependencyData,
                                                       size_t numDependencies, CUstreamCaptureMode mode)
{
    FC_BEGIN(cuStreamBeginCaptureToGraph);
    (void)dependencyData;
    return begin(hStream, 0, hGraph, dependencies, numDependencies, mode, 1);
}

FC_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                            const CUgraphNode *dependencies,
                                                            const CUgraphEdgeData *dependencyData,
                                                            size_t numDependencies, CUstreamCaptureMode mode)
{
    FC_BEGIN(cuStreamBeginCaptureToGraph_ptsz);
    (void)dependencyData;
    return begin(hStream, 1, hGraph, dependencies, numDependencies, mode, 1);
}

/* Measured on driver 580: ending from the wrong thread ends the capture
 * too (no graph); ending on a stream that joined, not the origin, gives
 * CUDA_ERROR_STREAM_CAPTURE_UNMATCHED and invalidates the capture, which
 * the origin must still end; a NULL phGraph ends it and drops the graph. */
static CUresult end(CUstream h, int ptsz, CUgraph *phGraph)
{
    fc_lock();
    struct fc_sref s;
    size_t idx = 0;
    struct fc_capture *c = NULL;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS && !(c = stream_cap(&s, &idx)))
        r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS && idx != 0) {
        invalidate(c);
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        if (phGraph)
            *phGraph = NULL;
    } else if (r == CUDA_SUCCESS) {
        if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
            r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        else if (c->status != CAP_ACTIVE)
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (unjoined(c))
            r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
        struct fc_graph *g = c->graph;
        int keep = r == CUDA_SUCCESS && phGraph;
        terminate(c, !keep);
        s.cap->id = 0;
        if (phGraph)
            *phGraph = keep ? (CUgraph)g : NULL;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    FC_BEGIN(cuStreamEndCapture);
    return end(hStream, 0, phGraph);
}

FC_EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    FC_BEGIN(cuStreamEndCapture_ptsz);
    return end(hStream, 1, phGraph);
}

/* Capture status and, when active, what cuStreamGetCaptureInfo tells. The
 * legacy stream answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking
 * stream of its context captures, without invalidating anything. */
static CUresult info(CUstream h, int ptsz, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    if (!status || (edges && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_sref s;
    size_t idx = 0;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    struct fc_capture *c = NULL;
    if (r == CUDA_SUCCESS && s.legacy && legacy_blocked(s.ctx, 0))
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (r == CUDA_SUCCESS && !s.legacy)
        c = stream_cap(&s, &idx);
    if (r == CUDA_SUCCESS) {
        *status = !c                         ? CU_STREAM_CAPTURE_STATUS_NONE
                  : c->status == CAP_ACTIVE ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                            : CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    }
    if (r == CUDA_SUCCESS && c && c->status == CAP_ACTIVE) {
        struct member *m = &c->m[idx];
        if (id)
            *id = c->id;
        if (graph)
            *graph = (CUgraph)c->graph;
        if (deps) /* driver-owned, valid until the next call on the stream */
            *deps = (const CUgraphNode *)m->deps.v;
        if (edges) {
            free(m->edges);
            m->edges = calloc(m->deps.n ? m->deps.n : 1, sizeof(*m->edges));
            if (!m->edges)
                r = CUDA_ERROR_OUT_OF_MEMORY;
            *edges = m->edges;
        }
        if (ndeps)
            *ndeps = m->deps.n;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    FC_BEGIN(cuStreamIsCapturing);
    return info(hStream, 0, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

FC_EXPORT CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    FC_BEGIN(cuStreamIsCapturing_ptsz);
    return info(hStream, 1, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

FC_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                     cuuint64_t *id_out, CUgraph *graph_out,
                                                     const CUgraphNode **dependencies_out,
                                                     const CUgraphEdgeData **edgeData_out,
                                                     size_t *numDependencies_out)
{
    FC_BEGIN(cuStreamGetCaptureInfo_v3);
    return info(hStream, 0, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                numDependencies_out);
}

FC_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                          CUstreamCaptureStatus *captureStatus_out,
                                                          cuuint64_t *id_out, CUgraph *graph_out,
                                                          const CUgraphNode **dependencies_out,
                                                          const CUgraphEdgeData **edgeData_out,
                                                          size_t *numDependencies_out)
{
    FC_BEGIN(cuStreamGetCaptureInfo_v3_ptsz);
    return info(hStream, 1, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                numDependencies_out);
}

/* Deliberately stricter than driver 580, which stores any value (and
 * crashes on NULL): a mode that is not one of the three is refused. */
FC_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    FC_BEGIN(cuThreadExchangeStreamCaptureMode);
    if (!mode || !mode_valid((int)*mode))
        return CUDA_ERROR_INVALID_VALUE;
    int old = tls_mode;
    tls_mode = (int)*mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
}

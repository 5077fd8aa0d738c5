/*
 * Stream capture, as the limiter must see it (docs/limiter.md, "Stream
 * capture"). Work launched to a capturing stream becomes graph nodes; the
 * limiter must not pace, mark or time it, and none of its own driver calls
 * may invalidate a capture: an event query or other "potentially unsafe"
 * call from a thread in GLOBAL capture mode invalidates every GLOBAL
 * capture open in the process.
 *
 * The capture wrappers count the captures open in this process, so that a
 * process that is not capturing (a server replaying its graphs, a training
 * loop) pays nothing for this: no cuStreamIsCapturing per launch, no mode
 * switch around our queries. While a capture is open, launches ask the
 * driver whether their stream captures, and our unsafe calls run with the
 * thread switched to relaxed mode.
 *
 * The count and the unsafe calls meet in a handshake, so a capture that
 * begins while a launch path is between "no capture open" and its event
 * query cannot be invalidated by that query:
 *   unsafe call:  unrelaxed++ ; if (open == 0) { call; } else relax ;
 *                 unrelaxed--
 *   begin:        open++ ; wait until unrelaxed == 0 ; begin the capture
 * Both sides use sequentially consistent atomics: either the launch path
 * sees the capture counted, or the begin sees the launch path inside and
 * waits for it (a few event queries, never a sleep).
 */
#define _GNU_SOURCE
#include <sched.h>

#include "limiter/internal.h"

/* Captures begun and not ended in this process (atomic). A capture that
 * ends in a way we cannot see (its context destroyed) keeps it high: the
 * cost is the slower safe path, never an invalidated capture. */
static int captures_open;
/* Threads inside an unsafe section that found no capture open (atomic). */
static int unrelaxed;

bool cs__capture_any_open(void)
{
    return __atomic_load_n(&captures_open, __ATOMIC_SEQ_CST) != 0;
}

bool cs__capture_stream_captured(CUstream rec)
{
    if (!cs__capture_any_open() || !cs_drv.cuStreamIsCapturing)
        return false;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = cs_drv.cuStreamIsCapturing(rec, &st);
    if (r == CUDA_SUCCESS)
        return st != CU_STREAM_CAPTURE_STATUS_NONE;
    /* CUDA_ERROR_STREAM_CAPTURE_*: the legacy stream next to a capturing
     * blocking stream, and the like: leave it to the application. Any
     * other error (a bad handle) fails the launch itself. */
    return r >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && r <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
}

static CUstreamCaptureMode relax(CUstreamCaptureMode m)
{
    if (cs_drv.cuThreadExchangeStreamCaptureMode)
        cs_drv.cuThreadExchangeStreamCaptureMode(&m);
    return m;
}

void cs__capture_unsafe_begin(struct cs_capture_guard *g)
{
    __atomic_fetch_add(&unrelaxed, 1, __ATOMIC_SEQ_CST);
    g->relaxed = cs__capture_any_open();
    if (!g->relaxed)
        return;
    __atomic_fetch_sub(&unrelaxed, 1, __ATOMIC_SEQ_CST);
    g->prev = relax(CU_STREAM_CAPTURE_MODE_RELAXED);
}

void cs__capture_unsafe_end(struct cs_capture_guard *g)
{
    if (!g->relaxed)
        __atomic_fetch_sub(&unrelaxed, 1, __ATOMIC_SEQ_CST);
    else if (g->prev != CU_STREAM_CAPTURE_MODE_RELAXED)
        relax(g->prev);
}

void cs__capture_relax_thread(void)
{
    relax(CU_STREAM_CAPTURE_MODE_RELAXED);
}

void cs__capture_atfork_child(void)
{
    /* Captures do not survive fork; neither does any other thread. */
    __atomic_store_n(&captures_open, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&unrelaxed, 0, __ATOMIC_SEQ_CST);
}

/* ---- the capture wrappers ------------------------------------------------ */

static void opening(void)
{
    __atomic_fetch_add(&captures_open, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&unrelaxed, __ATOMIC_SEQ_CST) != 0)
        sched_yield();
}

static void closing(void)
{
    int n = __atomic_load_n(&captures_open, __ATOMIC_SEQ_CST);
    while (n > 0 && !__atomic_compare_exchange_n(&captures_open, &n, n - 1, false,
                                                 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
}

static CUresult begun(CUresult r)
{
    if (r != CUDA_SUCCESS)
        closing();
    return r;
}

/* Every way of beginning a capture: counted before the driver call. */
#define BEGIN_WRAPPER(sym, params, args)      \
    CUresult CUDAAPI sym params               \
    {                                         \
        CS_ENTER(sym);                        \
        opening();                            \
        return begun(cs_real.sym args);       \
    }

BEGIN_WRAPPER(cuStreamBeginCapture, (CUstream s), (s))
BEGIN_WRAPPER(cuStreamBeginCapture_ptsz, (CUstream s), (s))
BEGIN_WRAPPER(cuStreamBeginCapture_v2, (CUstream s, CUstreamCaptureMode m), (s, m))
BEGIN_WRAPPER(cuStreamBeginCapture_v2_ptsz, (CUstream s, CUstreamCaptureMode m), (s, m))
BEGIN_WRAPPER(cuStreamBeginCaptureToGraph,
              (CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
               size_t n, CUstreamCaptureMode m),
              (s, g, deps, edges, n, m))
BEGIN_WRAPPER(cuStreamBeginCaptureToGraph_ptsz,
              (CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
               size_t n, CUstreamCaptureMode m),
              (s, g, deps, edges, n, m))

/* A capture ends when its origin stream leaves capture mode, whatever
 * cuStreamEndCapture returns (success, invalidated, unjoined): compare the
 * stream's status before and after. Ending it on another stream of the
 * capture, or on a stream that was not capturing, changes nothing. */
static bool capturing(CUresult (*is)(CUstream, CUstreamCaptureStatus *), CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return is && is(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* `q` is `s` as the plain cuStreamIsCapturing names it (NULL in a _ptsz
 * call is the per-thread stream). */
static CUresult end_capture(CUresult (*end)(CUstream, CUgraph *), CUstream s, CUstream q,
                            CUgraph *g)
{
    bool was = capturing(cs_drv.cuStreamIsCapturing, q);
    CUresult r = end(s, g);
    if (was && !capturing(cs_drv.cuStreamIsCapturing, q))
        closing();
    return r;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph *g)
{
    CS_ENTER(cuStreamEndCapture);
    return end_capture(cs_real.cuStreamEndCapture, s, s, g);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    CS_ENTER(cuStreamEndCapture_ptsz);
    return end_capture(cs_real.cuStreamEndCapture_ptsz, s, s ? s : CU_STREAM_PER_THREAD, g);
}

/*
 * Stream capture as cushare must see it (capture.c, docs/limiter.md
 * "Stream capture"): which work is being captured rather than run, and how
 * cushare's own driver calls keep out of the way of an open capture. Used
 * by the limiter's launch path and by the stream-ordered allocation
 * wrappers (src/mem/pool.c).
 */
#ifndef CS_LIMITER_CAPTURE_H
#define CS_LIMITER_CAPTURE_H

#include <stdbool.h>

#include "hook/hooks.h"

/* Whether any stream capture is open in this process. */
bool cs__capture_any_open(void);

/* Whether work pushed to `rec` now would be captured (or the driver will
 * not say: the legacy stream beside a capturing blocking stream). Costs
 * one load while no capture is open. */
bool cs__capture_stream_captured(CUstream rec);

/* Brackets driver calls that a GLOBAL-mode capture forbids to every other
 * thread (event queries, pool attributes): while a capture is open they
 * run in relaxed mode, and a capture cannot begin in the middle of an
 * unrelaxed one. Never held across a sleep or a call that may block. */
struct cs_capture_guard {
    bool relaxed;
    CUstreamCaptureMode prev;
};
void cs__capture_unsafe_begin(struct cs_capture_guard *g);
void cs__capture_unsafe_end(struct cs_capture_guard *g);

/* Puts the calling thread in relaxed capture mode for good: for cushare's
 * own threads (the watcher). */
void cs__capture_relax_thread(void);

/* Fork child: no capture survives fork. */
void cs__capture_atfork_child(void);

#endif

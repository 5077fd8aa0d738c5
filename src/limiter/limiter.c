/*
 * Compute limiter: not yet pacing (the compute-slice issue builds it);
 * every launch wrapper and every intercepted call already passes through
 * these hooks, so pacing and suspend land without touching the wrappers.
 */
#include "limiter/limiter.h"

void cs__checkpoint(void) {}

void cs__limiter_before_launch(CUstream stream) { (void)stream; }

void cs__limiter_after_launch(CUstream stream, CUresult launched)
{
    (void)stream;
    (void)launched;
}

/*
 * The compute limiter's interface to the launch wrappers. Every launch
 * path calls cs__limiter_before_launch (which may pace the caller) and
 * cs__limiter_after_launch (which measures); with no SM limit both return
 * after one predictable branch.
 */
#ifndef CS_LIMITER_LIMITER_H
#define CS_LIMITER_LIMITER_H

#include "hook/hooks.h"

void cs__limiter_before_launch(CUstream stream);
void cs__limiter_after_launch(CUstream stream, CUresult launched);

#endif

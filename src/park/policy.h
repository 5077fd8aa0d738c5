/*
 * Who is parked, when, and whether it is safe (docs/parking.md): pure
 * functions over explicit state, clock and memory figures passed in, so the
 * decisions are unit-tested without a driver (tests/park/test_policy.c).
 * The mechanism (park.c) gathers the inputs and applies the answers.
 */
#ifndef CS_PARK_POLICY_H
#define CS_PARK_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One tenant as the victim choice sees it. */
struct cs_park_tenant {
    uint64_t on_gpu;         /* device bytes it holds on the GPU now */
    int64_t last_active_ns;  /* CLOCK_MONOTONIC of its latest GPU call; 0 never */
    uint32_t in_call;        /* threads inside a GPU call right now */
    int32_t priority;        /* CUDA_TASK_PRIORITY: 0 high, larger is lower */
    bool parked;             /* already off the GPU */
    bool shares;             /* shares device memory between processes (the
                                driver cannot checkpoint it) */
    bool chosen;             /* out: park it */
};

/* Idle: nobody inside a call and no call for at least idle_ns. A tenant
 * that never called has nothing on the GPU worth waking for and counts as
 * idle. A clock that went backwards (a stamp in the future) is not idle. */
bool cs__park_idle(const struct cs_park_tenant *t, int64_t now, int64_t idle_ns);

/* May the requester (priority `req_prio`) park t? Never a busy tenant,
 * never one already parked or sharing memory, never one of higher priority
 * (a smaller number) than the requester, never one with nothing on the GPU. */
bool cs__park_eligible(const struct cs_park_tenant *t, int32_t req_prio, int64_t now,
                       int64_t idle_ns);

/* Chooses the tenants to park so that at least `need` bytes come free:
 * eligible ones only, lowest priority first, then least recently active
 * first; then drops every choice the others make unnecessary (never more
 * than needed). Sets t[i].chosen and returns how many were chosen and the
 * bytes they free in *freed; 0 when need is 0; -ENOSPC (nothing chosen)
 * when all eligible tenants together cannot free `need`: parking some
 * would cost them a wake and still not admit the request. */
int cs__park_choose(struct cs_park_tenant *t, size_t n, uint64_t need, int32_t req_prio,
                    int64_t now, int64_t idle_ns, uint64_t *freed);

/* Host memory a park may take. The checkpoint lands in the performer's
 * view of the tenant's host memory: the node's MemAvailable, and the
 * tenant's cgroup (limit - usage) when it has a limit (limit 0 = none).
 * A park fits when `bytes` plus a reserve of max(1/16 of the smaller
 * room, 256 MiB) is within both: parking must never make the node swap
 * or the cgroup OOM-kill the tenant it was meant to keep. */
bool cs__park_host_fits(uint64_t bytes, uint64_t mem_available, uint64_t cg_limit,
                        uint64_t cg_usage);

/* Node opt-in: may a tenant with `budget` join when the node's tenants
 * already hold budgets summing to `sum` on a card of `card` bytes and
 * budgets may reach pct percent of the card (0: parking off, so 100)?
 * Budgets of 0 (no limit) count as the whole card. */
bool cs__park_budget_admits(uint64_t sum, uint64_t budget, uint64_t card, uint32_t pct);

/* What a budget counts for against a card: itself, or the whole card when
 * it is 0 (no limit) or larger. */
uint64_t cs__park_budget_on_card(uint64_t budget, uint64_t card);

/* Bytes that must come free on the GPU for `want` more to fit, with
 * `free_now` free: 0 when it fits already. */
uint64_t cs__park_need(uint64_t want, uint64_t free_now);

#endif

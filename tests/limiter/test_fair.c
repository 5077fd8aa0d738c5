/*
 * The share decision (src/limiter/fair.c) without a driver: the weighted
 * max-min split, work conservation (nobody held while the GPU has idle
 * time or nobody else wants it), the floor under contention, the hard
 * cap of `force`, only the owed making anyone wait (a launch-bound tenant
 * is held only for a GPU-filling rival under its floor), the priority
 * hold with its short queue, turn-taking
 * only for tenants that fill the GPU, and yielding on a higher-priority
 * tenant's activity (the quiet wait); fulfilment's saturation with its
 * hysteresis.
 */
#include <stdio.h>
#include <stdlib.h>

#include "limiter/fair.h"

#define CHECK(c)                                                                \
    do {                                                                        \
        if (!(c)) {                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)
#define CHECK_EQ(a, b)                                                          \
    do {                                                                        \
        long long a_ = (long long)(a), b_ = (long long)(b);                     \
        if (a_ != b_) {                                                         \
            fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, #a, \
                    a_, b_);                                                    \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

#define ANY UINT32_MAX

static void split(void)
{
    uint32_t out[4];
    /* Both want everything: by weight. */
    cs__fair_split(10000, 2, (uint32_t[]){2500, 7500}, (uint32_t[]){ANY, ANY}, out);
    CHECK_EQ(out[0], 2500);
    CHECK_EQ(out[1], 7500);
    /* Weights summing under the device still split all of it. */
    cs__fair_split(10000, 2, (uint32_t[]){5000, 2500}, (uint32_t[]){ANY, ANY}, out);
    CHECK_EQ(out[0], 6666);
    CHECK_EQ(out[1], 3333);
    /* A tenant below its weighted part keeps what it uses; the rest goes
     * to the other. */
    cs__fair_split(10000, 2, (uint32_t[]){2500, 7500}, (uint32_t[]){2000, ANY}, out);
    CHECK_EQ(out[0], 2000);
    CHECK_EQ(out[1], 8000);
    /* Over its weighted part: held to it. */
    cs__fair_split(10000, 2, (uint32_t[]){2500, 7500}, (uint32_t[]){4000, ANY}, out);
    CHECK_EQ(out[0], 2500);
    CHECK_EQ(out[1], 7500);
    /* Three, one satisfied in a second round. */
    cs__fair_split(10000, 3, (uint32_t[]){2000, 3000, 5000}, (uint32_t[]){ANY, 2500, ANY}, out);
    CHECK_EQ(out[1], 2500);
    CHECK_EQ(out[0], 2142);
    CHECK_EQ(out[2], 5357);
    /* Nobody wants much: everyone satisfied, nothing made up. */
    cs__fair_split(10000, 2, (uint32_t[]){2500, 7500}, (uint32_t[]){4000, 4000}, out);
    CHECK_EQ(out[0], 4000);
    CHECK_EQ(out[1], 4000);
}

static struct cs_fair_out decide(bool force, uint32_t floor, uint32_t use, int busy,
                                 bool filling, int n, const struct cs_fair_peer *p)
{
    struct cs_fair_in in = {.force = force, .floor_pm = floor, .use_pm = use,
                            .filling = filling, .device_busy_pm = busy, .npeers = n,
                            .peers = p};
    struct cs_fair_out o;
    cs__fair_decide(&in, &o);
    return o;
}

static void conserving(void)
{
    /* Two launch-bound tenants at 40 % each (25 and 75): the device has
     * idle time, so neither is held, whatever its floor. */
    struct cs_fair_peer b75 = {.floor_pm = 7500, .use_pm = 4000};
    struct cs_fair_out o = decide(false, 2500, 4000, 8200, false, 1, &b75);
    CHECK(!o.engaged);
    CHECK_EQ(o.why, CS_FAIR_FREE);
    CHECK(!o.turns);
    /* Alone on a saturated device: nobody to yield to. */
    o = decide(false, 2500, 9900, 9900, true, 0, NULL);
    CHECK(!o.engaged);
    /* Saturated, but we use less than our floor: not held, not engaged
     * (a launch-bound tenant beside a hog above its floor stays on the
     * free path: measuring each of its launches costs it CPU time it
     * needs, and on a time-slicing GPU its measured kernels include the
     * hog's slices). */
    struct cs_fair_peer hog = {.floor_pm = 7500, .use_pm = 8000, .filling = true};
    o = decide(false, 2500, 2000, 10000, false, 1, &hog);
    CHECK(!o.engaged);
    CHECK_EQ(o.why, CS_FAIR_FREE);
    /* Beside a rival at (not above) its floor: nothing to claim. */
    struct cs_fair_peer level = {.floor_pm = 7500, .use_pm = 7550};
    o = decide(false, 2500, 2000, 10000, false, 1, &level);
    CHECK(!o.engaged);
    /* ... and the hog beside it is entitled to the rest, above its floor. */
    struct cs_fair_peer small = {.floor_pm = 2500, .use_pm = 2000};
    o = decide(false, 7500, 8000, 10000, true, 1, &small);
    CHECK_EQ(o.entitled_pm, 8000);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 8000);
    /* ... with a short queue, since the small one has work waiting. */
    CHECK_EQ(o.ahead_ns, CS_FAIR_PRIORITY_AHEAD_NS);
    /* Even under its entitlement, above its floor it keeps the queue short
     * while an unheld rival that does not fill the GPU is busy ... */
    o = decide(false, 7500, 7600, 10000, true, 1, &small);
    CHECK(o.engaged);
    CHECK_EQ(o.ahead_ns, CS_FAIR_PRIORITY_AHEAD_NS);
    /* A rival that fills the GPU wants more than it uses: under
     * time-slicing its use is only its slice. Two saturating tenants at 25
     * and 75 that the GPU's time-slicing splits 47/47: the 75 is under its
     * floor and gets it; the 25 is held to its own. */
    small.filling = true;
    o = decide(false, 7500, 7600, 10000, true, 1, &small);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 7500);
    CHECK_EQ(o.ahead_ns, 0); /* it wants throughput, not a short queue */
    struct cs_fair_peer m75 = {.floor_pm = 7500, .use_pm = 4700, .filling = true};
    o = decide(false, 2500, 4700, 10000, true, 1, &m75);
    CHECK(o.engaged);
    CHECK_EQ(o.why, CS_FAIR_CONTENDED);
    CHECK_EQ(o.share_pm, 2500);
    CHECK(o.turns);
    /* The 75 is under its floor beside the 25 above its own: not held,
     * and not engaged (the 25 is held to its floor instead). */
    struct cs_fair_peer m25 = {.floor_pm = 2500, .use_pm = 4700, .filling = true};
    o = decide(false, 7500, 4700, 10000, true, 1, &m25);
    CHECK(!o.engaged);
    /* Taking turns, the GPU idles only in the windows' own gaps (after a
     * sync inside a window): that is no spare capacity, so the tenants
     * stay held and keep their windows. */
    struct cs_fair_peer w75 = {.floor_pm = 7500, .use_pm = 7000, .held = true, .filling = true};
    struct cs_fair_in in = {.floor_pm = 2500, .use_pm = 2300, .held = true, .filling = true,
                            .device_busy_pm = 9300, .npeers = 1, .peers = &w75};
    cs__fair_decide(&in, &o);
    CHECK(!o.engaged);
    in.windows = true;
    cs__fair_decide(&in, &o);
    CHECK(o.engaged);
    CHECK_EQ(o.why, CS_FAIR_CONTENDED);
    CHECK_EQ(o.share_pm, 2500);
    CHECK(o.turns);
}

/* A tenant whose queue runs dry between its launches keeps it short
 * already: it is never engaged only to keep it so (the guard), which
 * would cost it the CPU time its launches run on. */
static void guard_needs_a_queue(void)
{
    /* Two decode loops at 25 and 75, each using a third of the GPU on a
     * saturated device: the 25 is over its floor, the 75 under its own. */
    struct cs_fair_peer d75 = {.floor_pm = 7500, .use_pm = 3300};
    struct cs_fair_out o = decide(false, 2500, 3300, 10000, false, 1, &d75);
    CHECK(!o.engaged);
    CHECK_EQ(o.why, CS_FAIR_FREE);
    struct cs_fair_peer d25 = {.floor_pm = 2500, .use_pm = 3300};
    o = decide(false, 7500, 3300, 10000, false, 1, &d25);
    CHECK(!o.engaged);
    /* Over its entitlement beside a rival that fills the GPU: held. */
    d75.filling = true;
    o = decide(false, 2500, 3300, 10000, false, 1, &d75);
    CHECK(o.engaged);
    CHECK_EQ(o.why, CS_FAIR_CONTENDED);
    CHECK_EQ(o.share_pm, 2500);
    CHECK(!o.turns);
    /* A tenant that fills the GPU, above its floor and under its
     * entitlement, keeps its queue short for a launch-bound rival under
     * its own floor; a launch-bound one in its place is left alone. */
    struct cs_fair_peer small = {.floor_pm = 2500, .use_pm = 1500};
    o = decide(false, 7500, 8000, 10000, true, 1, &small);
    CHECK(o.engaged);
    CHECK_EQ(o.ahead_ns, CS_FAIR_PRIORITY_AHEAD_NS);
    o = decide(false, 7500, 8000, 10000, false, 1, &small);
    CHECK(!o.engaged);
}

/* Only someone owed something makes anyone wait. A tenant that leaves the
 * GPU idle between its launches is held only while a rival that fills the
 * GPU gets less than its floor; a launch-bound rival unheld at or above
 * its floor is owed nothing and holds nobody back. */
static void only_the_owed_hold(void)
{
    /* Two decode loops at 25 and 75 on a device NVML calls saturated
     * (two contexts time-slicing keep it "busy"), each measured above its
     * floor: neither is held, as with no limiter. */
    struct cs_fair_peer d75 = {.floor_pm = 7500, .use_pm = 7600};
    struct cs_fair_out o = decide(false, 2500, 4000, 10000, false, 1, &d75);
    CHECK(!o.engaged);
    CHECK_EQ(o.why, CS_FAIR_FREE);
    struct cs_fair_peer d25 = {.floor_pm = 2500, .use_pm = 4000};
    o = decide(false, 7500, 7600, 10000, false, 1, &d25);
    CHECK(!o.engaged);
    /* A decode loop over its floor beside a hog that has its own: free. */
    struct cs_fair_peer hog = {.floor_pm = 7500, .use_pm = 7900, .filling = true};
    o = decide(false, 2500, 3500, 10000, false, 1, &hog);
    CHECK(!o.engaged);
    /* ... and beside one a little under it (a one-second average's noise,
     * or a hog ramping up): free. */
    hog.use_pm = 7000;
    o = decide(false, 2500, 3500, 10000, false, 1, &hog);
    CHECK(!o.engaged);
    /* ... held once the hog clearly gets less than its floor. */
    hog.use_pm = 6500;
    o = decide(false, 2500, 3500, 10000, false, 1, &hog);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 2500);
    CHECK(!o.turns);
    /* ... but not while its own pacing holds it (kept to a short queue
     * beside us, or to its entitlement): what it lacks is what its
     * pacing keeps back, and holding us too would only feed that. */
    hog.held = true;
    o = decide(false, 2500, 3500, 10000, false, 1, &hog);
    CHECK(!o.engaged);
    CHECK_EQ(o.why, CS_FAIR_FREE);
    hog.held = false;
    /* The hog beside a decode loop at or above its floor, unheld: nobody
     * is owed anything, the hog is not held (it takes the gaps). */
    struct cs_fair_peer dec = {.floor_pm = 2500, .use_pm = 3000};
    o = decide(false, 7500, 8000, 10000, true, 1, &dec);
    CHECK(!o.engaged);
    /* ... but a decode loop its pacing holds would use more: a rival. */
    dec.held = true;
    o = decide(false, 7500, 8000, 10000, true, 1, &dec);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 7500);
    /* Busy time nobody's board entry explains is an unlimited tenant's,
     * presumed to fill the GPU, owed the floor nobody claims (75 %): a
     * launch-bound tenant beside it is free while it has that ... */
    struct cs_fair_in in = {.floor_pm = 2500, .use_pm = 3000, .device_busy_pm = 10000,
                            .foreign_pm = 7500};
    cs__fair_decide(&in, &o);
    CHECK(!o.engaged);
    /* ... and held to its floor while it clearly gets less. */
    in.foreign_pm = 5000;
    cs__fair_decide(&in, &o);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 2500);
}

/* A launch-bound tenant at the highest priority beside a hog that yields
 * to it: NVML calls the device busy while the two contexts time-slice and
 * sees far more busy time than the board's uses explain. That excess is
 * the hog's slice, not an unlimited tenant owed the floor nobody claims:
 * the hog claims its floor, so nobody holds the tenant it yields to. */
static void lower_priority_claims_its_floor(void)
{
    struct cs_fair_peer hog = {.floor_pm = 7500, .use_pm = 1000, .priority = 1,
                               .held = true, .filling = true};
    struct cs_fair_in in = {.floor_pm = 2500, .use_pm = 3000, .device_busy_pm = 9700,
                            .foreign_pm = 5800, .npeers = 1, .peers = &hog};
    struct cs_fair_out o;
    cs__fair_decide(&in, &o);
    CHECK(!o.engaged);
    CHECK_EQ(o.why, CS_FAIR_FREE);
    /* Beside a tenant of our own priority whose floor leaves 50 %
     * unclaimed, unexplained busy time clearly under that is an unlimited
     * tenant owed it. */
    struct cs_fair_peer small = {.floor_pm = 2500, .use_pm = 1000};
    in.peers = &small;
    in.foreign_pm = 4000;
    cs__fair_decide(&in, &o);
    CHECK(o.engaged);
    CHECK_EQ(o.why, CS_FAIR_CONTENDED);
}

/* Equal floors of tenants that fill the GPU split it as time-slicing does:
 * nobody is held, since holding would cost the pacing's overhead and give
 * nobody anything. Unequal ones are held as before. */
static void equal_floors_run_free(void)
{
    struct cs_fair_peer g[3];
    for (int i = 0; i < 3; i++)
        g[i] = (struct cs_fair_peer){.floor_pm = 2500, .use_pm = 2500, .filling = true};
    struct cs_fair_out o = decide(false, 2500, 2500, 10000, true, 3, g);
    CHECK(!o.engaged);
    CHECK_EQ(o.entitled_pm, 2500);
    /* NVML's per-process samples count more busy time than the four
     * uses add up to: with the device already explained, that is how it
     * counts, not an unlimited tenant (which would make the split uneven
     * and wait on us). */
    struct cs_fair_in nv = {.floor_pm = 2500, .use_pm = 2440, .filling = true,
                            .device_busy_pm = 10000, .foreign_pm = 2700, .npeers = 3,
                            .peers = g};
    cs__fair_decide(&nv, &o);
    CHECK(!o.engaged);
    CHECK_EQ(o.entitled_pm, 2500);
    /* ... also when its own pacing held it the second before. */
    struct cs_fair_in in = {.floor_pm = 2500, .use_pm = 2500, .filling = true, .held = true,
                            .device_busy_pm = 10000, .npeers = 3, .peers = g};
    cs__fair_decide(&in, &o);
    CHECK(!o.engaged);
    /* Two at 50 beside a launch-bound tenant using a fifth: each may take
     * half of what it leaves, as time-slicing gives them. */
    struct cs_fair_peer two[2] = {{.floor_pm = 5000, .use_pm = 4000, .filling = true},
                                  {.floor_pm = 2000, .use_pm = 2000}};
    o = decide(false, 5000, 4000, 10000, true, 2, two);
    CHECK(!o.engaged);
    /* Unequal (25 beside 75): the 25 is held to its part. */
    struct cs_fair_peer big = {.floor_pm = 7500, .use_pm = 5000, .filling = true};
    o = decide(false, 2500, 5000, 10000, true, 1, &big);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 2500);
    /* A launch-bound rival just under its floor (the noise of a
     * one-second average) is not waiting behind us: no short queue. */
    struct cs_fair_peer dec = {.floor_pm = 2500, .use_pm = 2400};
    o = decide(false, 7500, 7600, 10000, true, 1, &dec);
    CHECK(!o.engaged);
    /* ... clearly under it, it is. */
    dec.use_pm = 2000;
    o = decide(false, 7500, 7600, 10000, true, 1, &dec);
    CHECK(o.engaged);
    CHECK_EQ(o.ahead_ns, CS_FAIR_PRIORITY_AHEAD_NS);
}

static void floor_under_contention(void)
{
    /* Saturated by two tenants that both use all they get: each held to
     * its weighted part of the whole device, which is more than its limit
     * when the limits add up to less (50 + 25: two thirds and a third). */
    struct cs_fair_peer l = {.floor_pm = 2500, .use_pm = 3300, .held = true};
    struct cs_fair_out o = decide(false, 5000, 6600, 10000, true, 1, &l);
    CHECK(o.engaged);
    CHECK_EQ(o.why, CS_FAIR_CONTENDED);
    CHECK_EQ(o.share_pm, 6666);
    CHECK(o.turns);
    CHECK_EQ(o.ahead_ns, 0); /* nobody waits: the usual run-ahead */
    /* A launch-bound tenant over its floor beside a hog clearly under its
     * own: held to its floor, but never made to take turns. */
    struct cs_fair_peer hog = {.floor_pm = 7500, .use_pm = 6500, .filling = true};
    o = decide(false, 2500, 3000, 10000, false, 1, &hog);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 2500);
    CHECK(!o.turns);
    /* Busy time no board entry explains competes with the floor nobody
     * claims: a 25 % tenant beside an unlimited hog keeps 25 %. */
    struct cs_fair_in in = {.floor_pm = 2500, .use_pm = 3000, .device_busy_pm = 10000,
                            .foreign_pm = 7500, .filling = true};
    cs__fair_decide(&in, &o);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 2500);
    /* Noise: a little unexplained busy time takes only what it uses. */
    in.foreign_pm = 1200;
    cs__fair_decide(&in, &o);
    CHECK_EQ(o.entitled_pm, 8800);
    CHECK(!o.engaged);
    /* A tenant its pacing holds stays engaged while the device is
     * contended, even a little under its entitlement. */
    struct cs_fair_peer big = {.floor_pm = 5000, .use_pm = 6700, .filling = true};
    struct cs_fair_in h = {.floor_pm = 2500, .use_pm = 3000, .device_busy_pm = 9900,
                           .held = true, .filling = true, .npeers = 1, .peers = &big};
    cs__fair_decide(&h, &o);
    CHECK(o.engaged);
    CHECK_EQ(o.share_pm, 3333);
    h.held = false;
    big.held = true; /* and nobody waits on us */
    cs__fair_decide(&h, &o);
    CHECK(!o.engaged);
    /* Unknown utilisation fails closed: contended. */
    o = decide(false, 2500, 3000, -1, true, 1, &hog);
    CHECK(o.engaged);
    /* A lower-priority tenant does not hold us back. */
    struct cs_fair_peer low = {.floor_pm = 7500, .use_pm = 7000, .priority = 1};
    o = decide(false, 2500, 3000, 10000, true, 1, &low);
    CHECK(!o.engaged);
}

static void force_and_priority(void)
{
    /* force: a cap, alone or not. */
    struct cs_fair_out o = decide(true, 2500, 2500, 2500, true, 0, NULL);
    CHECK(o.engaged);
    CHECK_EQ(o.why, CS_FAIR_CAPPED);
    CHECK_EQ(o.share_pm, 2500);
    /* Beside a busy higher-priority tenant: held to what it leaves, with a
     * short queue, even when the device is not saturated. */
    struct cs_fair_peer hi = {.floor_pm = 2500, .use_pm = 3000, .priority = -1};
    o = decide(false, 7500, 5000, 8000, true, 1, &hi);
    CHECK(o.engaged);
    CHECK_EQ(o.why, CS_FAIR_PRIORITY);
    CHECK_EQ(o.share_pm, 7000);
    CHECK_EQ(o.ahead_ns, CS_FAIR_PRIORITY_AHEAD_NS);
    CHECK(o.turns);
    /* Reasons have names for top and status. */
    CHECK(cs__fair_why_name(CS_FAIR_PRIORITY)[0] == 'p');
    CHECK(cs__fair_why_name(CS_FAIR_FREE)[0] == '-');
}

/* Yield on activity: a lower-priority tenant launches only once every
 * busy higher-priority peer has launched nothing for the quiet period, and
 * looks again at most one quiet period later. */
static void quiet_wait(void)
{
    const int64_t Q = 2000000, now = 50000000000ll;
    /* Nobody published a launch, or yielding is off: go. */
    CHECK_EQ(cs__fair_quiet_wait(now, NULL, 0, Q), 0);
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){0, 0}, 2, Q), 0);
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){now}, 1, 0), 0);
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){now}, 1, -5), 0);
    /* A peer that just launched: wait the whole quiet period. */
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){now}, 1, Q), Q);
    /* Part of it has passed: wait the rest; exactly Q ago is quiet. */
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){now - 500000}, 1, Q), 1500000);
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){now - Q}, 1, Q), 0);
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){now - Q - 1}, 1, Q), 0);
    /* Every peer must be quiet: the latest launch decides. */
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){now - 3 * Q, now - 100, now - Q}, 3, Q),
             Q - 100);
    /* A launch stamped in the future (a peer's lie, or a clock read that
     * raced ours) counts as now: the wait never exceeds one period, so a
     * caller looks again within Q whatever a peer publishes. */
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){now + 1000000000ll}, 1, Q), Q);
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){INT64_MAX, now - Q}, 2, Q), Q);
    /* Negative garbage is no launch. */
    CHECK_EQ(cs__fair_quiet_wait(now, (int64_t[]){-1, INT64_MIN}, 2, Q), 0);
    /* Pure: the verdict moves only with its inputs. Sleeping the wait
     * and asking again lets the launch go unless the peer launched. */
    int64_t last = now - 700000, w = cs__fair_quiet_wait(now, &last, 1, Q);
    CHECK_EQ(cs__fair_quiet_wait(now + w, &last, 1, Q), 0);
    last = now + w - 1;
    CHECK_EQ(cs__fair_quiet_wait(now + w, &last, 1, Q), Q - 1);
}

/* Fulfilment's saturation: enters at 95 % busy, 70 % of it by limited
 * tenants; once in, it leaves only under 90 % busy, so the switches a
 * yield saves (busy time to NVML) do not undo the yield. */
static void fulfil_saturation(void)
{
    const uint64_t board = 850000;
    CHECK(!cs__fair_fulfil_saturated(94, board, false));
    CHECK(cs__fair_fulfil_saturated(95, board, false));
    /* Held while the yield lowers the utilisation a little ... */
    CHECK(cs__fair_fulfil_saturated(92, board, true));
    CHECK(cs__fair_fulfil_saturated(90, board, true));
    /* ... not when the device clearly idles, nor without limited tenants
     * filling it (an unlimited one would only take what we yield). */
    CHECK(!cs__fair_fulfil_saturated(89, board, true));
    CHECK(!cs__fair_fulfil_saturated(99, 690000, true));
    CHECK(!cs__fair_fulfil_saturated(99, 690000, false));
    CHECK(cs__fair_fulfil_saturated(99, 700000, false));
    /* Unknown utilisation (-1) is not saturated: no yield, no claim. */
    CHECK(!cs__fair_fulfil_saturated(-1, board, true));
    /* Leaving is remembered: from under 90 % it takes 95 % again. */
    CHECK(!cs__fair_fulfil_saturated(92, board, false));
}

int main(void)
{
    quiet_wait();
    fulfil_saturation();
    split();
    conserving();
    floor_under_contention();
    guard_needs_a_queue();
    only_the_owed_hold();
    equal_floors_run_free();
    force_and_priority();
    lower_priority_claims_its_floor();
    printf("ok\n");
    return 0;
}

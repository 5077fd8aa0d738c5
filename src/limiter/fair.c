/*
 * The share decision (fair.h). Integer parts per 10000 throughout; no
 * clock, no driver, no shared state: the watcher gathers the inputs once
 * a tick and applies the outputs.
 */
#include "limiter/fair.h"

#include <string.h>

void cs__fair_split(uint32_t capacity, int n, const uint32_t *w, const uint32_t *d,
                    uint32_t *out)
{
    bool done[CS_FAIR_MAX_PEERS + 2] = {false};
    if (n > CS_FAIR_MAX_PEERS + 2)
        n = CS_FAIR_MAX_PEERS + 2;
    uint64_t left = capacity;
    /* Each round satisfies every tenant whose demand fits its weighted
     * part of what is left; when none does, the rest is split by weight. */
    for (int round = 0; round < n; round++) {
        uint64_t wsum = 0;
        for (int i = 0; i < n; i++)
            if (!done[i])
                wsum += w[i] ? w[i] : 1;
        if (!wsum)
            return;
        bool any = false;
        for (int i = 0; i < n; i++) {
            uint64_t wi = w[i] ? w[i] : 1;
            if (!done[i] && (uint64_t)d[i] * wsum <= left * wi) {
                out[i] = d[i];
                left -= d[i];
                done[i] = any = true;
            }
        }
        if (!any)
            break;
    }
    uint64_t wsum = 0;
    for (int i = 0; i < n; i++)
        if (!done[i])
            wsum += w[i] ? w[i] : 1;
    for (int i = 0; i < n; i++)
        if (!done[i])
            out[i] = (uint32_t)(left * (w[i] ? w[i] : 1) / wsum);
}

bool cs__fair_wants_more(uint32_t use_pm, uint32_t share_pm)
{
    return (uint64_t)use_pm * 100 >= (uint64_t)share_pm * CS_FAIR_AT_FLOOR_PCT;
}

/* Whether `use_pm` is clearly under `floor_pm` (under CS_FAIR_OWED_PCT
 * of it), not within the noise of a one-second average. */
static bool clearly_under(uint32_t use_pm, uint32_t floor_pm)
{
    return (uint64_t)use_pm * 100 < (uint64_t)floor_pm * CS_FAIR_OWED_PCT;
}

/* A peer's demand as the split sees it: what it uses, or anything when it
 * fills the GPU or uses all of its floor (it may want more than it gets).
 * Under time-slicing a filling tenant's use is its slice of the device,
 * not what it would take: its queue never runs dry, so it wants more. */
static uint32_t demand_of(const struct cs_fair_peer *p)
{
    uint32_t floor_pm = p->floor_pm ? p->floor_pm : 1;
    return p->filling || cs__fair_wants_more(p->use_pm, floor_pm) ? UINT32_MAX : p->use_pm;
}

static uint32_t clamp_share(uint32_t pm)
{
    return pm < 1 ? 1 : pm > CS_FAIR_FULL - 1 ? CS_FAIR_FULL - 1 : pm;
}

/* The busy time nobody's board entry explains, at most what the board's
 * tenants and we leave of the device: where our uses already add up to
 * all of it, what NVML counts beyond them is its way of counting (its
 * per-process samples see a time-slice as busy), not a tenant. */
static uint32_t unexplained(const struct cs_fair_in *in)
{
    uint64_t known = in->use_pm;
    int np = in->npeers < CS_FAIR_MAX_PEERS ? in->npeers : CS_FAIR_MAX_PEERS;
    for (int i = 0; i < np; i++)
        known += in->peers[i].use_pm;
    uint64_t room = known < CS_FAIR_FULL ? CS_FAIR_FULL - known : 0;
    return in->foreign_pm < room ? in->foreign_pm : (uint32_t)room;
}

/* Whether the split differs from what plain time-slicing gives: some
 * tenant that may use anything (d[i] unbounded) is entitled to clearly
 * more (CS_FAIR_UNEVEN_PCT) than an equal part of what the bounded ones
 * leave, which is what the GPU's time-slicing gives each of them. Where
 * it does not, holding anyone only costs the pacing's own overhead. */
static bool uneven(uint32_t capacity, int n, const uint32_t *d, const uint32_t *got)
{
    uint64_t left = capacity;
    int unbounded = 0;
    for (int i = 0; i < n; i++) {
        if (d[i] == UINT32_MAX)
            unbounded++;
        else
            left -= d[i] < left ? d[i] : left;
    }
    for (int i = 0; i < n && unbounded; i++)
        if (d[i] == UINT32_MAX &&
            (uint64_t)got[i] * 100 * unbounded > left * (100 + CS_FAIR_UNEVEN_PCT))
            return true;
    return false;
}

/* Our entitlement: the split of what higher-priority tenants leave among
 * us, the busy tenants of our priority and (when there is any) the busy
 * time nobody's board entry explains, which is weighted with whatever
 * floor nobody claims. Lower-priority tenants yield to us: not in the
 * split, though their floors are claimed. */
static uint32_t entitlement(const struct cs_fair_in *in, bool *rivals, bool *higher,
                            bool *waiting, bool *owed, bool *unequal)
{
    uint32_t w[CS_FAIR_MAX_PEERS + 2], d[CS_FAIR_MAX_PEERS + 2], got[CS_FAIR_MAX_PEERS + 2];
    int n = 0, np = in->npeers < CS_FAIR_MAX_PEERS ? in->npeers : CS_FAIR_MAX_PEERS;
    uint64_t capacity = CS_FAIR_FULL, floors = in->floor_pm;
    /* Ours as the most we could take: the law's share, which a tenant
     * using less never reaches. */
    w[n] = in->floor_pm;
    d[n++] = UINT32_MAX;
    *rivals = *higher = *waiting = *owed = false;
    for (int i = 0; i < np; i++) {
        const struct cs_fair_peer *p = &in->peers[i];
        if (p->priority < in->priority) {
            capacity -= p->use_pm < capacity ? p->use_pm : capacity;
            *higher = true;
        } else if (p->priority == in->priority) {
            w[n] = p->floor_pm;
            d[n++] = demand_of(p);
            floors += p->floor_pm;
            bool below = p->floor_pm && !cs__fair_wants_more(p->use_pm, p->floor_pm);
            /* A rival would use more than it gets (it fills the GPU, or
             * its pacing holds it) or gets less than its floor. One that
             * leaves the GPU idle between its launches, unheld, at or
             * above its floor, is bounded by its CPU: holding anyone
             * would give it nothing it could use. */
            *rivals |= p->filling || p->held || below;
            /* Held or not: one held to its floor still waits behind
             * our queue whenever it has work. Clearly under its floor,
             * as for owed: a launch-bound tenant near its floor reads
             * over and under it from one second to the next. */
            *waiting |= !p->filling && p->floor_pm && clearly_under(p->use_pm, p->floor_pm);
            /* Owed clearly, not within the noise of a one-second
             * average: holding a launch-bound tenant costs it CPU time.
             * A rival its own pacing holds is not owed: its decision
             * found it at or over what it is entitled to, and what it
             * lacks is what its pacing keeps back (holding us as well
             * would only slow us, which slows it more). */
            *owed |= p->filling && !p->held && clearly_under(p->use_pm, p->floor_pm);
        } else {
            /* Yields to us, but its floor is claimed: the busy time NVML
             * sees beyond the board's uses while it runs is its
             * time-slice (NVML counts a slice as busy), not an unlimited
             * tenant owed the floor nobody claims. */
            floors += p->floor_pm;
        }
    }
    /* Busy time nobody's board entry explains is an unlimited tenant's
     * (or noise: board shares and NVML's utilisation are averaged over
     * different windows). It competes with the floor nobody claims; a
     * little of it keeps only what it uses, much of it may want more. */
    uint32_t foreign = unexplained(in);
    if (foreign >= CS_FAIR_FOREIGN_PM) {
        w[n] = floors < CS_FAIR_FULL ? (uint32_t)(CS_FAIR_FULL - floors) : 1;
        d[n++] = foreign >= CS_FAIR_FOREIGN_GREEDY_PM ? UINT32_MAX : foreign;
        *rivals = true;
        *waiting |= foreign >= CS_FAIR_FOREIGN_GREEDY_PM;
        /* An unlimited tenant we cannot see is presumed to fill the GPU:
         * owed the floor nobody claims when it clearly gets less. */
        *owed |= foreign >= CS_FAIR_FOREIGN_GREEDY_PM && clearly_under(foreign, w[n - 1]);
    }
    memset(got, 0, sizeof got);
    cs__fair_split((uint32_t)capacity, n, w, d, got);
    *unequal = uneven((uint32_t)capacity, n, d, got);
    return got[0];
}

void cs__fair_decide(const struct cs_fair_in *in, struct cs_fair_out *out)
{
    *out = (struct cs_fair_out){.share_pm = clamp_share(in->floor_pm),
                                .entitled_pm = in->floor_pm};
    if (in->force) {
        *out = (struct cs_fair_out){.engaged = true, .share_pm = clamp_share(in->floor_pm),
                                    .entitled_pm = in->floor_pm, .why = CS_FAIR_CAPPED,
                                    .turns = true};
        return;
    }
    bool rivals, higher, waiting, owed, unequal;
    uint32_t ent = entitlement(in, &rivals, &higher, &waiting, &owed, &unequal);
    out->entitled_pm = ent;
    out->share_pm = clamp_share(ent);
    /* Beside a busy higher-priority tenant: held to what it leaves, with a
     * short queue, contended or not, so its work never waits long. */
    if (higher) {
        out->engaged = true;
        out->why = CS_FAIR_PRIORITY;
        out->ahead_ns = CS_FAIR_PRIORITY_AHEAD_NS;
        out->turns = in->filling;
        return;
    }
    /* Unknown utilisation fails closed: as if saturated. */
    bool saturated = in->device_busy_pm < 0 || in->windows ||
                     (uint32_t)in->device_busy_pm >= CS_FAIR_SATURATED_PM;
    if (!saturated || !rivals)
        return;
    /* A tenant that leaves the GPU idle between its launches is bounded by
     * its CPU: what it takes is its kernels plus a context switch each,
     * which no other tenant's queue could have filled. Holding it costs it
     * the CPU time its launches run on and gives the others nothing, so
     * it is held only while a rival that fills the GPU gets less than its
     * floor. */
    if (!in->filling && !owed)
        return;
    /* Over our entitlement, where it is not what time-slicing gives us
     * anyway (equal floors of tenants that fill the GPU split it as the
     * GPU does without us). */
    bool over = unequal && (in->held || cs__fair_wants_more(in->use_pm, ent));
    /* A rival under its floor that leaves the GPU idle between its
     * launches (it does not fill it; its pacing does not hold it) has
     * work waiting behind ours: above our floor, when we fill the GPU, we
     * keep our queue short, so its latency, and so its floor, do not
     * depend on how deep we would queue. A queue that runs dry between
     * launches is short already: measuring each launch to keep it so
     * would only cost a launch-bound tenant the CPU time it runs on. */
    bool guard = waiting && in->filling && cs__fair_wants_more(in->use_pm, in->floor_pm);
    if (!over && !guard)
        return;
    out->engaged = true;
    out->why = CS_FAIR_CONTENDED;
    out->ahead_ns = waiting ? CS_FAIR_PRIORITY_AHEAD_NS : 0;
    out->turns = in->filling;
}

int64_t cs__fair_quiet_wait(int64_t now, const int64_t *last, int n, int64_t quiet_ns)
{
    if (quiet_ns <= 0)
        return 0;
    int64_t latest = 0;
    for (int i = 0; i < n; i++) {
        int64_t t = last[i] > now ? now : last[i];
        if (t > latest)
            latest = t;
    }
    if (latest <= 0)
        return 0;
    int64_t wait = latest + quiet_ns - now;
    return wait > 0 ? wait : 0;
}

bool cs__fair_fulfil_saturated(int util_pct, uint64_t board_ppm, bool was)
{
    int busy = was ? CS_FAIR_FULFIL_HOLD_PCT : CS_FAIR_FULFIL_BUSY_PCT;
    return util_pct >= busy && board_ppm >= CS_FAIR_FULFIL_BOARD_PCT * 10000ull;
}

const char *cs__fair_why_name(enum cs_fair_why why)
{
    switch (why) {
    case CS_FAIR_CONTENDED:
        return "contended";
    case CS_FAIR_CAPPED:
        return "capped";
    case CS_FAIR_PRIORITY:
        return "priority";
    default:
        return "-";
    }
}

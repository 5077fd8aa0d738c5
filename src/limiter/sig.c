/* What one launch signature costs (sig.h). */
#include "limiter/sig.h"

static int64_t with_slack(int64_t mn)
{
    return mn + mn * CS_LIM_SIG_SLACK_PCT / 100;
}

int64_t cs__sig_min(const struct cs_lim_sig *e)
{
    if (!e->min_cur || (e->min_prev && e->min_prev < e->min_cur))
        return e->min_prev;
    return e->min_cur;
}

int64_t cs__sig_measure(struct cs_lim_sig *e, int64_t ns)
{
    int64_t mn = cs__sig_min(e), charged = ns;
    if (mn > 0 && charged > with_slack(mn))
        charged = with_slack(mn);
    if (e->n >= CS_LIM_SIG_WINDOW) {
        e->min_prev = e->min_cur;
        e->min_cur = 0;
        e->n = 0;
    }
    if (!e->min_cur || ns < e->min_cur)
        e->min_cur = ns;
    e->n++;
    return charged;
}

void cs__sig_note_charge(struct cs_lim_sig *e, int64_t charged)
{
    e->charged = e->charged ? e->charged + (charged - e->charged) / 4 : charged;
}

int64_t cs__sig_estimate(const struct cs_lim_sig *e)
{
    int64_t mn = cs__sig_min(e);
    return mn > 0 && e->charged > with_slack(mn) ? with_slack(mn) : e->charged;
}

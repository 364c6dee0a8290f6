// sched_sim.c: the tables of every pipeline rank run together with durations (sched_sim.h).
#include "parallel/sched_sim.h"

#include <string.h>

// The messages from rank a to rank b in the order posted: the action indices of the sends on
// a and of the receives on b, and their post times; the first `matched` of each have met.
typedef struct {
    int action;
    double at;
} posted;

typedef struct {
    posted *send, *recv;
    int n_send, n_recv, cap_send, cap_recv, matched;
} channel;

typedef struct {
    const sched_table *t;
    int cursor;
    int group_end; // > cursor while its comm group [cursor, group_end) waits; else 0
    double clock, busy;
    double *done_at; // (n_actions) when each comm action's message met its counterpart; < 0
                     // before
} rank_state;

static posted *push(posted *p, int *n, int *cap, int action, double at) {
    p = xgrow(p, *n, cap, sizeof *p);
    p[(*n)++] = (posted){action, at};
    return p;
}

static void match(channel *c, rank_state *from, rank_state *to, double p2p) {
    for (; c->matched < c->n_send && c->matched < c->n_recv; c->matched++) {
        const posted *s = &c->send[c->matched], *r = &c->recv[c->matched];
        const double t = (s->at > r->at ? s->at : r->at) + p2p;
        from->done_at[s->action] = t;
        to->done_at[r->action] = t;
    }
}

static double duration(const sched_times *t, int v, int rank, const sched_action *a) {
    const int at = rank * v + a->chunk;
    switch (a->kind) {
    case SCHED_ACTION_FWD: return t->f[at];
    case SCHED_ACTION_BWD: return t->b[at] + t->w[at];
    case SCHED_ACTION_BWD_B: return t->b[at];
    case SCHED_ACTION_BWD_W: return t->w[at];
    default: return 0.0;
    }
}

// Moves rank r as far as it can: through compute actions, posting a comm group, or past a
// group whose messages have all met. Returns whether it moved.
static int advance(rank_state *rs, int r, int pp, channel *ch, const sched_times *t) {
    rank_state *s = &rs[r];
    const sched_table *tb = s->t;
    int moved = 0;
    while (s->cursor < tb->n_actions) {
        if (s->group_end) { // waiting on a posted group
            double end = s->clock;
            for (int i = s->cursor; i < s->group_end; i++) {
                if (s->done_at[i] < 0) return moved;
                if (s->done_at[i] > end) end = s->done_at[i];
            }
            s->clock = end, s->cursor = s->group_end, s->group_end = 0, moved = 1;
            continue;
        }
        const sched_action *a = &tb->actions[s->cursor];
        if (!sched_action_is_comm(a->kind)) {
            const double d = duration(t, tb->virtual_stages, r, a);
            s->clock += d, s->busy += d, s->cursor++, moved = 1;
            continue;
        }
        s->group_end = sched_comm_run_end(tb, s->cursor);
        for (int i = s->cursor; i < s->group_end; i++) {
            const sched_action *c = &tb->actions[i];
            const int send = c->kind == SCHED_ACTION_SEND_ACT || c->kind == SCHED_ACTION_SEND_GRAD;
            const int from = send ? r : c->peer, to = send ? c->peer : r;
            channel *x = &ch[from * pp + to];
            if (send) x->send = push(x->send, &x->n_send, &x->cap_send, i, s->clock);
            else x->recv = push(x->recv, &x->n_recv, &x->cap_recv, i, s->clock);
            match(x, &rs[from], &rs[to], t->p2p);
        }
        moved = 1;
    }
    return moved;
}

tri_status sched_simulate(const sched_table *tables, int pp, const sched_times *t,
                          sched_sim_result *out) {
    memset(out, 0, sizeof *out);
    rank_state *rs = xcalloc((size_t)pp, sizeof *rs);
    channel *ch = xcalloc((size_t)pp * pp, sizeof *ch);
    for (int r = 0; r < pp; r++) {
        rs[r].t = &tables[r];
        rs[r].done_at = xmalloc(((size_t)tables[r].n_actions + 1) * sizeof(double));
        for (int i = 0; i < tables[r].n_actions; i++) rs[r].done_at[i] = -1.0;
    }
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < pp; r++) moved |= advance(rs, r, pp, ch, t);
    }
    tri_status rc = TRI_OK;
    out->busy = xcalloc((size_t)pp, sizeof(double));
    for (int r = 0; r < pp; r++) {
        if (rs[r].cursor < tables[r].n_actions) {
            LOG_ERROR("schedule simulation: pipeline rank %d stopped at action %d of %d "
                      "(a deadlock in the tables)",
                      r, rs[r].cursor, tables[r].n_actions);
            rc = TRI_ERR_INTERNAL;
        }
        out->busy[r] = rs[r].busy;
        if (rs[r].clock > out->makespan) out->makespan = rs[r].clock;
    }
    for (int r = 0; r < pp && out->makespan > 0; r++)
        out->idle_mean += (out->makespan - out->busy[r]) / out->makespan / pp;
    for (int r = 0; r < pp; r++) free(rs[r].done_at);
    for (int k = 0; k < pp * pp; k++) free(ch[k].send), free(ch[k].recv);
    free(rs);
    free(ch);
    return rc;
}

void sched_sim_free(sched_sim_result *r) {
    free(r->busy);
    memset(r, 0, sizeof *r);
}

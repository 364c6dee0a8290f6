// test_sched.c: the schedule tables of src/parallel/sched.c, checked by running every rank's list
// together in a simulator, for pp in {1, 2, 3, 4, 8}, v in {1, 2, 4} and m in 1..32 where
// sched_build supports the combination (gpipe: any, v > 1 with pp >= 2; 1f1b: v = 1, any
// m, though the config asks m >= pp; interleaved: v >= 2, pp >= 2, m % pp == 0).
//
// The simulator is written from the semantics in sched.h, not from sched.c: each rank is
// a cursor over its list; FWD and BWD run when reached; a run of consecutive comm actions
// is posted as one group when reached and completes only when every op in it is matched.
// Matching is the strictest the backends allow: rendezvous (a send waits for its receive)
// and in order per ordered pair of ranks, with no tags (comm_mpi.c uses one tag, NCCL p2p
// matches in order), so the n-th send from a to b meets the n-th receive b posts from a,
// and the two must name the same message (direction, micro-batch, stages). A state where
// no rank can move and some are unfinished is a deadlock. The same run, timed (forward 1,
// backward 2 units per chunk, messages free), measures the bubble for
// sched_bubble_fraction. Evaluation's forward-only tables (sched_build_forward) run through
// the same simulator, with their own slot rule (sched.h).
#include <stdarg.h>
#include <string.h>

#include "parallel/sched.h"
#include "testlib.h"

#define MAX_PP 8
#define MAX_PAIRS (4 * 32)          // v * m
#define MAX_ACTIONS (8 * MAX_PAIRS) // each pair has at most one action of each kind
#define NK 8                        // action kinds

// Short names for the checks below.
#define RECV_ACT SCHED_ACTION_RECV_ACT
#define FWD SCHED_ACTION_FWD
#define SEND_ACT SCHED_ACTION_SEND_ACT
#define RECV_GRAD SCHED_ACTION_RECV_GRAD
#define BWD SCHED_ACTION_BWD
#define SEND_GRAD SCHED_ACTION_SEND_GRAD
#define BWD_B SCHED_ACTION_BWD_B
#define BWD_W SCHED_ACTION_BWD_W

typedef struct {
    schedule_kind schedule;
    int forward_only; // sched_build_forward's table (schedule unused)
    int pp, v, m;
    sched_table t[MAX_PP];
    double bubble; // measured by the timed run
    char why[600];
} sim_case;

static const char *schedule_name(schedule_kind s) {
    static const char *names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv"};
    return names[s];
}

static int fail(sim_case *c, const char *fmt, ...) {
    if (c->why[0]) return 0;
    int n = snprintf(c->why, sizeof c->why, "%s pp %d v %d m %d: ",
                     c->forward_only ? "forward-only" : schedule_name(c->schedule), c->pp, c->v,
                     c->m);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why + n, sizeof c->why - (size_t)n, fmt, ap);
    va_end(ap);
    return 0;
}

static int is_comm(int k) {
    return k == RECV_ACT || k == SEND_ACT || k == RECV_GRAD || k == SEND_GRAD;
}
static int is_zb(const sim_case *c) {
    return c->schedule == SCHEDULE_ZBH1 || c->schedule == SCHEDULE_ZBV;
}
// Virtual stage of (rank, chunk), written from DESIGN.md "Layer placement", not from sched.c.
static int stage_of(const sim_case *c, int r, int chunk) {
    if (c->schedule == SCHEDULE_ZBV) return chunk == 0 ? r : 2 * c->pp - 1 - r;
    return chunk * c->pp + r;
}
static int rank_of(const sim_case *c, int s) {
    if (c->schedule == SCHEDULE_ZBV) return s < c->pp ? s : 2 * c->pp - 1 - s;
    return s % c->pp;
}
static const char *name(int k) { return sched_action_name((sched_action_kind)k); }

// Expected peak of pairs held, from each schedule's warm-up length (sched.h).
static int expected_peak(const sim_case *c, int r) {
    int n = c->m * c->v, w;
    if (c->schedule == SCHEDULE_GPIPE) return n;
    if (c->schedule == SCHEDULE_ZBH1) return c->m >= c->pp ? c->pp : -1; // -1: not a closed form
    if (c->schedule == SCHEDULE_ZBV) // one more on a middle rank
        return c->m >= 2 * c->pp ? 2 * c->pp + 1 + (r > 0 && r < c->pp - 1) : -1;
    if (c->schedule == SCHEDULE_1F1B) w = c->pp - r - 1;
    else w = (c->pp - r - 1) * 2 + (c->v - 1) * c->pp;
    return w + 1 < n ? w + 1 : n;
}

// One rank's list: each pair's actions exist exactly as the ends of the virtual pipeline
// require, in the required order, with consistent fields.
static int check_pairs(sim_case *c, int r, int pos[NK][MAX_PAIRS], int *slot) {
    const sched_table *t = &c->t[r];
    const int pp = c->pp, v = c->v, m = c->m, n = m * v, last = pp * v - 1;
    for (int p = 0; p < n; p++) {
        slot[p] = -1;
        for (int k = 0; k < NK; k++) pos[k][p] = -1;
    }
    if (t->pp != pp || t->virtual_stages != v || t->micro_batches != m || t->rank != r)
        return fail(c, "rank %d: table header is wrong", r);
    for (int i = 0; i < t->n_actions; i++) {
        const sched_action *a = &t->actions[i];
        if ((unsigned)a->kind > (is_zb(c) ? BWD_W : SEND_GRAD) || a->micro < 0 || a->micro >= m ||
            a->chunk < 0 || a->chunk >= v)
            return fail(c, "rank %d action %d out of range", r, i);
        int p = a->micro * v + a->chunk, s = stage_of(c, r, a->chunk), peer = -1;
        if (a->kind == SEND_ACT || a->kind == RECV_GRAD) peer = rank_of(c, s + 1);
        if (a->kind == RECV_ACT || a->kind == SEND_GRAD) peer = rank_of(c, s - 1);
        const int split = a->kind == BWD_B || a->kind == BWD_W;
        if (split ? a->wslot < 0 || a->wslot >= t->max_w_pending : a->wslot != -1)
            return fail(c, "rank %d action %d: wslot %d (max_w_pending %d)", r, i, a->wslot,
                        t->max_w_pending);
        if (a->wslot >= 0 && a->kind == BWD_W && pos[BWD_B][p] >= 0 &&
            t->actions[pos[BWD_B][p]].wslot != a->wslot)
            return fail(c, "rank %d action %d: bwd_w's wslot is not its bwd_b's", r, i);
        if (a->stage != s || a->peer != peer)
            return fail(c, "rank %d action %d: stage %d peer %d, want %d and %d", r, i, a->stage,
                        a->peer, s, peer);
        if (pos[a->kind][p] >= 0)
            return fail(c, "rank %d: %s of micro %d chunk %d twice", r, name(a->kind), a->micro,
                        a->chunk);
        pos[a->kind][p] = i;
        if (a->slot < 0 || a->slot >= t->max_in_flight || (slot[p] >= 0 && slot[p] != a->slot))
            return fail(c, "rank %d action %d: slot %d (pair's %d, max_in_flight %d)", r, i,
                        a->slot, slot[p], t->max_in_flight);
        slot[p] = a->slot;
    }
    for (int p = 0; p < n; p++) {
        int s = stage_of(c, r, p % v), micro = p / v, b = !c->forward_only, z = is_zb(c);
        // No comm action where the neighbouring stage is on this rank (the V's turn).
        int remote_prev = s > 0 && rank_of(c, s - 1) != r,
            remote_next = s < last && rank_of(c, s + 1) != r;
        int want[NK] = {remote_prev,      1,      remote_next, b && remote_next, b && !z,
                        b && remote_prev, b && z, b && z};
        for (int k = 0; k < NK; k++)
            if ((pos[k][p] >= 0) != want[k])
                return fail(c, "rank %d micro %d stage %d: %s %s", r, micro, s, name(k),
                            want[k] ? "missing" : "not allowed here");
        static const int order[][2] = {{RECV_ACT, FWD},    {FWD, SEND_ACT}, {RECV_GRAD, BWD},
                                       {BWD, SEND_GRAD},   {FWD, BWD},      {RECV_GRAD, BWD_B},
                                       {BWD_B, SEND_GRAD}, {FWD, BWD_B},    {BWD_B, BWD_W}};
        for (int o = 0; o < 9; o++) {
            int a = pos[order[o][0]][p], b = pos[order[o][1]][p];
            if (a >= 0 && b >= 0 && a > b)
                return fail(c, "rank %d micro %d stage %d: %s after %s", r, micro, s,
                            name(order[o][0]), name(order[o][1]));
        }
    }
    return 1;
}

// One rank's runs of comm actions: at most one op of each kind; activation-direction ops
// before gradient-direction ones; within a SEND_GRAD's run, its slot reused only by a
// RECV_ACT; the d(output) of a RECV_GRAD used by the next BWD.
static int check_runs(sim_case *c, int r) {
    const sched_table *t = &c->t[r];
    for (int i = 0; i < t->n_actions;) {
        if (!is_comm(t->actions[i].kind)) {
            i++;
            continue;
        }
        int end = i, seen[NK] = {0}, last_act = -1, first_grad = t->n_actions;
        while (end < t->n_actions && is_comm(t->actions[end].kind)) end++;
        if (sched_comm_run_end(t, i) != end)
            return fail(c, "rank %d: sched_comm_run_end(%d) != %d", r, i, end);
        for (int j = i; j < end; j++) {
            const sched_action *a = &t->actions[j];
            // zb tables: a run may hold several receives (ordered by phase, sched.h); the
            // simulator proves their message order.
            if (seen[a->kind]++ && !is_zb(c))
                return fail(c, "rank %d: two %s in the run at %d", r, name(a->kind), i);
            if (a->kind == SEND_ACT || a->kind == RECV_ACT) last_act = j;
            else if (j < first_grad) first_grad = j;
            for (int q = i; q < end && a->kind == SEND_GRAD; q++)
                if (q != j && t->actions[q].slot == a->slot && t->actions[q].kind != RECV_ACT)
                    return fail(c, "rank %d: send_grad and %s share slot %d in one run", r,
                                name(t->actions[q].kind), a->slot);
            for (int q = i; q < end && c->forward_only; q++) // a send's output is not overwritten
                if (q != j && t->actions[q].slot == a->slot)
                    return fail(c, "rank %d: %s and %s share slot %d in one run", r, name(a->kind),
                                name(t->actions[q].kind), a->slot);
        }
        if (last_act > first_grad && !is_zb(c))
            return fail(c, "rank %d: run at %d has a gradient op before an activation op", r, i);
        i = end;
    }
    for (int i = 0; i < t->n_actions; i++) {
        const sched_action *a = &t->actions[i];
        if (a->kind != SCHED_ACTION_RECV_GRAD) continue;
        int j = i + 1;
        // zbv: a rank receives d(output) for both chunks, so a received one may wait behind
        // the other chunk's BWD_B (it sits in its own pair's slot); it is the next BWD_B of
        // its chunk.
        while (j < t->n_actions && t->actions[j].kind != BWD &&
               (t->actions[j].kind != BWD_B ||
                (c->schedule == SCHEDULE_ZBV && t->actions[j].chunk != a->chunk)))
            j++;
        if (j == t->n_actions || t->actions[j].micro != a->micro || t->actions[j].chunk != a->chunk)
            return fail(c, "rank %d: the d(output) received at %d is not for the next bwd", r, i);
    }
    return 1;
}

// The training tables' peak for (pp, v, m) at rank r: the smallest over the schedules that
// support it (what a forward-only table must fit in, whatever the run's schedule).
static int supported(schedule_kind s, int pp, int v, int m);

static int least_training_peak(const sim_case *c, int r) {
    const schedule_kind kinds[] = {SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED,
                                   SCHEDULE_ZBH1, SCHEDULE_ZBV};
    int least = 1 << 30;
    for (int k = 0; k < 5; k++) {
        // zbv's evaluation table follows the V; the others gpipe's placement.
        if ((c->schedule == SCHEDULE_ZBV) != (kinds[k] == SCHEDULE_ZBV)) continue;
        sched_table t;
        if (!supported(kinds[k], c->pp, c->v, c->m)) continue;
        if (sched_build(&t, kinds[k], c->pp, c->v, c->m, r) != TRI_OK) continue;
        if (t.max_in_flight < least) least = t.max_in_flight;
        sched_free(&t);
    }
    return least;
}

// One rank's slots: a pair holds its slot from its first action through its BWD (in a
// forward-only table: through the run of its SEND_ACT, or its FWD on the last stage); no two
// pairs held at once share one; max_in_flight is the peak held and the expected bound.
static int check_slots(sim_case *c, int r, int pos[NK][MAX_PAIRS], const int *slot) {
    const sched_table *t = &c->t[r];
    const int v = c->v, n = c->m * v;
    int start[MAX_PAIRS], end[MAX_PAIRS], peak = 0;
    for (int p = 0; p < n; p++) {
        start[p] = pos[RECV_ACT][p] >= 0 ? pos[RECV_ACT][p] : pos[FWD][p];
        end[p] = is_zb(c) ? pos[BWD_W][p] : pos[BWD][p];
        if (c->forward_only)
            end[p] = pos[SEND_ACT][p] >= 0 ? sched_comm_run_end(t, pos[SEND_ACT][p]) - 1
                                           : pos[FWD][p];
    }
    if (c->forward_only && c->schedule == SCHEDULE_ZBV && r == c->pp - 1)
        for (int p = 0; p < n; p += 2) // chunk 0's output is read by chunk 1's FWD
            end[p] = pos[FWD][p + 1];
    // The V's turn on rank pp-1: the source slot is still held where it is read.
    for (int i = 0; i < t->n_actions && c->schedule == SCHEDULE_ZBV; i++) {
        const sched_action *a = &t->actions[i];
        const int turn_fwd = a->kind == FWD && a->chunk == 1,
                  turn_bwd = a->kind == BWD_B && a->chunk == 0;
        const int want = r == c->pp - 1 && (turn_fwd || turn_bwd);
        const int src = a->micro * v + (turn_fwd ? 0 : 1);
        if (!want) {
            if (a->local_src != -1)
                return fail(c, "rank %d action %d: local_src %d", r, i, a->local_src);
            continue;
        }
        if (a->local_src != slot[src])
            return fail(c, "rank %d action %d: local_src %d, want slot %d", r, i, a->local_src,
                        slot[src]);
        if (!(start[src] <= i && i <= end[src]))
            return fail(c, "rank %d: %s of micro %d reads slot %d of a pair no longer held", r,
                        name(a->kind), a->micro, a->local_src);
    }
    for (int i = 0; i < t->n_actions && !is_zb(c); i++)
        if (t->actions[i].local_src != -1) return fail(c, "rank %d action %d: local_src", r, i);
    // W-buffers: held from BWD_B through BWD_W, peak == max_w_pending == the closed form; the
    // W's of a chunk run in micro-batch order (gradient accumulation order, as 1f1b).
    if (is_zb(c) && !c->forward_only) {
        int wpeak = 0, wheld = 0, next_w[2] = {0, 0};
        for (int i = 0; i < t->n_actions; i++) {
            const sched_action *a = &t->actions[i];
            if (a->kind == BWD_B && ++wheld > wpeak) wpeak = wheld;
            if (a->kind != BWD_W) continue;
            wheld--;
            if (a->micro != next_w[a->chunk]++)
                return fail(c, "rank %d: bwd_w of chunk %d runs micro %d out of order", r, a->chunk,
                            a->micro);
        }
        const int64_t closed = sched_max_w_pending(c->schedule, c->pp, c->v, c->m, r);
        if (wpeak != t->max_w_pending || closed != wpeak)
            return fail(c, "rank %d: %d W-buffers held at once, max_w_pending %d, closed form %lld",
                        r, wpeak, t->max_w_pending, (long long)closed);
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++)
                if (t->actions[pos[BWD_B][p]].wslot == t->actions[pos[BWD_B][q]].wslot &&
                    pos[BWD_B][p] <= pos[BWD_W][q] && pos[BWD_B][q] <= pos[BWD_W][p])
                    return fail(c, "rank %d: two pairs share a W-buffer", r);
    } else if (!c->forward_only && t->max_w_pending != 0) {
        return fail(c, "rank %d: max_w_pending %d without a split backward", r, t->max_w_pending);
    }

    for (int i = 0; i < t->n_actions; i++) {
        int held = 0;
        for (int p = 0; p < n; p++) held += start[p] <= i && i <= end[p];
        if (held > peak) peak = held;
    }
    for (int p = 0; p < n; p++)
        for (int q = p + 1; q < n; q++)
            if (slot[p] == slot[q] && start[p] <= end[q] && start[q] <= end[p])
                return fail(c, "rank %d: micro %d chunk %d and micro %d chunk %d share slot %d", r,
                            p / v, p % v, q / v, q % v, slot[p]);
    if (t->max_in_flight != peak)
        return fail(c, "rank %d: max_in_flight %d, but %d pairs are held at once", r,
                    t->max_in_flight, peak);
    if (c->forward_only) {
        const int least = least_training_peak(c, r);
        if (peak > 2 || peak > least)
            return fail(c,
                        "rank %d: %d pairs held at once, more than 2 or than the %d slots of "
                        "a training table",
                        r, peak, least);
        return 1;
    }
    if (expected_peak(c, r) >= 0 && peak != expected_peak(c, r))
        return fail(c, "rank %d: %d pairs held at once, expected %d", r, peak, expected_peak(c, r));
    return 1;
}

// ---------------------------------------------------------------------------------------
// The simulator.

typedef struct {
    int rank, index;
} op_ref;

typedef struct { // messages from rank a to rank b, in the order posted
    op_ref sends[MAX_ACTIONS], recvs[MAX_ACTIONS];
    int n_sends, n_recvs, n_matched;
} channel;

typedef struct {
    int grad, micro, from, to; // direction, and virtual stages
} message;

static channel g_ch[MAX_PP][MAX_PP];
static int g_matched[MAX_PP][MAX_ACTIONS];
static double g_posted_at[MAX_PP][MAX_ACTIONS], g_matched_at[MAX_PP][MAX_ACTIONS];

static message message_of(const sim_case *c, op_ref o) {
    const sched_action *a = &c->t[o.rank].actions[o.index];
    int s = stage_of(c, o.rank, a->chunk);
    switch (a->kind) {
    case SCHED_ACTION_SEND_ACT: return (message){0, a->micro, s, s + 1};
    case SCHED_ACTION_RECV_ACT: return (message){0, a->micro, s - 1, s};
    case SCHED_ACTION_SEND_GRAD: return (message){1, a->micro, s, s - 1};
    default: return (message){1, a->micro, s + 1, s};
    }
}

// Posts op i of rank r at time `now` and matches what its channel can match, in order.
static int post(sim_case *c, int r, int i, double now) {
    const sched_action *a = &c->t[r].actions[i];
    int send = a->kind == SEND_ACT || a->kind == SEND_GRAD;
    if (a->peer == r) return fail(c, "rank %d action %d talks to itself", r, i);
    channel *ch = send ? &g_ch[r][a->peer] : &g_ch[a->peer][r];
    if (send) ch->sends[ch->n_sends++] = (op_ref){r, i};
    else ch->recvs[ch->n_recvs++] = (op_ref){r, i};
    g_posted_at[r][i] = now;
    for (; ch->n_matched < ch->n_sends && ch->n_matched < ch->n_recvs; ch->n_matched++) {
        op_ref s = ch->sends[ch->n_matched], q = ch->recvs[ch->n_matched];
        message ms = message_of(c, s), mr = message_of(c, q);
        if (memcmp(&ms, &mr, sizeof ms))
            return fail(c,
                        "message %d from rank %d to %d: sent %s micro %d stage %d->%d, "
                        "received as %s micro %d stage %d->%d",
                        ch->n_matched, s.rank, q.rank, ms.grad ? "grad" : "act", ms.micro, ms.from,
                        ms.to, mr.grad ? "grad" : "act", mr.micro, mr.from, mr.to);
        double ts = g_posted_at[s.rank][s.index], tq = g_posted_at[q.rank][q.index];
        g_matched[s.rank][s.index] = g_matched[q.rank][q.index] = 1;
        g_matched_at[s.rank][s.index] = g_matched_at[q.rank][q.index] = ts > tq ? ts : tq;
    }
    return 1;
}

// Runs rank r from its cursor until it waits on a group or finishes; returns 0 on a failure
// and sets *moved when it made progress.
static int advance(sim_case *c, int r, int *cursor, int *posted, double *clock, int *moved,
                   char done[3][32][4 * MAX_PP]) {
    const sched_table *t = &c->t[r];
    const int last = c->pp * c->v - 1;
    while (*cursor < t->n_actions) {
        const sched_action *a = &t->actions[*cursor];
        int s = stage_of(c, r, a->chunk);
        if (is_comm(a->kind)) {
            int end = sched_comm_run_end(t, *cursor), all = 1;
            if (!*posted) {
                for (int i = *cursor; i < end; i++)
                    if (!post(c, r, i, *clock)) return 0;
                *posted = *moved = 1;
            }
            for (int i = *cursor; i < end && all; i++) all = g_matched[r][i];
            if (!all) return 1;
            for (int i = *cursor; i < end; i++)
                if (g_matched_at[r][i] > *clock) *clock = g_matched_at[r][i];
            *cursor = end;
            *posted = 0;
            continue;
        }
        int bwd = a->kind == BWD || a->kind == BWD_B;
        if (a->kind == BWD_W) {
            if (!done[1][a->micro][s])
                return fail(c, "rank %d: bwd_w micro %d stage %d before its bwd_b", r, a->micro, s);
            done[2][a->micro][s] = 1;
            *clock += 1;
            (*cursor)++;
            *moved = 1;
            continue;
        }
        if (!bwd && s > 0 && !done[0][a->micro][s - 1])
            return fail(c, "rank %d: fwd micro %d stage %d before stage %d's", r, a->micro, s,
                        s - 1);
        if (bwd && (!done[0][a->micro][s] || (s < last && !done[1][a->micro][s + 1])))
            return fail(c, "rank %d: bwd micro %d stage %d before its inputs", r, a->micro, s);
        done[bwd][a->micro][s] = 1;
        *clock += a->kind == BWD ? 2 : 1; // F = B = W = 1, an unsplit backward 2
        (*cursor)++;
        *moved = 1;
    }
    return 1;
}

static int simulate(sim_case *c) {
    const int pp = c->pp, m = c->m, last = pp * c->v - 1;
    static char done[3][32][4 * MAX_PP]; // [fwd, bwd or bwd_b, bwd_w][micro][virtual stage]
    int cursor[MAX_PP] = {0}, posted[MAX_PP] = {0};
    double clock[MAX_PP] = {0};
    memset(g_ch, 0, sizeof g_ch);
    memset(g_matched, 0, sizeof g_matched);
    memset(done, 0, sizeof done);
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < pp; r++)
            if (!advance(c, r, &cursor[r], &posted[r], &clock[r], &moved, done)) return 0;
    }
    char where[400] = "";
    int len = 0;
    for (int r = 0; r < pp && len < (int)sizeof where; r++) {
        if (cursor[r] == c->t[r].n_actions) continue;
        const sched_action *a = &c->t[r].actions[cursor[r]];
        len += snprintf(where + len, sizeof where - (size_t)len,
                        " r%d at %d/%d (%s micro %d chunk %d)", r, cursor[r], c->t[r].n_actions,
                        name(a->kind), a->micro, a->chunk);
    }
    if (len) return fail(c, "deadlock:%s", where);
    for (int a = 0; a < pp; a++)
        for (int b = 0; b < pp; b++)
            if (g_ch[a][b].n_sends != g_ch[a][b].n_recvs)
                return fail(c, "%d sends from rank %d to %d, %d receives", g_ch[a][b].n_sends, a, b,
                            g_ch[a][b].n_recvs);
    for (int micro = 0; micro < m; micro++)
        for (int s = 0; s <= last; s++)
            if (!done[0][micro][s] || (!c->forward_only && !done[1][micro][s]) ||
                (!c->forward_only && is_zb(c) && !done[2][micro][s]))
                return fail(c, "micro %d stage %d never ran", micro, s);
    double makespan = 0;
    for (int r = 0; r < pp; r++) makespan = clock[r] > makespan ? clock[r] : makespan;
    c->bubble = 1.0 - 3.0 * m * c->v / makespan; // each rank computes 3 units per pair
    return 1;
}

static int run_case(sim_case *c) {
    static int pos[MAX_PP][NK][MAX_PAIRS], slot[MAX_PP][MAX_PAIRS];
    int built = 0, ok = 1;
    for (; built < c->pp && ok; built++) {
        tri_status rc = c->forward_only
                            ? sched_build_forward(&c->t[built], c->schedule, c->pp, c->v, c->m,
                                                  built)
                            : sched_build(&c->t[built], c->schedule, c->pp, c->v, c->m, built);
        if (rc != TRI_OK) ok = fail(c, "sched_build failed for rank %d", built);
        else if (c->t[built].forward_only != c->forward_only)
            ok = fail(c, "rank %d: forward_only flag", built);
    }
    for (int r = 0; r < c->pp && ok; r++)
        ok = check_pairs(c, r, pos[r], slot[r]) && check_runs(c, r) &&
             check_slots(c, r, pos[r], slot[r]);
    // The closed form the planner and the config's size rules use instead of a table.
    for (int r = 0; r < c->pp && ok && !c->forward_only; r++) {
        const int64_t closed = sched_max_in_flight(c->schedule, c->pp, c->v, c->m, r);
        if (closed != c->t[r].max_in_flight)
            ok = fail(c, "rank %d: sched_max_in_flight %lld, table %d", r, (long long)closed,
                      c->t[r].max_in_flight);
    }
    if (ok) ok = simulate(c);
    for (int r = 0; r < built; r++) sched_free(&c->t[r]);
    return ok;
}

static int supported(schedule_kind s, int pp, int v, int m) {
    if (s == SCHEDULE_GPIPE) return v == 1 || pp >= 2;
    if (s == SCHEDULE_1F1B) return v == 1;
    if (s == SCHEDULE_ZBH1) return v == 1 && pp >= 2;
    if (s == SCHEDULE_ZBV) return v == 2 && pp >= 2;
    return v >= 2 && pp >= 2 && m % pp == 0;
}

int main(void) {
    log_init();
    const schedule_kind kinds[] = {SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED};
    const int pps[] = {1, 2, 3, 4, 8}, vs[] = {1, 2, 4};
    double worst_gap = 0; // measured bubble minus formula, at most
    char worst[160] = "";
    for (int ki = 0; ki < 3; ki++)
        for (int pi = 0; pi < 5; pi++)
            for (int vi = 0; vi < 3; vi++) {
                schedule_kind s = kinds[ki];
                int pp = pps[pi], v = vs[vi], simulated = 0, failed = 0;
                char first_fail[600] = "", test_name[96];
                for (int m = 1; m <= 32; m++) {
                    if (!supported(s, pp, v, m)) continue;
                    static sim_case c;
                    memset(&c, 0, sizeof c);
                    c.schedule = s, c.pp = pp, c.v = v, c.m = m;
                    simulated++;
                    if (!run_case(&c)) {
                        if (!failed++) snprintf(first_fail, sizeof first_fail, "%s", c.why);
                        continue;
                    }
                    // The measured bubble is the formula when v == 1 or pp divides m, and
                    // never below it.
                    double formula = sched_bubble_fraction(s, pp, v, m), gap = c.bubble - formula;
                    if (gap < -1e-12 || ((v == 1 || m % pp == 0) && gap > 1e-12)) {
                        if (!failed++)
                            snprintf(first_fail, sizeof first_fail,
                                     "m %d: bubble measured %.6f, formula %.6f", m, c.bubble,
                                     formula);
                    }
                    if (gap > worst_gap) {
                        worst_gap = gap;
                        snprintf(worst, sizeof worst,
                                 "%s pp %d v %d m %d: measured %.4f, formula %.4f",
                                 schedule_name(s), pp, v, m, c.bubble, formula);
                    }
                }
                if (!simulated) continue;
                snprintf(test_name, sizeof test_name, "sched_sim %s pp=%d v=%d (%d m values)",
                         schedule_name(s), pp, v, simulated);
                TEST_CHECK(!failed, test_name, "%d of %d failed; first: %s", failed, simulated,
                           first_fail);
            }
    printf("bubble, largest excess of measured over formula: %s\n", worst[0] ? worst : "none");

    // Evaluation's forward-only tables: every (pp, v, m) that gpipe supports.
    for (int pi = 0; pi < 5; pi++)
        for (int vi = 0; vi < 3; vi++) {
            int pp = pps[pi], v = vs[vi], simulated = 0, failed = 0;
            char first_fail[600] = "", test_name[96];
            for (int m = 1; m <= 32; m++) {
                if (!supported(SCHEDULE_GPIPE, pp, v, m)) continue;
                static sim_case c;
                memset(&c, 0, sizeof c);
                c.forward_only = 1, c.pp = pp, c.v = v, c.m = m;
                simulated++;
                if (!run_case(&c) && !failed++)
                    snprintf(first_fail, sizeof first_fail, "%s", c.why);
            }
            if (!simulated) continue;
            snprintf(test_name, sizeof test_name, "sched_sim forward-only pp=%d v=%d (%d m values)",
                     pp, v, simulated);
            TEST_CHECK(!failed, test_name, "%d of %d failed; first: %s", failed, simulated,
                       first_fail);
        }

    // Zero-bubble tables: pp 2..8, m 1..3pp and a few larger, training and (zbv) evaluation.
    // The measured bubble equals sched_bubble_fraction for every m: the paper's closed form
    // where it holds (zb-h1 m >= pp, zbv m >= 2pp), the table's own timing below.
    printf("  pp   m  schedule  simulated  formula  1f1b\n");
    for (int zi = 0; zi < 2; zi++)
        for (int pp = 2; pp <= MAX_PP; pp++) {
            const schedule_kind s = zi ? SCHEDULE_ZBV : SCHEDULE_ZBH1;
            const int v = zi ? 2 : 1;
            int simulated = 0, failed = 0, eval_failed = 0;
            char first_fail[600] = "", eval_fail[600] = "", test_name[96];
            for (int m = 1; m <= 32; m++) {
                if (m > 3 * pp && m != 4 * pp && m != 32) continue;
                static sim_case c;
                memset(&c, 0, sizeof c);
                c.schedule = s, c.pp = pp, c.v = v, c.m = m;
                simulated++;
                if (!run_case(&c)) {
                    if (!failed++) snprintf(first_fail, sizeof first_fail, "%s", c.why);
                    continue;
                }
                const double formula = sched_bubble_fraction(s, pp, v, m);
                const int closed = zi ? m >= 2 * pp : m >= pp;
                const double paper = zi ? (pp - 1.0) / (6.0 * m + pp - 1)
                                        : (pp - 1.0) / (3.0 * m + pp - 1);
                const double one = sched_bubble_fraction(SCHEDULE_1F1B, pp, 1, m);
                if (fabs(c.bubble - formula) > 1e-12 || (closed && fabs(formula - paper) > 1e-12))
                    if (!failed++)
                        snprintf(first_fail, sizeof first_fail,
                                 "m %d: bubble measured %.6f, formula %.6f, closed form %.6f", m,
                                 c.bubble, formula, paper);
                if ((pp == 2 || pp == 4 || pp == 8) &&
                    (m == 1 || m == pp || m == 2 * pp || m == 3 * pp))
                    printf("  %2d %3d  %-8s  %.4f     %.4f   %.4f%s\n", pp, m, schedule_name(s),
                           c.bubble, formula, one,
                           closed ? "" : "  (simulated: below the closed form)");
                memset(&c, 0, sizeof c);
                c.schedule = s, c.forward_only = 1, c.pp = pp, c.v = zi ? 2 : 1, c.m = m;
                if (zi && !run_case(&c) && !eval_failed++)
                    snprintf(eval_fail, sizeof eval_fail, "%s", c.why);
            }
            snprintf(test_name, sizeof test_name, "sched_sim %s pp=%d (%d m values)",
                     schedule_name(s), pp, simulated);
            TEST_CHECK(!failed, test_name, "%d of %d failed; first: %s", failed, simulated,
                       first_fail);
            if (zi) {
                snprintf(test_name, sizeof test_name, "sched_sim forward-only zbv pp=%d", pp);
                TEST_CHECK(!eval_failed, test_name, "%d failed; first: %s", eval_failed, eval_fail);
            }
        }
    // The stage map: zbv's V, the others chunk-major.
    int map_ok = 1;
    for (int pp = 1; pp <= MAX_PP; pp++)
        for (int s = 0; s < 2 * pp; s++) {
            int r, ch, r2, ch2;
            sched_stage_rank_chunk(SCHEDULE_ZBV, pp, 2, s, &r, &ch);
            sched_stage_rank_chunk(SCHEDULE_INTERLEAVED, pp, 2, s, &r2, &ch2);
            map_ok &= r == (s < pp ? s : 2 * pp - 1 - s) && ch == (s >= pp);
            map_ok &= r2 == s % pp && ch2 == s / pp;
        }
    TEST_CHECK(map_ok, "sched_stage_rank_chunk", "a stage maps to the wrong rank or chunk");
    // The closed forms at a large m (no table is built: bounded cost).
    TEST_CHECK(sched_max_in_flight(SCHEDULE_ZBH1, 4, 1, 1 << 24, 1) == 4 &&
                   sched_max_w_pending(SCHEDULE_ZBH1, 4, 1, 1 << 24, 1) == 2 &&
                   sched_max_in_flight(SCHEDULE_ZBV, 4, 2, 1 << 24, 3) == 9 &&
                   sched_max_w_pending(SCHEDULE_ZBV, 4, 2, 1 << 24, 3) == 7 &&
                   sched_max_w_pending(SCHEDULE_1F1B, 4, 1, 1 << 24, 3) == 0,
               "sched_max_in_flight and sched_max_w_pending at m = 2^24", "wrong peak");

    // The formula itself.
    double b1 = sched_bubble_fraction(SCHEDULE_1F1B, 4, 1, 8);
    double b2 = sched_bubble_fraction(SCHEDULE_GPIPE, 4, 1, 32);
    double b3 = sched_bubble_fraction(SCHEDULE_INTERLEAVED, 4, 2, 8);
    TEST_CHECK(fabs(b1 - 3.0 / 11) < 1e-12 && fabs(b2 - 3.0 / 35) < 1e-12 &&
                   fabs(b3 - 1.5 / 9.5) < 1e-12,
               "sched_bubble_fraction",
               "pp4 m8 %.6f (want 0.272727), pp4 m32 %.6f (want 0.085714), interleaved pp4 v2 m8 "
               "%.6f (want 0.157895)",
               b1, b2, b3);

    // Unsupported combinations are config errors, not crashes.
    const struct {
        schedule_kind s;
        int pp, v, m;
    } bad[] = {
        {SCHEDULE_1F1B, 4, 2, 8},
        {SCHEDULE_INTERLEAVED, 4, 1, 8},
        {SCHEDULE_INTERLEAVED, 4, 2, 6},
        {SCHEDULE_INTERLEAVED, 1, 2, 4},
        {SCHEDULE_GPIPE, 1, 2, 4},
        {SCHEDULE_GPIPE, 2, 1, 0},
        {SCHEDULE_ZBH1, 4, 2, 8},
        {SCHEDULE_ZBH1, 1, 1, 8},
        {SCHEDULE_ZBV, 4, 1, 8},
        {SCHEDULE_ZBV, 4, 4, 8},
        {SCHEDULE_ZBV, 1, 2, 8},
        {SCHEDULE_GPIPE, 2, 4, SCHED_MAX_PAIRS / 2}, // past SCHED_MAX_PAIRS: refused unbuilt
    };
    int rejected = 0, n_bad = (int)(sizeof bad / sizeof *bad);
    fflush(stdout);
    for (int i = 0; i < n_bad; i++) {
        sched_table t;
        tri_status rc = sched_build(&t, bad[i].s, bad[i].pp, bad[i].v, bad[i].m, 0);
        rejected += rc == TRI_ERR_CONFIG && t.actions == NULL;
    }
    TEST_CHECK(rejected == n_bad, "sched_build rejects unsupported combinations",
               "%d of %d rejected", rejected, n_bad);
    TEST_EXIT();
}

// sched_zb.c: the zero-bubble tables, zb-h1 and zbv (semantics in sched.h). Each rank's order
// of compute actions is written out (zb_orders); the orders of all ranks are timed together
// with unit times (zb_time); the comm actions are placed from that timing (zb_emit), which
// makes the table deadlock-free by construction (sched.h, "Running a list" and "Split backward").
#include <string.h>

#include "parallel/sched_internal.h"

typedef struct {
    sched_action_kind kind; // FWD, BWD_B or BWD_W
    int micro, chunk;
} zb_op;

typedef struct {
    schedule_kind schedule;
    int pp, v, m, n_stages, forward_only;
    zb_op **ops;           // [pp] per rank, n_ops of them
    int **step;            // [pp] the unit-time step each op runs at
    int n_ops;             // per rank: 3*m*v, or m*v forward-only
    int *f_rank, *f_index; // [micro * n_stages + s]: where the FWD of (micro, s) is
    int *b_rank, *b_index; // ... and the BWD_B
} zb_plan;

static int zb_stage(const zb_plan *z, int rank, int chunk) {
    if (z->schedule == SCHEDULE_ZBV) return chunk == 0 ? rank : 2 * z->pp - 1 - rank;
    return rank;
}

typedef struct {
    zb_op *o;
    int n, m;
    int next[3][2]; // next micro-batch per [F, B, W][chunk]
} zb_list;

static void zb_put(zb_list *l, int kind, int chunk) {
    static const sched_action_kind kinds[3] = {SCHED_ACTION_FWD, SCHED_ACTION_BWD_B,
                                               SCHED_ACTION_BWD_W};
    l->o[l->n++] = (zb_op){kinds[kind], l->next[kind][chunk]++, chunk};
}
// The guards keep each kind within m and behind its predecessor (B after F, W after B).
static int zb_can(const zb_list *l, int kind, int chunk) {
    const int n = l->next[kind][chunk];
    return kind == 0 ? n < l->m : n < l->next[kind - 1][chunk];
}
static void zb_try(zb_list *l, int kind, int chunk) {
    if (zb_can(l, kind, chunk)) zb_put(l, kind, chunk);
}
enum { ZB_F = 0, ZB_B = 1, ZB_W = 2 };

// ZB-H1 for rank r (Paddle's construction of Qi et al.'s handcrafted schedule): warm-up as
// 1F1B plus one forward, r rounds of (B, F) whose W's wait for the cool-down, steady
// (B, W, F), cool-down (B, W), then the r deferred W's.
static void zb_order_h1(zb_list *l, int pp, int r) {
    for (int k = 0; k < pp - r; k++) zb_try(l, ZB_F, 0);
    for (int k = 0; k < r; k++) {
        zb_try(l, ZB_B, 0);
        zb_try(l, ZB_F, 0);
    }
    while (zb_can(l, ZB_B, 0)) {
        zb_put(l, ZB_B, 0);
        zb_put(l, ZB_W, 0);
        zb_try(l, ZB_F, 0);
    }
    while (zb_can(l, ZB_W, 0)) zb_put(l, ZB_W, 0);
}

// ZB-V for rank r (the order of torchtitan's ScheduleZBVZeroBubble; chunk 0 is stage r, chunk
// 1 stage 2pp-1-r).
static void zb_order_v(zb_list *l, int pp, int r) {
    for (int k = 0; k < 2 * (pp - r) - 1; k++) zb_try(l, ZB_F, 0);
    for (int k = 0; k < r; k++) {
        zb_try(l, ZB_F, 1);
        zb_try(l, ZB_F, 0);
    }
    for (int k = 0; k < pp - r; k++) {
        zb_try(l, ZB_F, 1);
        if (zb_can(l, ZB_B, 1)) {
            zb_put(l, ZB_B, 1);
            zb_put(l, ZB_W, 1);
        }
    }
    while (l->next[ZB_F][1] < l->next[ZB_F][0] || zb_can(l, ZB_F, 0)) {
        zb_try(l, ZB_F, 0);
        // B0 needs the d(output) of its micro-batch's chunk-0 successor, which comes after
        // the chunk-1 backward of the same micro-batch has run (the V turns on rank pp-1).
        if (zb_can(l, ZB_B, 0) && l->next[ZB_B][0] < l->next[ZB_B][1]) {
            zb_put(l, ZB_B, 0);
            zb_put(l, ZB_W, 0);
        }
        zb_try(l, ZB_F, 1);
        if (zb_can(l, ZB_B, 1)) {
            zb_put(l, ZB_B, 1);
            zb_put(l, ZB_W, 1);
        }
    }
    for (int k = 0; k < r; k++) {
        zb_try(l, ZB_B, 0);
        zb_try(l, ZB_B, 1);
    }
    for (int k = 0; k < pp - r; k++) {
        zb_try(l, ZB_B, 0);
        zb_try(l, ZB_W, 0);
    }
    while (zb_can(l, ZB_B, 1)) zb_put(l, ZB_B, 1);
    while (zb_can(l, ZB_B, 0)) zb_put(l, ZB_B, 0);
    while (zb_can(l, ZB_W, 1)) zb_put(l, ZB_W, 1);
    while (zb_can(l, ZB_W, 0)) zb_put(l, ZB_W, 0);
}

// On rank pp-1 of zbv, B0 of a micro-batch reads the d(input) that B1 left in the chunk-1
// slot; a W1 before that B0 would end the chunk-1 pair first. Moves each such B0 to just
// before its W1 (it is ready there: its B1 and F0 precede the W1; B0's stay in micro order).
static void zb_fix_turn(zb_op *o, int n, int m) {
    for (int micro = 0; micro < m; micro++) {
        int w1 = -1, b0 = -1;
        for (int i = 0; i < n; i++) {
            if (o[i].micro != micro) continue;
            if (o[i].kind == SCHED_ACTION_BWD_W && o[i].chunk == 1) w1 = i;
            if (o[i].kind == SCHED_ACTION_BWD_B && o[i].chunk == 0) b0 = i;
        }
        if (w1 < 0 || b0 < w1) continue;
        const zb_op moved = o[b0];
        memmove(&o[w1 + 1], &o[w1], (size_t)(b0 - w1) * sizeof *o);
        o[w1] = moved;
    }
}

static void zb_orders(zb_plan *z) {
    for (int r = 0; r < z->pp; r++) {
        z->ops[r] = xmalloc_for((size_t)z->n_ops * sizeof(zb_op), "a pipeline schedule table");
        zb_list l = {.o = z->ops[r], .m = z->m};
        if (z->forward_only) {
            // Evaluation: micro-batch by micro-batch down the V (chunk 0, then chunk 1).
            for (int micro = 0; micro < z->m; micro++)
                for (int c = 0; c < z->v; c++) zb_put(&l, ZB_F, c);
        } else if (z->schedule == SCHEDULE_ZBH1) {
            zb_order_h1(&l, z->pp, r);
        } else {
            zb_order_v(&l, z->pp, r);
            if (r == z->pp - 1) zb_fix_turn(l.o, l.n, z->m);
        }
        TRI_ASSERT(l.n == z->n_ops);
    }
}

// Times every rank's order as soon as possible with unit times: an op starts when the rank's
// previous op is done and its input is (FWD: the previous stage's FWD; BWD_B: its own FWD and
// the next stage's BWD_B; BWD_W: its BWD_B, earlier on the same rank). Fills step[] and the
// index of each FWD and BWD_B. Returns 0 if the orders cannot all run (a bug in zb_orders).
static int zb_time(zb_plan *z) {
    const int S = z->n_stages, pp = z->pp;
    const size_t cells = (size_t)z->m * S;
    int *f_step = xmalloc(cells * sizeof(int)), *b_step = xmalloc(cells * sizeof(int));
    for (size_t i = 0; i < cells; i++) f_step[i] = b_step[i] = -1;
    int *cursor = xcalloc((size_t)pp, sizeof(int)), *clock = xcalloc((size_t)pp, sizeof(int));
    int moved = 1, stuck = 0;
    for (int r = 0; r < pp; r++) z->step[r] = xmalloc((size_t)z->n_ops * sizeof(int));
    while (moved) {
        moved = 0;
        for (int r = 0; r < pp; r++) {
            for (; cursor[r] < z->n_ops; cursor[r]++) {
                const zb_op *o = &z->ops[r][cursor[r]];
                const int s = zb_stage(z, r, o->chunk), cell = o->micro * S + s;
                int ready = clock[r];
                if (o->kind == SCHED_ACTION_FWD && s > 0) {
                    if (f_step[cell - 1] < 0) break;
                    if (f_step[cell - 1] + 1 > ready) ready = f_step[cell - 1] + 1;
                }
                if (o->kind == SCHED_ACTION_BWD_B) {
                    if (f_step[cell] < 0) stuck = 1;
                    if (stuck) break;
                    if (s < S - 1) {
                        if (b_step[cell + 1] < 0) break;
                        if (b_step[cell + 1] + 1 > ready) ready = b_step[cell + 1] + 1;
                    }
                }
                if (o->kind == SCHED_ACTION_FWD) {
                    f_step[cell] = ready;
                    z->f_rank[cell] = r, z->f_index[cell] = cursor[r];
                }
                if (o->kind == SCHED_ACTION_BWD_B) {
                    b_step[cell] = ready;
                    z->b_rank[cell] = r, z->b_index[cell] = cursor[r];
                }
                z->step[r][cursor[r]] = ready;
                clock[r] = ready + 1;
                moved = 1;
            }
        }
    }
    for (int r = 0; r < pp; r++) stuck |= cursor[r] < z->n_ops;
    free(f_step);
    free(b_step);
    free(cursor);
    free(clock);
    return !stuck;
}

static void zb_plan_free(zb_plan *z) {
    for (int r = 0; r < z->pp; r++) {
        free(z->ops[r]);
        free(z->step[r]);
    }
    free(z->ops);
    free(z->step);
    free(z->f_rank);
    free(z->f_index);
    free(z->b_rank);
    free(z->b_index);
}

static void zb_plan_make(zb_plan *z, schedule_kind schedule, int pp, int m, int forward_only) {
    memset(z, 0, sizeof *z);
    TRI_ASSERT(pp >= 2);
    z->ops = xcalloc((size_t)pp, sizeof *z->ops);
    z->step = xcalloc((size_t)pp, sizeof *z->step);
    z->schedule = schedule, z->pp = pp, z->m = m, z->forward_only = forward_only;
    z->v = schedule == SCHEDULE_ZBV ? 2 : 1;
    z->n_stages = pp * z->v;
    z->n_ops = (forward_only ? 1 : 3) * m * z->v;
    const size_t cells = (size_t)m * z->n_stages * sizeof(int);
    z->f_rank = xmalloc(cells), z->f_index = xmalloc(cells);
    z->b_rank = xmalloc(cells), z->b_index = xmalloc(cells);
    zb_orders(z);
    TRI_ASSERT(zb_time(z));
}

// The phase of a message produced by op `i` of rank `q` and consumed at step `consumer`: the
// latest receiver's run that neither holds up the sender (its next compute waits for the
// send's group) nor comes after the consumer.
static int zb_phase(const zb_plan *z, int q, int i, int consumer) {
    const int sender_next = i + 1 < z->n_ops ? z->step[q][i + 1] : 1 << 30;
    return (sender_next < consumer ? sender_next : consumer) - 1;
}

typedef struct {
    int after; // index of the compute op this comm action follows (-1: before the first)
    int phase, grad;
    sched_action a;
} zb_comm;

static int zb_comm_cmp(const void *pa, const void *pb) {
    const zb_comm *a = pa, *b = pb;
    if (a->after != b->after) return a->after < b->after ? -1 : 1;
    if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
    return a->grad - b->grad;
}

// The last op of `rank` that runs at or before `phase` (-1 if none).
static int zb_run_at(const zb_plan *z, int rank, int phase) {
    int lo = -1, hi = z->n_ops - 1; // step[] increases along a rank's order
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (z->step[rank][mid] <= phase) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Rank `rank`'s table from the timed plan: its compute ops in order, each message's send in
// the run right after the op that produced it and its receive in the receiver's run at the
// message's phase; within a run by phase, then activation direction first.
static void zb_emit(const zb_plan *z, sched_table *st, int rank) {
    const int S = z->n_stages, n = z->n_ops;
    zb_comm *comms = xmalloc_for((size_t)2 * n * sizeof *comms, "a pipeline schedule table");
    int n_comms = 0;
    for (int i = 0; i < n; i++) {
        const zb_op *o = &z->ops[rank][i];
        const int s = zb_stage(z, rank, o->chunk), cell = o->micro * S + s;
        sched_action a = {
            .micro = o->micro, .chunk = o->chunk, .slot = -1, .wslot = -1, .local_src = -1};
        if (o->kind == SCHED_ACTION_FWD) {
            if (s > 0 && z->f_rank[cell - 1] != rank) { // receive the input
                const int q = z->f_rank[cell - 1], qi = z->f_index[cell - 1];
                a.kind = SCHED_ACTION_RECV_ACT, a.stage = s, a.peer = q;
                const int ph = zb_phase(z, q, qi, z->step[rank][i]);
                comms[n_comms++] = (zb_comm){zb_run_at(z, rank, ph), ph, 0, a};
            }
            if (s < S - 1) {
                const int q = z->f_rank[cell + 1], qi = z->f_index[cell + 1];
                if (q != rank) { // send the output
                    a.kind = SCHED_ACTION_SEND_ACT, a.stage = s, a.peer = q;
                    comms[n_comms++] = (zb_comm){i, zb_phase(z, rank, i, z->step[q][qi]), 0, a};
                }
            }
        } else if (o->kind == SCHED_ACTION_BWD_B) {
            if (s < S - 1 && z->b_rank[cell + 1] != rank) { // receive d(output)
                const int q = z->b_rank[cell + 1], qi = z->b_index[cell + 1];
                a.kind = SCHED_ACTION_RECV_GRAD, a.stage = s, a.peer = q;
                const int ph = zb_phase(z, q, qi, z->step[rank][i]);
                comms[n_comms++] = (zb_comm){zb_run_at(z, rank, ph), ph, 1, a};
            }
            if (s > 0 && z->b_rank[cell - 1] != rank) { // send d(input)
                const int q = z->b_rank[cell - 1], qi = z->b_index[cell - 1];
                a.kind = SCHED_ACTION_SEND_GRAD, a.stage = s, a.peer = q;
                comms[n_comms++] = (zb_comm){i, zb_phase(z, rank, i, z->step[q][qi]), 1, a};
            }
        }
    }
    qsort(comms, (size_t)n_comms, sizeof *comms, zb_comm_cmp);
    st->actions = xmalloc_for((size_t)(n + n_comms) * sizeof *st->actions,
                              "a pipeline schedule table");
    int c = 0;
    for (int i = -1; i < n; i++) {
        if (i >= 0) {
            const zb_op *o = &z->ops[rank][i];
            st->actions[st->n_actions++] = (sched_action){.kind = o->kind,
                                                          .micro = o->micro,
                                                          .chunk = o->chunk,
                                                          .stage = zb_stage(z, rank, o->chunk),
                                                          .slot = -1,
                                                          .peer = -1,
                                                          .wslot = -1,
                                                          .local_src = -1};
        }
        for (; c < n_comms && comms[c].after == i; c++) st->actions[st->n_actions++] = comms[c].a;
    }
    TRI_ASSERT(c == n_comms);
    free(comms);
}

// Slots and W-buffers. A pair holds its slot from its first action through its last compute
// (BWD_W; forward-only: its FWD, or the end of its SEND_ACT's run) and, as the source of a
// local hand-over, through the action that reads it; lowest free slot first. A pair holds its
// W-buffer from its BWD_B through its BWD_W. The peaks are max_in_flight and max_w_pending.
static void zb_assign(sched_table *st, int zbv) {
    const int v = st->virtual_stages, n = st->micro_batches * v, last = st->pp - 1;
    int *slot_of = xmalloc((size_t)n * sizeof(int)), *wslot_of = xmalloc((size_t)n * sizeof(int));
    int *release = xmalloc((size_t)n * sizeof(int));
    char *busy = xcalloc((size_t)n, 1), *wbusy = xcalloc((size_t)n, 1);
    for (int p = 0; p < n; p++) slot_of[p] = wslot_of[p] = release[p] = -1;
    // The action after which each pair's slot is free.
    for (int i = 0; i < st->n_actions; i++) {
        const sched_action *a = &st->actions[i];
        const int p = a->micro * v + a->chunk;
        int at = -1;
        if (a->kind == SCHED_ACTION_BWD_W || (st->forward_only && a->kind == SCHED_ACTION_FWD))
            at = i;
        if (st->forward_only && a->kind == SCHED_ACTION_SEND_ACT)
            at = sched_comm_run_end(st, i) - 1;
        if (at > release[p]) release[p] = at;
        // The V's turn reads the other chunk's slot (sched_action.local_src).
        if (zbv && st->rank == last && a->kind == SCHED_ACTION_FWD && a->chunk == 1 &&
            i > release[a->micro * v])
            release[a->micro * v] = i;
        if (zbv && st->rank == last && a->kind == SCHED_ACTION_BWD_B && a->chunk == 0 &&
            i > release[a->micro * v + 1])
            release[a->micro * v + 1] = i;
    }
    // Pairs by the action that frees them: freed[i] heads a list through next_freed.
    int *freed = xmalloc((size_t)st->n_actions * sizeof(int)), *next_freed = wslot_of;
    for (int i = 0; i < st->n_actions; i++) freed[i] = -1;
    for (int p = 0; p < n; p++) {
        TRI_ASSERT(release[p] >= 0);
        next_freed[p] = freed[release[p]], freed[release[p]] = p;
    }
    int *pair_wslot = release; // release[] is in the lists now
    for (int p = 0; p < n; p++) pair_wslot[p] = -1;
    for (int i = 0; i < st->n_actions; i++) {
        sched_action *a = &st->actions[i];
        const int p = a->micro * v + a->chunk;
        if (slot_of[p] < 0) {
            int s = 0;
            while (busy[s]) s++;
            busy[s] = 1, slot_of[p] = s;
            if (s + 1 > st->max_in_flight) st->max_in_flight = s + 1;
        }
        a->slot = slot_of[p];
        if (a->kind == SCHED_ACTION_BWD_B) {
            int w = 0;
            while (wbusy[w]) w++;
            wbusy[w] = 1, pair_wslot[p] = w;
            if (w + 1 > st->max_w_pending) st->max_w_pending = w + 1;
        }
        if (a->kind == SCHED_ACTION_BWD_B || a->kind == SCHED_ACTION_BWD_W)
            a->wslot = pair_wslot[p];
        if (zbv && st->rank == last && a->kind == SCHED_ACTION_FWD && a->chunk == 1)
            a->local_src = slot_of[a->micro * v];
        if (zbv && st->rank == last && a->kind == SCHED_ACTION_BWD_B && a->chunk == 0)
            a->local_src = slot_of[a->micro * v + 1];
        if (a->kind == SCHED_ACTION_BWD_W) wbusy[a->wslot] = 0;
        for (int q = freed[i]; q >= 0; q = next_freed[q]) busy[slot_of[q]] = 0;
    }
    free(freed);
    free(busy);
    free(wbusy);
    free(release);
    free(wslot_of);
    free(slot_of);
}

tri_status sched_zb_build(sched_table *st, schedule_kind schedule, int pp, int m, int rank,
                          int forward_only) {
    zb_plan z;
    zb_plan_make(&z, schedule, pp, m, forward_only);
    zb_emit(&z, st, rank);
    zb_plan_free(&z);
    zb_assign(st, schedule == SCHEDULE_ZBV);
    return TRI_OK;
}

double sched_zb_bubble(schedule_kind schedule, int pp, int m) {
    if (schedule == SCHEDULE_ZBH1 && m >= pp) return (pp - 1.0) / (3.0 * m + pp - 1);
    if (schedule == SCHEDULE_ZBV && m >= 2 * pp) return (pp - 1.0) / (6.0 * m + pp - 1);
    // Below the closed forms' range (m < 2pp: a bounded cost): the timing itself.
    zb_plan z;
    zb_plan_make(&z, schedule, pp, m, 0);
    int makespan = 0;
    for (int r = 0; r < pp; r++)
        if (z.step[r][z.n_ops - 1] + 1 > makespan) makespan = z.step[r][z.n_ops - 1] + 1;
    zb_plan_free(&z);
    return 1.0 - 3.0 * z.v * m / makespan;
}

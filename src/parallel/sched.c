// sched.c: GPipe, 1F1B and interleaved 1F1B schedule tables, and the checks and closed forms
// of every schedule (semantics in sched.h; zb-h1 and zbv tables in sched_zb.c).
#include "parallel/sched.h"

#include "parallel/sched_internal.h"

#include <string.h>

typedef struct {
    int micro, chunk;
} sched_pair;

typedef struct {
    sched_table *st;
    int cap;
} builder;

// Appends one action of `pair`, dropping the comm actions that would cross an end of the
// virtual pipeline (no receive before stage 0's forward, no send after the last stage's).
static void push(builder *b, sched_action_kind kind, sched_pair pair) {
    sched_table *st = b->st;
    const int pp = st->pp, stage = pair.chunk * pp + st->rank;
    const int last = pp * st->virtual_stages - 1;
    if ((kind == SCHED_ACTION_RECV_ACT || kind == SCHED_ACTION_SEND_GRAD) && stage == 0) return;
    if ((kind == SCHED_ACTION_SEND_ACT || kind == SCHED_ACTION_RECV_GRAD) && stage == last) return;
    st->actions = xgrow(st->actions, st->n_actions, &b->cap, sizeof *st->actions);
    // Activations flow to the next rank, gradients to the previous one (around the ring).
    const int next = (st->rank + 1) % pp, prev = (st->rank - 1 + pp) % pp;
    int peer = -1;
    if (kind == SCHED_ACTION_SEND_ACT || kind == SCHED_ACTION_RECV_GRAD) peer = next;
    if (kind == SCHED_ACTION_RECV_ACT || kind == SCHED_ACTION_SEND_GRAD) peer = prev;
    st->actions[st->n_actions++] = (sched_action){.kind = kind,
                                                  .micro = pair.micro,
                                                  .chunk = pair.chunk,
                                                  .stage = stage,
                                                  .slot = -1,
                                                  .peer = peer,
                                                  .wslot = -1,
                                                  .local_src = -1};
}

// The forward order fwd[0..m*v) and backward order bwd[0..m*v) of this rank's pairs. With
// one chunk both are micro-batch order. With v chunks, micro-batches go in groups of pp
// (the last group smaller when pp does not divide m, gpipe only): a group runs through
// chunk 0, then chunk 1, ... for the forward, and chunk v-1 down to 0 for the backward.
// For full groups this is Megatron's get_model_chunk_id: the k-th forward is chunk
// (k / pp) % v of micro-batch (k / (pp*v))*pp + k % pp. (GPipe running all of chunk 0
// before chunk 1 deadlocks with rendezvous sends once m > pp: rank pp-1's sends to rank 0's
// chunk 1 wait behind rank 0's remaining chunk-0 forwards, which wait on rank pp-1.)
static void pair_orders(int pp, int v, int m, sched_pair *fwd, sched_pair *bwd) {
    int k = 0;
    for (int first = 0; first < m; first += pp) {
        int size = m - first < pp ? m - first : pp;
        for (int c = 0; c < v; c++) {
            for (int i = 0; i < size; i++, k++) {
                fwd[k] = (sched_pair){first + i, c};
                bwd[k] = (sched_pair){first + i, v - 1 - c};
            }
        }
    }
}

// Emits the list for n pairs with `warmup` warm-up forwards. Each receive is posted in the
// run before the compute that needs it (Megatron's "receive for the next iteration").
// Steady state, split_steady (Megatron's non-interleaved 1F1B):
//     FWD(f) [SEND_ACT(f), RECV_GRAD(b)] BWD(b) [RECV_ACT(f+1), SEND_GRAD(b)]
// otherwise (Megatron's interleaved 1F1B, one batched exchange per iteration):
//     FWD(f) BWD(b) [SEND_ACT(f), RECV_ACT(f+1), SEND_GRAD(b), RECV_GRAD(b+1)]
// Within a run, activation-direction ops precede gradient-direction ones (sched.h). The
// split exchange deadlocks the interleaved schedule with rendezvous sends (rank 0's
// SEND_GRAD of chunk c > 0 waits on rank pp-1, which waits on a RECV_ACT), hence Megatron's
// one exchange there. Megatron's special case m == pp (all forwards first) is not needed:
// the simulator runs m == pp without it, and it would raise the peak of pairs held.
static void emit(builder *b, const sched_pair *fwd, const sched_pair *bwd, int n, int warmup,
                 int split_steady) {
    push(b, SCHED_ACTION_RECV_ACT, fwd[0]);
    for (int k = 0; k < warmup; k++) {
        push(b, SCHED_ACTION_FWD, fwd[k]);
        push(b, SCHED_ACTION_SEND_ACT, fwd[k]);
        if (k + 1 < n) push(b, SCHED_ACTION_RECV_ACT, fwd[k + 1]);
    }
    // Interleaved (and gpipe, warmup == n): the first gradient joins the last warm-up run.
    if (!split_steady || warmup == n) push(b, SCHED_ACTION_RECV_GRAD, bwd[0]);
    for (int k = 0; k < n - warmup; k++) {
        const int f = warmup + k;
        push(b, SCHED_ACTION_FWD, fwd[f]);
        if (split_steady) {
            push(b, SCHED_ACTION_SEND_ACT, fwd[f]);
            push(b, SCHED_ACTION_RECV_GRAD, bwd[k]);
            push(b, SCHED_ACTION_BWD, bwd[k]);
            if (f + 1 < n) push(b, SCHED_ACTION_RECV_ACT, fwd[f + 1]);
            push(b, SCHED_ACTION_SEND_GRAD, bwd[k]);
        } else {
            push(b, SCHED_ACTION_BWD, bwd[k]);
            push(b, SCHED_ACTION_SEND_ACT, fwd[f]);
            if (f + 1 < n) push(b, SCHED_ACTION_RECV_ACT, fwd[f + 1]);
            push(b, SCHED_ACTION_SEND_GRAD, bwd[k]);
            if (k + 1 < n) push(b, SCHED_ACTION_RECV_GRAD, bwd[k + 1]);
        }
    }
    // Split 1F1B with a steady phase: the first cool-down gradient joins the last steady run.
    if (split_steady && warmup > 0 && warmup < n) push(b, SCHED_ACTION_RECV_GRAD, bwd[n - warmup]);
    for (int k = n - warmup; k < n; k++) {
        push(b, SCHED_ACTION_BWD, bwd[k]);
        push(b, SCHED_ACTION_SEND_GRAD, bwd[k]);
        if (k + 1 < n) push(b, SCHED_ACTION_RECV_GRAD, bwd[k + 1]);
    }
}

// Gives each pair the lowest slot free at its first action and frees it after its BWD, or in
// a forward-only table after its last action: its SEND_ACT (at the end of that comm run, so
// that a RECV_ACT posted in the same run never takes the slot being sent from), or its FWD
// on the last virtual stage. Greedy by start on intervals uses exactly as many slots as the
// peak overlap, so max_in_flight is both the slot count and the peak number of pairs held.
static void assign_slots(sched_table *st, int forward_only) {
    const int n = st->micro_batches * st->virtual_stages;
    const int last_stage = st->pp * st->virtual_stages - 1;
    int *slot_of = xmalloc_for((size_t)n * sizeof *slot_of, "a pipeline schedule table");
    int *release = xmalloc((size_t)n * sizeof *release), n_release = 0; // slots sent from
    char *busy = xcalloc((size_t)n, 1);
    for (int i = 0; i < n; i++) slot_of[i] = -1;
    for (int i = 0; i < st->n_actions; i++) {
        sched_action *a = &st->actions[i];
        int pair = a->micro * st->virtual_stages + a->chunk;
        if (!sched_action_is_comm(a->kind)) // a new run: the sends of the last one are done
            for (; n_release > 0; n_release--) busy[release[n_release - 1]] = 0;
        if (slot_of[pair] < 0) {
            TRI_ASSERT(a->kind == SCHED_ACTION_RECV_ACT || a->kind == SCHED_ACTION_FWD);
            int s = 0;
            while (busy[s]) s++;
            TRI_ASSERT(s < n);
            busy[s] = 1;
            slot_of[pair] = s;
            if (s + 1 > st->max_in_flight) st->max_in_flight = s + 1;
        }
        a->slot = slot_of[pair];
        if (a->kind == SCHED_ACTION_BWD) busy[a->slot] = 0;
        if (forward_only && a->kind == SCHED_ACTION_FWD && a->stage == last_stage)
            busy[a->slot] = 0;
        if (forward_only && a->kind == SCHED_ACTION_SEND_ACT) release[n_release++] = a->slot;
    }
    free(busy);
    free(release);
    free(slot_of);
}

// The combinations sched_build supports; config_rules.c reports the same ones to users.
static tri_status check_supported(schedule_kind schedule, int pp, int v, int m) {
    if (v < 1 || m < 1) {
        LOG_ERROR("parallel.virtual_stages (%d) and the micro-batches per step (%d) must be "
                  ">= 1",
                  v, m);
        return TRI_ERR_CONFIG;
    }
    if ((int64_t)m * v > SCHED_MAX_PAIRS) {
        LOG_ERROR("train.global_batch: %d micro-batches per step through %d chunks make %lld "
                  "(micro-batch, chunk) pairs per step, more than the %d a schedule holds; "
                  "raise train.micro_batch or lower global_batch",
                  m, v, (long long)m * v, SCHED_MAX_PAIRS);
        return TRI_ERR_CONFIG;
    }
    if (schedule == SCHEDULE_INTERLEAVED) {
        if (v < 2) {
            LOG_ERROR("parallel.virtual_stages: schedule interleaved needs 2 or more (got %d); "
                      "use schedule: 1f1b for one chunk per rank",
                      v);
            return TRI_ERR_CONFIG;
        }
        if (pp < 2) {
            LOG_ERROR("parallel.pp: schedule interleaved needs pp >= 2 (got %d)", pp);
            return TRI_ERR_CONFIG;
        }
        if (m % pp != 0) {
            LOG_ERROR("parallel.schedule: interleaved needs the micro-batches per step (%d) to "
                      "be a multiple of parallel.pp (%d); change train.global_batch",
                      m, pp);
            return TRI_ERR_CONFIG;
        }
        return TRI_OK;
    }
    if (schedule == SCHEDULE_ZBH1 || schedule == SCHEDULE_ZBV) {
        const char *name = schedule == SCHEDULE_ZBH1 ? "zb-h1" : "zbv";
        const int want = schedule == SCHEDULE_ZBH1 ? 1 : 2;
        if (v != want) {
            LOG_ERROR("parallel.virtual_stages: schedule %s runs %d chunk%s per rank (got %d); "
                      "set virtual_stages: %d",
                      name, want, want == 1 ? "" : "s", v, want);
            return TRI_ERR_CONFIG;
        }
        if (pp < 2) {
            LOG_ERROR("parallel.pp: schedule %s needs pp >= 2 (got %d); use schedule: 1f1b "
                      "for a single pipeline stage",
                      name, pp);
            return TRI_ERR_CONFIG;
        }
        return TRI_OK;
    }
    if (schedule == SCHEDULE_1F1B && v != 1) {
        LOG_ERROR("parallel.virtual_stages: schedule 1f1b runs one chunk per rank (got %d); use "
                  "schedule: interleaved for virtual_stages > 1",
                  v);
        return TRI_ERR_CONFIG;
    }
    if (schedule == SCHEDULE_GPIPE && v > 1 && pp < 2) {
        // The chunks of a single rank would send to themselves; one chunk does the same work.
        LOG_ERROR("parallel.virtual_stages: %d chunks need parallel.pp >= 2 (got %d); set "
                  "virtual_stages: 1",
                  v, pp);
        return TRI_ERR_CONFIG;
    }
    if (schedule != SCHEDULE_GPIPE && schedule != SCHEDULE_1F1B) {
        LOG_ERROR("parallel.schedule: unknown schedule %d", (int)schedule);
        return TRI_ERR_CONFIG;
    }
    return TRI_OK;
}

tri_status sched_build(sched_table *st, schedule_kind schedule, int pp, int virtual_stages, int m,
                       int rank) {
    memset(st, 0, sizeof *st);
    TRI_ASSERT(pp >= 1 && rank >= 0 && rank < pp);
    TRI_CHECK(check_supported(schedule, pp, virtual_stages, m));
    const int v = virtual_stages, n = m * v;
    *st = (sched_table){.pp = pp, .virtual_stages = v, .micro_batches = m, .rank = rank};
    if (schedule == SCHEDULE_ZBH1 || schedule == SCHEDULE_ZBV)
        return sched_zb_build(st, schedule, pp, m, rank, 0);
    sched_pair *fwd = xmalloc_for((size_t)n * sizeof *fwd, "a pipeline schedule table");
    sched_pair *bwd = xmalloc_for((size_t)n * sizeof *bwd, "a pipeline schedule table");
    pair_orders(pp, v, m, fwd, bwd);
    builder b = {.st = st};
    int warmup;
    if (schedule == SCHEDULE_GPIPE) {
        warmup = n; // all forwards, then all backwards: every pair is held at once
    } else if (schedule == SCHEDULE_1F1B) {
        // Stage r runs pp - r - 1 forwards ahead of its first backward: the time the first
        // micro-batch takes to reach the last stage and come back.
        warmup = pp - rank - 1 < m ? pp - rank - 1 : m;
    } else {
        // Megatron: (v - 1)*pp forwards on every rank fill the chunks before the last one;
        // 2 per later stage cover the round trip of the last chunk's first gradients.
        warmup = (pp - rank - 1) * 2 + (v - 1) * pp;
        if (warmup > n) warmup = n;
    }
    emit(&b, fwd, bwd, n, warmup, schedule == SCHEDULE_1F1B);
    free(fwd);
    free(bwd);
    assign_slots(st, 0);
    return TRI_OK;
}

// A zero-bubble table's peaks, built: only below the closed forms' range, m < 2pp.
static int64_t zb_built_peak(schedule_kind schedule, int pp, int m, int rank, int w_pending) {
    sched_table t;
    TRI_ASSERT(sched_build(&t, schedule, pp, schedule == SCHEDULE_ZBV ? 2 : 1, m, rank) == TRI_OK);
    const int64_t peak = w_pending ? t.max_w_pending : t.max_in_flight;
    sched_free(&t);
    return peak;
}

int64_t sched_max_in_flight(schedule_kind schedule, int pp, int virtual_stages, int m, int rank) {
    TRI_ASSERT(pp >= 1 && rank >= 0 && rank < pp && virtual_stages >= 1 && m >= 1);
    // zb-h1 holds pp pairs on every rank once m >= pp (its deferred W's keep pairs held): the
    // paper's "1F1B memory", 1f1b's busiest rank's, on every rank.
    if (schedule == SCHEDULE_ZBH1) return m >= pp ? pp : zb_built_peak(schedule, pp, m, rank, 0);
    // zbv: 2pp + 1 chunk pairs at either end of the pipeline, one more on a middle rank (its
    // receive of the next forward's input is posted before the W that frees a pair).
    if (schedule == SCHEDULE_ZBV)
        return m >= 2 * pp ? 2 * pp + 1 + (rank > 0 && rank < pp - 1)
                           : zb_built_peak(schedule, pp, m, rank, 0);
    const int64_t n = (int64_t)m * virtual_stages; // pairs of the rank
    if (schedule == SCHEDULE_GPIPE) return n;      // every pair is held at the last forward
    // 1F1B and interleaved hold their warm-up forwards plus the one in the steady state.
    const int64_t warmup = schedule == SCHEDULE_1F1B
                               ? pp - rank - 1
                               : (int64_t)(pp - rank - 1) * 2 + (int64_t)(virtual_stages - 1) * pp;
    return warmup + 1 < n ? warmup + 1 : n;
}

int64_t sched_max_w_pending(schedule_kind schedule, int pp, int virtual_stages, int m, int rank) {
    TRI_ASSERT(pp >= 1 && rank >= 0 && rank < pp && virtual_stages >= 1 && m >= 1);
    // Rank r defers r W's (zb-h1) or 2r (zbv) past the B's after them, plus the one in hand.
    if (schedule == SCHEDULE_ZBH1)
        return m >= pp ? rank + 1 : zb_built_peak(schedule, pp, m, rank, 1);
    if (schedule == SCHEDULE_ZBV)
        return m >= 2 * pp ? 2 * rank + 1 : zb_built_peak(schedule, pp, m, rank, 1);
    return 0;
}

void sched_stage_rank_chunk(schedule_kind schedule, int pp, int virtual_stages, int s, int *rank,
                            int *chunk) {
    TRI_ASSERT(pp >= 1 && s >= 0 && s < pp * virtual_stages);
    if (schedule == SCHEDULE_ZBV) {
        *rank = s < pp ? s : 2 * pp - 1 - s;
        *chunk = s < pp ? 0 : 1;
        return;
    }
    *rank = s % pp;
    *chunk = s / pp;
}

tri_status sched_build_forward(sched_table *st, schedule_kind schedule, int pp, int virtual_stages,
                               int m, int rank) {
    memset(st, 0, sizeof *st);
    TRI_ASSERT(pp >= 1 && rank >= 0 && rank < pp);
    if (schedule == SCHEDULE_ZBV) {
        TRI_CHECK(check_supported(schedule, pp, virtual_stages, m));
        *st = (sched_table){.pp = pp,
                            .virtual_stages = virtual_stages,
                            .micro_batches = m,
                            .rank = rank,
                            .forward_only = 1};
        return sched_zb_build(st, schedule, pp, m, rank, 1);
    }
    // The forward half of gpipe's table (the same combinations are valid).
    TRI_CHECK(check_supported(SCHEDULE_GPIPE, pp, virtual_stages, m));
    const int v = virtual_stages, n = m * v;
    *st = (sched_table){
        .pp = pp, .virtual_stages = v, .micro_batches = m, .rank = rank, .forward_only = 1};
    sched_pair *fwd = xmalloc((size_t)n * sizeof *fwd), *bwd = xmalloc((size_t)n * sizeof *bwd);
    pair_orders(pp, v, m, fwd, bwd);
    builder b = {.st = st};
    push(&b, SCHED_ACTION_RECV_ACT, fwd[0]);
    for (int k = 0; k < n; k++) {
        push(&b, SCHED_ACTION_FWD, fwd[k]);
        push(&b, SCHED_ACTION_SEND_ACT, fwd[k]);
        if (k + 1 < n) push(&b, SCHED_ACTION_RECV_ACT, fwd[k + 1]);
    }
    free(fwd);
    free(bwd);
    assign_slots(st, 1);
    return TRI_OK;
}

void sched_free(sched_table *st) {
    free(st->actions);
    memset(st, 0, sizeof *st);
}

int sched_comm_run_end(const sched_table *st, int i) {
    while (i < st->n_actions && sched_action_is_comm(st->actions[i].kind)) i++;
    return i;
}

const char *sched_action_name(sched_action_kind k) {
    static const char *names[] = {"recv_act", "fwd",       "send_act", "recv_grad",
                                  "bwd",      "send_grad", "bwd_b",    "bwd_w"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}

double sched_bubble_fraction(schedule_kind schedule, int pp, int virtual_stages, int m) {
    if ((schedule == SCHEDULE_ZBH1 || schedule == SCHEDULE_ZBV) && pp >= 2 && m >= 1)
        return sched_zb_bubble(schedule, pp, m);
    // gpipe with chunks runs the interleaved order, so it fills as fast
    double fill = (double)(pp - 1) / virtual_stages;
    return fill / (m + fill);
}

// plan.c: per-rank memory and communication of a layout, and the predicted step time (see
// plan.h). Memory sums the buffer specs of the model, the ZeRO layer and the optimizer;
// communication replays one training step's calls with the model's dims and the ZeRO layer's
// buckets; each function of the replay names the code whose calls it follows.
#include "plan/plan.h"

#include <math.h>
#include <string.h>

#include "base/checked.h"

#include "compute/cuda_workspace.h"
#include "compute/mempool.h"
#include "config/config_layout.h"
#include "model/model.h"
#include "model/params.h"
#include "parallel/optim.h"
#include "parallel/sched.h"
#include "parallel/sched_sim.h"
#include "parallel/zero.h"

#include "plan/plan_internal.h"

// ---------------------------------------------------------------------------------------
// Memory: the specs the rank's model, ZeRO layer and optimizer carve.

void plan_rank_memory(const run_config *cfg, int tp_rank, int pp_rank, int dp_rank, int n_slots,
                      backend_traits bt, uint64_t mem[MEM_KIND_COUNT]) {
    config_rank_memory(cfg, tp_rank, pp_rank, dp_rank, n_slots, bt, mem);
}

static void stage_memory(plan_stage *s, const layout *lo, const stage_tables *st) {
    s->rank_params = (int64_t)st->pt->local_numel;
    config_rank_memory_of(lo->cfg, st->pt, &st->zl, 0, s->pp_rank, 0, s->n_slots,
                          plan_device_traits(lo->dev), s->mem);
    s->mem_total = 0;
    for (int k = 0; k < MEM_KIND_COUNT; k++) s->mem_total = sat_add_u64(s->mem_total, s->mem[k]);
    s->host_startup = plan_host_startup_bytes(lo->cfg, st->pt);
    s->backend_device = s->backend_pinned = 0;
    if (lo->dev->cuda) { // what the CUDA backend's reserve takes for this stage's shapes
        const model_layout ml = config_model_layout(lo->cfg, 0, s->pp_rank, s->n_slots,
                                                    plan_device_traits(lo->dev));
        const backend_shapes sh = model_op_shapes(&lo->cfg->model, &ml);
        const cuda_workspace w = cuda_workspace_for(&sh, cuda_ws_sort_bound((size_t)sh.rows));
        s->backend_device = cuda_workspace_device_bytes(&w);
        s->backend_pinned = w.upload;
    }
}

// What a stage needs on its device: the arenas and the backend's own workspaces.
static uint64_t stage_device_bytes(const plan_stage *s) {
    return sat_add_u64(s->mem_total, s->backend_device);
}

// ---------------------------------------------------------------------------------------
// Communication: one training step of one rank, call by call (app/train.c's train_step;
// parallel/executor.c; model_pass.c and model_layer.c; zero.c's grads_ready, pass_begin,
// finish_grads and update; optim.c's grad_norm).

typedef struct {
    const layout *lo;
    const stage_tables *st;
    plan_comm *comm; // where the calls are counted
    int m;           // micro-batches of the replayed table
    int group_size[COMM_GROUP_COUNT];
    int *gathered; // zero3_gather step: (chunks) gathered since the last update
    plan_phase phase;
} rank_step;

// The comm layer (comm.h) counts nothing for a group of one.
static void count(rank_step *r, comm_group_id g, comm_op_id op, uint64_t bytes) {
    if (r->group_size[g] <= 1) return;
    r->comm->bytes[r->phase][g][op] = sat_add_u64(r->comm->bytes[r->phase][g][op], bytes);
    r->comm->calls[r->phase][g][op] += 1;
}

// model_tp_reduce_rows: an all-reduce of N*C, or under SP a reduce-scatter leaving Nl*C.
static void tp_reduce_rows(rank_step *r) {
    const model_dims *d = &r->st->d;
    count(r, COMM_GROUP_TP, d->sp ? COMM_OP_REDUCE_SCATTER : COMM_OP_ALL_REDUCE,
          (uint64_t)d->N * d->C * r->lo->es.act);
}

// tp_gather_rows and model_dresidual_all_rows: SP's all-gather of every rank's Nl*C rows.
static void tp_gather_rows(rank_step *r) {
    const model_dims *d = &r->st->d;
    if (d->sp) count(r, COMM_GROUP_TP, COMM_OP_ALL_GATHER, (uint64_t)d->N * d->C * r->lo->es.act);
}

static void layer_forward(rank_step *r) {
    tp_gather_rows(r); // ln1
    tp_reduce_rows(r); // attention projection
    tp_gather_rows(r); // ln2
    tp_reduce_rows(r); // MLP projection
}

static void layer_backward(rank_step *r) {
    if (r->lo->recompute) layer_forward(r);
    tp_gather_rows(r); // d(MLP output) to all rows
    tp_reduce_rows(r); // d(ln2)
    tp_gather_rows(r); // d(attention output) to all rows
    tp_reduce_rows(r); // d(ln1)
}

// zero_pass_begin: ZeRO-3 gathers the chunk's buckets before each pass (or once a step).
static void pass_begin(rank_step *r, int chunk) {
    const layout *lo = r->lo;
    const zero_layout *zl = &r->st->zl;
    if (zl->stage != 3 || r->gathered[chunk]) return;
    const int step = lo->cfg->parallel.zero3_gather == ZERO3_GATHER_STEP;
    r->gathered[chunk] = step;
    for (int k = 0; k < zl->n_buckets; k++)
        if (zero_bucket_gathered_for(zl, k, chunk, step))
            count(r, COMM_GROUP_DP, COMM_OP_ALL_GATHER, zl->buckets[k].padded * lo->es.param);
}

static void forward(rank_step *r, int chunk) {
    const model_dims *d = &r->st->d;
    pass_begin(r, chunk);
    if (d->has_embed && chunk == 0) tp_reduce_rows(r);
    for (int i = 0; i < d->Lc; i++) layer_forward(r);
    if (!(d->has_head && chunk == d->chunks - 1)) return;
    tp_gather_rows(r);          // final LayerNorm
    for (int i = 0; i < 3; i++) // vocab-parallel cross-entropy: row max, sum of exp, target logit
        count(r, COMM_GROUP_TP, COMM_OP_ALL_REDUCE, (uint64_t)d->N * sizeof(float));
}

// The chunk's backward as the model splits it (model_backward_b / _w): B, the input gradients,
// holds every tp collective of the layers and the head; W the embedding's (its gradient needs
// every row of d(residual)) and the store's grads_ready for each bucket it finishes: ZeRO-0
// all-reduces a bucket after the step's last micro-batch, ZeRO-2/3 reduce-scatter it after
// every micro-batch. A bucket of several layers is ready once, after its last layer. W reads
// no parameter: no ZeRO-3 gather.
static void backward_b(rank_step *r, int chunk) {
    const model_dims *d = &r->st->d;
    pass_begin(r, chunk);
    if (d->has_head && chunk == d->chunks - 1) tp_reduce_rows(r); // d(final LayerNorm)
    for (int i = 0; i < d->Lc; i++) layer_backward(r);
}

static void backward_w(rank_step *r, int chunk, int micro) {
    const layout *lo = r->lo;
    const model_dims *d = &r->st->d;
    const zero_layout *zl = &r->st->zl;
    if (d->has_embed && chunk == 0) tp_gather_rows(r);
    if (!(zl->stage >= 2 || (zl->stage == 0 && lo->dp > 1))) return;
    for (int k = 0; k < zl->n_buckets; k++) {
        const zero_bucket *b = &zl->buckets[k];
        if (b->chunk != chunk) continue;
        if (zl->stage == 0 && micro == r->m - 1)
            count(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, b->numel * lo->es.reduce);
        else if (zl->stage >= 2)
            count(r, COMM_GROUP_DP, COMM_OP_REDUCE_SCATTER, b->padded * lo->es.reduce);
    }
}

// After the schedule: the loss over pp (executor_take_loss), zero_finish_grads, the loss over
// dp, optim_grad_norm, and zero_update_end's all-gathers.
static void step_end(rank_step *r) {
    const layout *lo = r->lo;
    const param_table *pt = r->st->pt;
    const zero_layout *zl = &r->st->zl;
    const model_dims *d = &r->st->d;
    r->phase = PLAN_PHASE_STEP_END;
    if (lo->pp > 1) count(r, COMM_GROUP_PP, COMM_OP_ALL_REDUCE, sizeof(double)); // the loss
    if (zl->stage < 2) { // the full gradient buffer: SP's LayerNorms, the tied wte
        for (int i = 0; d->sp && i < pt->n_entries; i++)
            if (pt->entries[i].layernorm)
                count(r, COMM_GROUP_TP, COMM_OP_ALL_REDUCE,
                      (uint64_t)pt->entries[i].local_numel * lo->es.grad);
        if (pt->wte_shared)
            count(r, COMM_GROUP_EMBED, COMM_OP_ALL_REDUCE,
                  (uint64_t)pt->entries[pt->wte].local_numel * lo->es.grad);
    }
    if (zl->stage == 1)
        count(r, COMM_GROUP_DP, COMM_OP_REDUCE_SCATTER, zl->capacity * lo->es.reduce);
    for (int p = 0; zl->stage >= 2 && p < zl->n_pieces; p++) { // the same sums on the pieces
        const zero_piece *pc = &zl->pieces[p];
        const param_entry *e = &pt->entries[pc->entry];
        if (d->sp && e->layernorm)
            count(r, COMM_GROUP_TP, COMM_OP_ALL_REDUCE, (pc->hi - pc->lo) * lo->es.grad);
        if (pt->wte_shared && pc->entry == pt->wte)
            count(r, COMM_GROUP_EMBED, COMM_OP_ALL_REDUCE, (pc->hi - pc->lo) * lo->es.grad);
    }
    count(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, sizeof(double));                // the loss
    if (zl->stage) count(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, sizeof(double)); // norm over shards
    count(r, COMM_GROUP_MP, COMM_OP_ALL_REDUCE, sizeof(double));                // norm over tp x pp
    if (zl->stage == 1) count(r, COMM_GROUP_DP, COMM_OP_ALL_GATHER, zl->capacity * lo->es.param);
    for (int k = 0; zl->stage == 2 && k < zl->n_buckets; k++)
        count(r, COMM_GROUP_DP, COMM_OP_ALL_GATHER, zl->buckets[k].padded * lo->es.param);
}

// One training step of a pipeline rank replayed from its table `sched` into *out.
static void replay(plan_comm *out, const layout *lo, const stage_tables *st,
                   const sched_table *sched) {
    memset(out, 0, sizeof *out);
    rank_step r = {
        .lo = lo, .st = st, .comm = out, .m = sched->micro_batches, .phase = PLAN_PHASE_SCHEDULE};
    r.group_size[COMM_GROUP_TP] = lo->tp;
    r.group_size[COMM_GROUP_DP] = lo->dp;
    r.group_size[COMM_GROUP_PP] = lo->pp;
    r.group_size[COMM_GROUP_EMBED] = st->pt->wte_shared ? 2 : 1;
    r.group_size[COMM_GROUP_MP] = lo->tp * lo->pp;
    r.group_size[COMM_GROUP_WORLD] = lo->world;
    r.gathered = xcalloc((size_t)st->zl.chunks, sizeof(int));
    const uint64_t message = (uint64_t)st->d.N_local * st->d.C *
                             lo->es.act; // a chunk's input or d(input)
    for (int i = 0; i < sched->n_actions; i++) {
        const sched_action *a = &sched->actions[i];
        switch (a->kind) {
        case SCHED_ACTION_FWD: forward(&r, a->chunk); break;
        case SCHED_ACTION_BWD:
            backward_b(&r, a->chunk);
            backward_w(&r, a->chunk, a->micro);
            break;
        case SCHED_ACTION_BWD_B: backward_b(&r, a->chunk); break;
        case SCHED_ACTION_BWD_W: backward_w(&r, a->chunk, a->micro); break;
        case SCHED_ACTION_SEND_ACT:
        case SCHED_ACTION_SEND_GRAD: count(&r, COMM_GROUP_PP, COMM_OP_SEND, message); break;
        case SCHED_ACTION_RECV_ACT:
        case SCHED_ACTION_RECV_GRAD: count(&r, COMM_GROUP_PP, COMM_OP_RECV, message); break;
        }
    }
    step_end(&r);
    free(r.gathered);
}

// c(m) = c1 + (c2 - c1) / (m2 - m1) * (m - m1), for the counts of two replays at m1 < m2 <
// m. Every pair (micro-batch, chunk) of a table makes the same calls whatever the order
// (its passes, gathers, bucket reductions, sends and receives), and what happens once per
// step (ZeRO-0's reductions after the last micro-batch, zero3_gather step's gathers, the
// step end) does not grow with m: so each count is affine in m, and the step between the
// two replays divides exactly (asserted; tests/test_plan.c compares with full replays).
static uint64_t extrapolate(uint64_t c1, uint64_t c2, int64_t m1, int64_t m2, int64_t m) {
    if (c2 == UINT64_MAX) return UINT64_MAX; // saturated (count): past 64 bits already
    TRI_ASSERT(c2 >= c1 && (c2 - c1) % (uint64_t)(m2 - m1) == 0);
    return sat_add_u64(c1, sat_mul_u64((c2 - c1) / (uint64_t)(m2 - m1), (uint64_t)(m - m1)));
}

static void stage_comm_extrapolated(plan_stage *s, const plan_comm *c1, const plan_comm *c2, int m1,
                                    int m2, int m) {
    for (int ph = 0; ph < PLAN_PHASE_COUNT; ph++)
        for (int g = 0; g < COMM_GROUP_COUNT; g++)
            for (int op = 0; op < COMM_OP_COUNT; op++) {
                s->comm.bytes[ph][g][op] = extrapolate(c1->bytes[ph][g][op], c2->bytes[ph][g][op],
                                                       m1, m2, m);
                s->comm.calls[ph][g][op] = extrapolate(c1->calls[ph][g][op], c2->calls[ph][g][op],
                                                       m1, m2, m);
            }
}

// ---------------------------------------------------------------------------------------

// What plan_compute builds, kept for the next layout that shares it (plan_search walks
// layouts so that consecutive ones do): the parameter tables of the first, middle and last
// stage depend on the model, tp, pp and v; the schedules on (schedule, pp, v, m), at most
// two micro-batch counts at a time (the two replays of an extrapolation). The ZeRO layouts
// and the model's dims, cheap beside them, are built for each layout.
typedef struct {
    int key[4];          // schedule, pp, v, m; pp 0: empty
    sched_table *scheds; // (pp) one per pipeline rank
} sched_set;

struct plan_cache {
    double table_key[10];
    param_table kinds[3]; // first, middle, last stage
    int built[3];
    sched_set sets[2];
};

plan_cache *plan_cache_create(void) { return xcalloc(1, sizeof(plan_cache)); }

static void cache_drop_tables(plan_cache *c) {
    for (int k = 0; k < 3; k++)
        if (c->built[k]) params_free(&c->kinds[k]), c->built[k] = 0;
}

static void set_drop(sched_set *set) {
    for (int r = 0; set->scheds && r < set->key[1]; r++) sched_free(&set->scheds[r]);
    free(set->scheds);
    memset(set, 0, sizeof *set); // matches no layout (pp >= 1)
}

void plan_cache_free(plan_cache *c) {
    if (!c) return;
    cache_drop_tables(c);
    set_drop(&c->sets[0]);
    set_drop(&c->sets[1]);
    free(c);
}

// The stage kind (0 first, 1 middle, 2 last) of pipeline rank r.
static int stage_kind(const layout *lo, int r) { return r == 0 ? 0 : r == lo->pp - 1 ? 2 : 1; }

// The parameter table of pipeline rank r's kind (tp rank 0).
static const param_table *cached_table(plan_cache *c, const layout *lo, int r) {
    const run_config *cfg = lo->cfg;
    const double key[10] = {cfg->model.n_layer,
                            cfg->model.n_head,
                            cfg->model.d_model,
                            cfg->model.seq_len,
                            cfg->model.vocab_size,
                            cfg->model.vocab_pad_to,
                            lo->tp,
                            lo->pp,
                            lo->v,
                            cfg->parallel.schedule == SCHEDULE_ZBV};
    if (memcmp(key, c->table_key, sizeof key)) {
        cache_drop_tables(c);
        memcpy(c->table_key, key, sizeof key);
    }
    const int kind = stage_kind(lo, r);
    if (!c->built[kind]) {
        const model_shard sh = config_model_shard(cfg, 0, r);
        params_build(&c->kinds[kind], &cfg->model, &sh);
        c->built[kind] = 1;
    }
    return &c->kinds[kind];
}

// Every pipeline rank's table for m micro-batches, from the cache or built into the set that
// is not `keep` (the other replay of an extrapolation).
static tri_status cached_scheds(plan_cache *c, const layout *lo, int m, const sched_set *keep,
                                const sched_set **out) {
    const int key[4] = {(int)lo->cfg->parallel.schedule, lo->pp, lo->v, m};
    for (int i = 0; i < 2; i++)
        if (c->sets[i].scheds && !memcmp(key, c->sets[i].key, sizeof key))
            return *out = &c->sets[i], TRI_OK;
    sched_set *set = &c->sets[0] == keep ? &c->sets[1] : &c->sets[0];
    set_drop(set);
    set->scheds = xcalloc((size_t)lo->pp, sizeof(sched_table));
    memcpy(set->key, key, sizeof key);
    for (int r = 0; r < lo->pp; r++) {
        tri_status rc = sched_build(&set->scheds[r], lo->cfg->parallel.schedule, lo->pp, lo->v, m,
                                    r);
        if (rc != TRI_OK) {
            set_drop(set);
            return rc;
        }
    }
    *out = set;
    return TRI_OK;
}

// Up to this many micro-batches per step a step is replayed call by call; beyond, two smaller
// counts are replayed and the counts extrapolated (stage_comm_extrapolated), so that the
// planner's time and memory do not grow with m.
#define PLAN_REPLAY_DEFAULT 64
static int g_replay_limit = PLAN_REPLAY_DEFAULT;

int plan_set_replay_limit(int max_m) {
    const int old = g_replay_limit;
    g_replay_limit = max_m > 0 ? max_m : PLAN_REPLAY_DEFAULT;
    return old;
}

// The micro-batch counts to replay for m: m itself, or m1 < m2 < m of m's residue mod pp
// (interleaved needs a multiple of pp, 1f1b at least pp; gpipe's last group of micro-batches
// is m mod pp) when m is past the replay limit. Returns how many (1 or 2).
static int replay_counts(const layout *lo, int out[2]) {
    const int m = lo->m, m1 = lo->pp + m % lo->pp, m2 = m1 + lo->pp;
    if (m <= g_replay_limit || m <= m2) return out[0] = m, 1;
    out[0] = m1, out[1] = m2;
    return 2;
}

// The tables of every stage kind for this layout: the cached parameter table, the ZeRO layout
// of dp rank 0 and the model's dims.
static void stage_tables_build(stage_tables *st, plan_cache *c, const layout *lo, int r) {
    const run_config *cfg = lo->cfg;
    st->pt = cached_table(c, lo, r);
    const zero_config zc = config_zero_config(cfg, 0);
    zero_layout_build(&st->zl, &zc, st->pt);
    const model_layout ml = config_model_layout(cfg, 0, r, 1, plan_device_traits(lo->dev));
    st->d = model_dims_of(&cfg->model, &ml);
}

// The schedule's time: each rank's compute and in-schedule communication per micro-batch and
// chunk, split into forward, input gradient and weight gradient by the device's F:B:W ratios
// (the recomputed forward joins B), and the tables of the replayed micro-batch counts
// simulated with them; past the replay limit the makespan is extrapolated from the two
// replays as the counts are (its steady state adds the same time per micro-batch).
static tri_status simulate_schedule(plan_result *p, const layout *lo, int n_replays,
                                    const int *replay_m, const sched_set *const *sets) {
    const int pp = lo->pp, v = lo->v;
    double *f = xcalloc((size_t)pp * v * 3, sizeof(double)), *b = f + pp * v, *w = b + pp * v;
    const double *fbw = lo->dev->fbw;
    const double fr = fbw[0], br = fbw[1] + (lo->recompute ? fbw[0] : 0), wr = fbw[2];
    double busy = 0, p2p = 0;
    for (int r = 0; r < pp; r++) {
        const plan_stage *s = &p->stages[r];
        const double t = s->t_busy / ((double)lo->m * v);
        for (int c = 0; c < v; c++) {
            f[r * v + c] = t * fr / (fr + br + wr);
            b[r * v + c] = t * br / (fr + br + wr);
            w[r * v + c] = t * wr / (fr + br + wr);
        }
        busy += s->t_busy;
        if (s->t_p2p > p2p) p2p = s->t_p2p;
    }
    const sched_times times = {.f = f, .b = b, .w = w, .p2p = p2p};
    double span[2] = {0, 0};
    tri_status rc = TRI_OK;
    for (int k = 0; k < n_replays && rc == TRI_OK; k++) {
        sched_sim_result res;
        rc = sched_simulate(sets[k]->scheds, pp, &times, &res);
        span[k] = res.makespan;
        sched_sim_free(&res);
    }
    free(f);
    TRI_CHECK(rc);
    p->t_schedule = n_replays == 1 ? span[0]
                                   : span[0] + (span[1] - span[0]) / (replay_m[1] - replay_m[0]) *
                                                   (lo->m - replay_m[0]);
    // Clamped at 0: with one stage the makespan is the busy time, up to rounding.
    p->bubble_sim = p->t_schedule > 0 ? fmax(0, 1 - busy / (pp * p->t_schedule)) : 0;
    for (int r = 0; r < pp && p->t_schedule > 0; r++) {
        const plan_stage *s = &p->stages[r];
        p->stages[r].idle_sim = fmax(0, 1 - s->t_busy / p->t_schedule);
    }
    return TRI_OK;
}

tri_status plan_compute(plan_result *p, const run_config *cfg, const plan_device *dev) {
    plan_cache *c = plan_cache_create();
    tri_status rc = plan_compute_cached(p, cfg, dev, c);
    plan_cache_free(c);
    return rc;
}

tri_status plan_compute_cached(plan_result *p, const run_config *cfg, const plan_device *dev,
                               plan_cache *cache) {
    memset(p, 0, sizeof *p);
    const int tp = cfg->parallel.tp, pp = cfg->parallel.pp, dp = cfg->parallel.dp;
    TRI_ASSERT(dp >= 1); // resolved
    layout lo = {.cfg = cfg,
                 .dev = dev,
                 .es = elem_sizes_of(cfg),
                 .world = tp * pp * dp,
                 .tp = tp,
                 .pp = pp,
                 .dp = dp,
                 .v = cfg->parallel.virtual_stages,
                 .zero = dp > 1 ? cfg->parallel.zero : 0,
                 .recompute = cfg->parallel.recompute == RECOMPUTE_FULL,
                 .m = config_micro_batches(cfg)};
    int replay_m[2] = {0, 0};
    const int n_replays = replay_counts(&lo, replay_m);
    const sched_set *sets[2] = {NULL, NULL};
    TRI_CHECK(cached_scheds(cache, &lo, replay_m[0], NULL, &sets[0]));
    if (n_replays == 2) TRI_CHECK(cached_scheds(cache, &lo, replay_m[1], sets[0], &sets[1]));

    p->dev = *dev;
    p->world = lo.world, p->tp = tp, p->pp = pp, p->dp = dp, p->virtual_stages = lo.v;
    p->zero = lo.zero, p->micro_batches = lo.m;
    p->flops_per_token = plan_flops_per_token(cfg);
    p->tokens_per_step = (double)cfg->train.global_batch * cfg->model.seq_len;
    p->bubble = sched_bubble_fraction(cfg->parallel.schedule, pp, lo.v, lo.m);
    p->peak_flops = plan_device_peak(dev, cfg->train.precision_mode, NULL);
    p->usable_bytes = dev->mem_bytes - dev->reserve_bytes;
    p->stages = xcalloc((size_t)pp, sizeof(plan_stage));
    // First, middle and last stages differ; every middle stage holds the same sizes.
    stage_tables kinds[3];
    int built[3] = {0, 0, 0};
    for (int r = 0; r < pp; r++) {
        const int kind = stage_kind(&lo, r);
        if (!built[kind]) stage_tables_build(&kinds[kind], cache, &lo, r), built[kind] = 1;
        const stage_tables *st = &kinds[kind];
        plan_stage *s = &p->stages[r];
        p->n_params = st->pt->global_numel;
        s->pp_rank = r;
        s->n_slots = (int)sched_max_in_flight(cfg->parallel.schedule, pp, lo.v, lo.m, r);
        stage_memory(s, &lo, st);
        if (n_replays == 1) {
            replay(&s->comm, &lo, st, &sets[0]->scheds[r]);
        } else {
            plan_comm c1, c2;
            replay(&c1, &lo, st, &sets[0]->scheds[r]);
            replay(&c2, &lo, st, &sets[1]->scheds[r]);
            stage_comm_extrapolated(s, &c1, &c2, replay_m[0], replay_m[1], lo.m);
        }
        plan_stage_time(s, &lo, st, p->peak_flops * dev->efficiency);
        const double end = s->t_comm[PLAN_PHASE_STEP_END];
        if (end > p->t_step_end) p->t_step_end = end;
        if (s->t_optimizer > p->t_optimizer) p->t_optimizer = s->t_optimizer;
        if (stage_device_bytes(s) > stage_device_bytes(&p->stages[p->worst_stage]))
            p->worst_stage = r;
    }
    // The final save's pieces: the largest over the whole model's tensors, which the stage
    // kinds' tables hold between them.
    size_t piece = 0;
    for (int k = 0; k < 3; k++)
        if (built[k] && model_save_piece_elems(kinds[k].pt) > piece)
            piece = model_save_piece_elems(kinds[k].pt);
    for (int r = 0; r < pp; r++)
        p->stages[r].host_save = plan_host_save_bytes(cfg, kinds[stage_kind(&lo, r)].pt, piece);
    for (int k = 0; k < 3; k++)
        if (built[k]) zero_layout_free(&kinds[k].zl);
    p->fits = (double)stage_device_bytes(&p->stages[p->worst_stage]) <= p->usable_bytes;
    // The schedule: every stage's table run with its own durations (sched_sim.h).
    TRI_CHECK(simulate_schedule(p, &lo, n_replays, replay_m, sets));
    p->step_s = p->t_schedule + p->t_step_end + p->t_optimizer;
    p->tokens_per_s = p->tokens_per_step / p->step_s;
    p->mfu = p->flops_per_token * p->tokens_per_step / (p->step_s * lo.world * p->peak_flops);
    return TRI_OK;
}

void plan_free(plan_result *p) {
    free(p->stages);
    p->stages = NULL;
}

uint64_t plan_model_state_bytes(const plan_stage *s) {
    return s->mem[MEM_PARAM] + s->mem[MEM_GRAD] + s->mem[MEM_MASTER] + s->mem[MEM_ADAM];
}

uint64_t plan_group_bytes(const plan_stage *s, comm_group_id g) {
    uint64_t n = 0;
    for (int ph = 0; ph < PLAN_PHASE_COUNT; ph++)
        for (int op = 0; op < COMM_OP_COUNT; op++) n += s->comm.bytes[ph][g][op];
    return n;
}

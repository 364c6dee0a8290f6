// plan.c: per-rank memory and communication of a layout, and the predicted step time (see
// plan.h). Memory sums the buffer specs of the model, the ZeRO layer and the optimizer;
// communication replays one training step's calls with the model's dims and the ZeRO layer's
// buckets; each function of the replay names the code whose calls it follows.
#include "plan/plan.h"

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

// Bytes per element of each kind of buffer and message under the config's precision (the
// dtypes the modules use): bf16 parameters (and their dp all-gathers) with an fp32 master
// copy; the residual stream and the tp and pipeline messages in fp32; gradients, their
// workspaces and SP/embedding sums in train.grad_dtype; the dp reduction in
// train.reduce_dtype.
typedef struct {
    size_t param;  // parameters (and their dp all-gathers)
    size_t grad;   // gradient buffers, shards and bucket workspaces
    size_t master; // fp32 master weights: none in fp32 training
    size_t adam;   // m and v together
    size_t act;    // the tp and pipeline messages that carry activations
    size_t reduce; // the dp reduction of the gradients
} elem_sizes;

static elem_sizes elem_sizes_of(const run_config *cfg) {
    const int bf16 = cfg->train.precision == DTYPE_BF16;
    return (elem_sizes){
        .param = dtype_size(cfg->train.precision),
        .grad = dtype_size(cfg->train.grad_dtype),
        .master = bf16 ? 4 : 0,
        .adam = 8,
        .act = 4,
        .reduce = dtype_size(cfg->train.reduce_dtype),
    };
}

// One layout being planned.
typedef struct {
    const run_config *cfg;
    const plan_device *dev;
    elem_sizes es;
    int world, tp, pp, dp, v, zero, m, recompute;
} layout;

// What one stage holds: its parameter table (tp rank 0), its ZeRO layout (dp rank 0) and the
// model's dims (the same on every tp and dp rank of the stage, and on every middle stage).
typedef struct {
    const param_table *pt;
    zero_layout zl;
    model_dims d;
} stage_tables;

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
// FLOPs and time

double plan_flops_per_token(const run_config *cfg) {
    // The trainer's flops_per_token: 6 per matmul parameter (the tied LM head included) plus the
    // attention scores and weighted sums, 12 * L * T * C (PaLM's accounting).
    // Llama's matmuls per layer: qkv (NH + 2 NKV) HS x C, o_proj C x C, the SwiGLU's gate, up
    // and down 3 F x C; its attention the same 12 L T C (NH query heads, whatever NKV).
    const model_config *mc = &cfg->model;
    const double L = mc->n_layer, C = mc->d_model, T = mc->seq_len;
    const double Vp = config_padded_vocab(cfg);
    if (model_arch_is_llama(mc)) {
        const double HS = C / mc->n_head, NH = mc->n_head, NKV = mc->n_kv_head;
        const double layer = (NH + 2.0 * NKV) * HS * C + C * C + 3.0 * mc->ffn_hidden * C;
        return 6.0 * (L * layer + Vp * C) + 12.0 * L * T * C;
    }
    return 6.0 * (L * 12.0 * C * C + Vp * C) + 12.0 * L * T * C;
}

double plan_wire_factor(comm_op_id op, int n) {
    switch (op) {
    case COMM_OP_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case COMM_OP_REDUCE_SCATTER:
    case COMM_OP_ALL_GATHER: return (double)(n - 1) / n;
    case COMM_OP_BROADCAST:
    case COMM_OP_SEND: return 1.0;
    default: return 0.0;
    }
}

const char *plan_comm_op_name(comm_op_id op) {
    static const char *names[COMM_OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather",
                                               "broadcast",  "send",           "recv"};
    return op >= 0 && op < COMM_OP_COUNT ? names[op] : "?";
}

// Ranks a group spans in the world (rank = tp + TP * (dp + DP * pp)): it stays in one node
// when that span does.
static int group_span(const layout *lo, comm_group_id g) {
    switch (g) {
    case COMM_GROUP_TP: return lo->tp;
    case COMM_GROUP_DP: return lo->tp * lo->dp;
    default: return lo->world;
    }
}

// Seconds of phase ph's calls in the groups of `mask` (bit g: group g).
static double comm_seconds_of(const layout *lo, const plan_comm *c, plan_phase ph, unsigned mask) {
    const plan_device *d = lo->dev;
    double t = 0;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (!(mask >> g & 1)) continue;
        const int intra = group_span(lo, (comm_group_id)g) <= d->per_node;
        const double bw = intra ? d->intra_bw : d->inter_bw;
        const double lat = intra ? d->latency_intra : d->latency_inter;
        const int n = g == COMM_GROUP_TP      ? lo->tp
                      : g == COMM_GROUP_DP    ? lo->dp
                      : g == COMM_GROUP_PP    ? lo->pp
                      : g == COMM_GROUP_EMBED ? 2
                      : g == COMM_GROUP_MP    ? lo->tp * lo->pp
                                              : lo->world;
        for (int op = 0; op < COMM_OP_COUNT; op++) {
            if (!c->calls[ph][g][op]) continue;
            // Within a node, the op's own measured line where the profile has one.
            const int own = intra && d->comm_bw[op] > 0;
            t += (double)c->bytes[ph][g][op] * plan_wire_factor((comm_op_id)op, n) /
                 (own ? d->comm_bw[op] : bw);
            if (op != COMM_OP_RECV)
                t += (double)c->calls[ph][g][op] * (own ? d->comm_lat[op] : lat);
        }
    }
    return t;
}

static double comm_seconds(const layout *lo, const plan_comm *c, plan_phase ph) {
    return comm_seconds_of(lo, c, ph, ~0u);
}

// parallel.overlap as the executor and the ZeRO layer overlap (executor.c, zero.c,
// zero_gather.c): the schedule's pipeline sends and receives are started and waited for
// later, so a message costs its transfer between the stages (the simulator's p2p) instead of
// the sender's time; the dp bucket reductions and ZeRO-3's gathers run under the compute of
// their phase: ZeRO-2/3 under the whole schedule's (they are issued every micro-batch), the
// ZeRO-0 all-reduces under the last micro-batch's backward (issued there). A bound, not a
// simulation: the exposed dp time is what exceeds that window, and at least one call's worth
// (the last bucket is reduced after the last backward, with nothing left to hide it). The tp
// collectives block (their result is the next op's input) and the step end is not overlapped.
static void stage_overlap(plan_stage *s, const layout *lo, const stage_tables *st) {
    const plan_comm *c = &s->comm;
    const double sched = s->t_comm[PLAN_PHASE_SCHEDULE];
    s->t_busy = s->t_compute + sched, s->t_p2p = 0;
    if (!lo->cfg->parallel.overlap) return;
    const double pp = comm_seconds_of(lo, c, PLAN_PHASE_SCHEDULE, 1u << COMM_GROUP_PP);
    const double dp = comm_seconds_of(lo, c, PLAN_PHASE_SCHEDULE, 1u << COMM_GROUP_DP);
    uint64_t sends = c->calls[PLAN_PHASE_SCHEDULE][COMM_GROUP_PP][COMM_OP_SEND];
    uint64_t dp_calls = 0;
    for (int op = 0; op < COMM_OP_COUNT; op++)
        dp_calls += c->calls[PLAN_PHASE_SCHEDULE][COMM_GROUP_DP][op];
    const double *fbw = lo->dev->fbw;
    const double window = st->zl.stage >= 2 ? s->t_compute
                                            : s->t_compute / lo->m * (fbw[1] + fbw[2]) /
                                                  (fbw[0] + fbw[1] + fbw[2]);
    // On the CPU the comm's copies (MPI over shared memory) run on the cores that compute,
    // progressing only between ops: nothing is hidden (measured: ZeRO-3 dp 2 hid 26% of it).
    double exposed = lo->dev->cuda ? dp - window : dp;
    if (dp_calls && exposed < dp / (double)dp_calls) exposed = dp / (double)dp_calls;
    if (!dp_calls) exposed = 0;
    s->t_busy = s->t_compute + (sched - pp - dp) + exposed;
    s->t_p2p = sends ? pp / (double)sends : 0;
}

// Seconds per FLOP of a matmul whose smallest dimension is `dim`: small matmuls reach less
// of the peak, dim / (dim + gemm_half) of the large-matmul efficiency.
static double matmul_s_per_flop(const plan_device *d, double rate, double dim) {
    return (dim + d->gemm_half) / dim / rate;
}

// Compute threads a rank of this layout runs (the CPU): system.threads, or what the trainer
// fits for the ranks on one node (backend_cpu_fit_threads: the cores shared among them).
static double rank_threads(const layout *lo) {
    if (lo->cfg->system.threads > 0) return lo->cfg->system.threads;
    const int per_node = lo->dev->per_node > 0 ? lo->dev->per_node : 1;
    const int here = lo->world < per_node ? lo->world : per_node;
    return per_node / here > 1 ? per_node / here : 1;
}

// The compute rates of one rank: FLOP/s of a large matmul (of the run's operand dtype) and of
// attention, bytes/s of the elementwise passes (0: not counted, the built-in tables).
typedef struct {
    double matmul, attn, elem;
} rates;

static rates rates_of(const layout *lo, double rate) {
    const plan_device *d = lo->dev;
    // The CPU's numbers are per core (the table) or per calib.threads threads (a profile):
    // a rank runs rank_threads of them; matmuls and attention scale with the threads, the
    // elementwise passes too (each thread streams its share of the rows).
    double scale = 1;
    if (!d->cuda) scale = rank_threads(lo) / (d->calib.calibrated ? d->calib.threads : 1);
    rates r = {.matmul = rate * scale, .attn = rate * scale, .elem = d->elem_bw * scale};
    if (lo->cfg->train.precision == DTYPE_BF16 && d->matmul_rate_bf16 > 0)
        r.matmul = d->matmul_rate_bf16 * scale;
    if (d->attn_rate > 0) r.attn = d->attn_rate * scale;
    return r;
}

// Bytes the elementwise ops of one layer move per micro-batch, forward (fwd) and backward
// with its weight-gradient part (bwd), in the op order of model_layer.c's
// model_layer_forward / model_layer_backward (model_layer_llama.c for llama), each pass
// counted as the floats it reads and writes (as plan_calibrate's elem_bw counts them):
//   forward   ln1 (read x, write ln: 2 Nl C), the attention residual fused with ln2 (4 Nl C),
//             the MLP residual fused with the next ln1 (4 Nl C), GELU inside the fc matmul
//             (read pre, write out: 2 N fc) or llama's SwiGLU (read gate and up, write one:
//             3 N fh) and RoPE on q and k (read, write: 2 N C3);
//   backward  two LayerNorm backwards with their weight gradients (read dln, x, dres, write
//             dres: 5 Nl C each), the residual gradient to all rows (2 Nl C), GELU's
//             backward (3 N fc) or SwiGLU's (read 3, write 2: 5 N fh), RoPE's (2 N C3);
//   bf16      each activation rounded when kept (keep_bf16: read 4 + write 2 bytes of ln1,
//             qkv, atty, ln2 and the MLP's wide pair) and each matmul's output gradient
//             rounded for its bf16 backward (the same of dout, dfch, datty, dqkv).
static void layer_elem_bytes(const layout *lo, const model_dims *d, double *fwd, double *bwd) {
    const double N = d->N, Nl = d->N_local, C = d->C, C3 = d->C3_local, Cl = d->C_local;
    const double fc = d->fc_local, fh = d->fh_local;
    double f = 10 * Nl * C, b = 12 * Nl * C;
    if (d->llama) f += 3 * N * fh + 2 * N * C3, b += 5 * N * fh + 2 * N * C3;
    else f += 2 * N * fc, b += 3 * N * fc;
    f *= 4, b *= 4;
    if (lo->cfg->train.precision == DTYPE_BF16) {
        f += 6 * (2 * N * C + N * C3 + N * Cl + N * (fc + fh));
        b += 6 * (2 * N * C + N * C3 + N * fc) + 6 * N * fc; // + GELU's input back (load_bf16)
    }
    *fwd = f, *bwd = b;
}

// Seconds per micro-batch of one chunk of a stage: its layers' matmuls (FLOPs from the
// model's dims: qkv C x C3, attention projection Cl x C, fc C x fc, fcproj fh x C, per row,
// forward + backward = 3 x forward) at the matmul rate with the small-dimension fall-off,
// attention (12 T C / tp per row) at the attention rate, the elementwise bytes at elem_bw;
// the embedding's and the head's (LM head matmul 6 Vp C / tp per row, the final norm and the
// cross-entropy's passes over the logits) on their stages. Recompute adds each layer's
// forward again.
static double chunk_seconds(const layout *lo, const model_dims *md, const rates *r, int head) {
    const plan_device *d = lo->dev;
    const double N = md->N, C = md->C, T = md->T, tp = lo->tp;
    const double C3 = md->C3_local, Cl = md->C_local, fc = md->fc_local, fh = md->fh_local;
    const double rows = N < C ? N : C; // a matmul's smallest dimension: rows, C, or a tp share
#define MM(flops, dim) ((flops)*matmul_s_per_flop(d, r->matmul, (dim) < rows ? (dim) : rows))
    const double mm_fwd = MM(2 * N * C * C3, C3) + MM(2 * N * Cl * C, Cl) + MM(2 * N * C * fc, fc) +
                          MM(2 * N * fh * C, fh);
    const double attn = 12 * N * T * C / tp / r->attn; // fwd + bwd
    double ef = 0, eb = 0;
    layer_elem_bytes(lo, md, &ef, &eb);
    const double elem_f = r->elem > 0 ? ef / r->elem : 0, elem_b = r->elem > 0 ? eb / r->elem : 0;
    const double redo = lo->recompute ? 1 : 0;
    const double layer = (3 + redo) * mm_fwd + (1 + redo / 3) * attn + (1 + redo) * elem_f + elem_b;
    double t = md->Lc * layer;
    if (head) {
        const double Vpl = md->Vp_local, Nl = md->N_local;
        t += MM(6 * N * Vpl * C, Vpl);
        // lnf forward and backward (7 Nl C floats), the logits' statistics and gradient (3 N
        // Vpl floats: the fused cross-entropy's passes).
        if (r->elem > 0) t += 4 * (7 * Nl * C + 3 * N * Vpl) / r->elem;
    }
#undef MM
    return t;
}

// Model FLOPs this rank runs in a step (fwd + bwd = 3 x fwd, its tp share of m micro-batches):
// per token and layer 72 C^2 + 12 T C (PaLM's accounting, as the trainer's MFU counts), on
// the last stage the LM head (6 Vp C); recompute runs each layer's forward again. The time
// is chunk_seconds per micro-batch and chunk.
static void stage_time(plan_stage *s, const layout *lo, const stage_tables *st, double rate) {
    const run_config *cfg = lo->cfg;
    const plan_device *d = lo->dev;
    const model_dims *md = &st->d;
    const double C = (double)md->C, T = (double)md->T, tp = lo->tp;
    const double layers = (double)md->Lc * md->chunks;
    const double tokens = (double)lo->m * (double)md->B * T;
    const int head = st->d.has_head;
    const double Vp = config_padded_vocab(cfg);
    const double per_layer = 72.0 * C * C + 12.0 * T * C;
    s->model_flops = tokens * (layers * per_layer + (head ? 6.0 * Vp * C : 0)) / tp;
    const double redo = lo->recompute ? 4.0 / 3.0 : 1.0;
    s->hw_flops = s->model_flops + (redo - 1) * tokens * layers * per_layer / tp;
    const rates r = rates_of(lo, rate);
    s->t_compute = 0;
    for (int c = 0; c < md->chunks; c++)
        s->t_compute += lo->m * chunk_seconds(lo, md, &r, head && c == md->chunks - 1);
    for (int ph = 0; ph < PLAN_PHASE_COUNT; ph++)
        s->t_comm[ph] = comm_seconds(lo, &s->comm, (plan_phase)ph);
    stage_overlap(s, lo, st);
    // AdamW streams m and v (read, write), the gradient, the parameters and master weights.
    const elem_sizes *es = &lo->es;
    const double per_elem = 2.0 * es->adam + es->grad +
                            2.0 * (es->master ? es->master : es->param) +
                            (es->master ? es->param : 0);
    const double elems = (double)s->mem[MEM_ADAM] / es->adam;
    s->t_optimizer = elems * per_elem / d->mem_bw;
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
    p->bubble_sim = p->t_schedule > 0 ? 1 - busy / (pp * p->t_schedule) : 0;
    for (int r = 0; r < pp && p->t_schedule > 0; r++) {
        const plan_stage *s = &p->stages[r];
        p->stages[r].idle_sim = 1 - s->t_busy / p->t_schedule;
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
        stage_time(s, &lo, st, p->peak_flops * dev->efficiency);
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

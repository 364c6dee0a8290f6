// plan.c: per-rank memory and communication of a layout, and the predicted step time (see
// plan.h). Each function below names the code whose sizes or calls it reproduces; when that
// code changes, this file and tests/test_plan.sh change with it.
#include "plan/plan.h"

#include <string.h>

#include "compute/mempool.h"
#include "model/model.h"
#include "parallel/optim.h"
#include "model/params.h"
#include "parallel/sched.h"

// Bytes per element of each kind of buffer and message under the config's precision, as
// this build trains: bf16 parameters (and their dp all-gathers) with an fp32 master copy
// sharded like the Adam state, issue 6's ZeRO formulas; the wide activations a slot keeps
// for the backward in bf16 (activation_bytes); the residual stream and the tp and pipeline
// messages in fp32; gradients, their workspaces and their dp reduction in train.grad_dtype
// (= train.reduce_dtype).
typedef struct {
    size_t param;  // parameters (and their dp all-gathers)
    size_t grad;   // gradient buffers, shards and bucket workspaces
    size_t master; // fp32 master weights: none in fp32 training
    size_t adam;   // m and v together
    size_t act;    // activations, and the tp and pipeline messages that carry them
    size_t reduce; // the dp reduction of the gradients
} elem_sizes;

static elem_sizes elem_sizes_of(const run_config *cfg) {
    const int bf16 = cfg->train.precision == DTYPE_BF16;
    return (elem_sizes){
        .param = bf16 ? 2 : 4,
        .grad = cfg->train.grad_dtype == DTYPE_BF16 ? 2 : 4,
        .master = bf16 ? 4 : 0,
        .adam = 8,
        .act = 4,
        .reduce = cfg->train.reduce_dtype == DTYPE_BF16 ? 2 : 4,
    };
}

// The sizes of one layout that every stage shares (model.h's model_dims).
typedef struct {
    const run_config *cfg;
    const plan_device *dev;
    elem_sizes es;
    int world, tp, pp, dp, v, zero, sp, recompute, m;
    size_t B, T, C, N, Nl, NH_local, C_local, Vp_local;
} layout;

// A ZeRO bucket as optim.c's define_buckets and bucket_chunk make it.
typedef struct {
    int first, count, layers, chunk, is_layer;
    size_t begin, numel, padded, shard;
} bucket;

// What one stage holds: its parameter table and buckets (the same on every tp and dp rank
// of the stage, and on every middle stage).
typedef struct {
    param_table pt;
    bucket *buckets;
    int n_buckets, chunks;
} stage_tables;

static void stage_tables_build(stage_tables *st, const layout *lo, int pp_rank) {
    params_build(&st->pt, lo->cfg, lo->tp, 0, pp_rank);
    const param_table *pt = &st->pt;
    const size_t dp = (size_t)lo->dp;
    st->chunks = pt->pp == 1 ? 1 : pt->virtual_stages;
    st->buckets = xcalloc((size_t)pt->n_entries, sizeof(bucket));
    st->n_buckets = 0;
    for (int i = 0; i < pt->n_entries;) {
        bucket *b = &st->buckets[st->n_buckets++];
        b->first = i;
        b->count = optim_bucket_span(pt, i, lo->cfg->parallel.bucket_mb * 1048576.0, &b->layers);
        b->begin = pt->entries[i].offset;
        for (int k = i; k < i + b->count; k++) b->numel += (size_t)pt->entries[k].local_numel;
        b->padded = (b->numel + dp - 1) / dp * dp;
        b->shard = b->padded / dp;
        const param_entry *e = &pt->entries[i];
        b->is_layer = e->layer >= 0;
        b->chunk = b->is_layer ? optim_layer_chunk(pt, e->layer)
                   : e->layer == PARAM_LAYER_EMBED ? 0 : st->chunks - 1;
        i += b->count;
    }
}

static void stage_tables_free(stage_tables *st) {
    params_free(&st->pt);
    free(st->buckets);
    memset(st, 0, sizeof *st);
}

// ---------------------------------------------------------------------------------------
// Memory (train.c's run record, model.c's alloc_acts and alloc_scratch, optim.c's
// optim_create, create_buckets and create_param_shards)

// The shard arrays' length (optim_state.arena_len): Adam state, master weights, and the
// ZeRO-2/3 gradient and parameter shards.
static size_t arena_len(const layout *lo, const stage_tables *st, size_t capacity) {
    if (lo->zero == 0) return capacity;
    if (lo->zero == 1) return capacity / (size_t)lo->dp;
    size_t n = 0;
    for (int k = 0; k < st->n_buckets; k++) n += st->buckets[k].shard;
    return n;
}

// Every buffer is carved from the rank's arenas in whole granules (mempool.h): R(bytes).
#define R(bytes) ((uint64_t)mem_round((size_t)(bytes)))

// The wide activations of `layers` layers (ln1, ln2, qkv, atty, fch, fch_gelu), each its own
// buffer, at `elem` bytes.
static uint64_t wide_bytes(const layout *lo, uint64_t layers, uint64_t elem) {
    const uint64_t N = lo->N, C = lo->C, Cl = lo->C_local;
    return 2 * R(layers * N * C * elem) + R(layers * N * 3 * Cl * elem) + R(layers * N * Cl * elem) +
           2 * R(layers * N * 4 * Cl * elem);
}

// One activation slot (alloc_acts), buffer by buffer: `layers` layers with everything the
// backward reads (the wide activations at `wide_elem` bytes: 2 under bf16), or with layers 0
// (a recompute slot) only each of the chunk's Lc layer inputs and its output; `head`: the
// final LayerNorm, logits and loss buffers.
static uint64_t slot_bytes(const layout *lo, int layers, int Lc, int head, uint64_t wide_elem) {
    const uint64_t Nl = lo->Nl, C = lo->C, N = lo->N, a = lo->es.act, f = 4, L = (uint64_t)layers;
    uint64_t att = attn_state_bytes(lo->dev->attn, lo->B, lo->T, lo->NH_local);
    uint64_t n = R(Nl * C * a) + 2 * R(N * sizeof(int)); // dres, inputs, targets
    if (!layers) {
        n += R(((uint64_t)Lc + 1) * Nl * C * a);
    } else {
        n += R((L + 1) * Nl * C * a) + R(L * Nl * C * a) // residual, residual2
             + 4 * R(L * Nl * f) + R(L * att)          // LayerNorm statistics, attention state
             + wide_bytes(lo, L, wide_elem);           // ln1, ln2, qkv, atty, fch, fch_gelu
    }
    if (head) // lnf, its statistics, logits, rowmax, sumexp, target logit, losses
        n += R(N * C * a) + 2 * R(Nl * f) + R(N * lo->Vp_local * a) + 4 * R(N * f);
    return n;
}

// Activations of a stage: the slots; with recompute the one-layer work activations (and
// under bf16 the buffer activations are rounded through); under bf16 without recompute the
// fp32 wide activations of the layer being computed (model.c's lean work).
static uint64_t activation_bytes(const layout *lo, int n_slots, int Lc, int head) {
    const int bf16 = lo->es.master != 0;
    if (lo->recompute) {
        uint64_t widest = lo->N * (lo->C > 4 * lo->C_local ? lo->C : 4 * lo->C_local);
        return (uint64_t)n_slots * slot_bytes(lo, 0, Lc, head, 4) + slot_bytes(lo, 1, Lc, 0, 4) +
               (bf16 ? R(widest * 2) : 0);
    }
    return (uint64_t)n_slots * slot_bytes(lo, Lc, Lc, head, bf16 ? 2 : 4) + (bf16 ? wide_bytes(lo, 1, 4) : 0);
}

// The arenas of one stage (tp rank 0, dp rank 0; every rank of a stage needs the same), each
// the sum of the buffers model.c and optim.c carve from it.
static void stage_memory(plan_stage *s, const layout *lo, const stage_tables *st) {
    const param_table *pt = &st->pt;
    const elem_sizes *es = &lo->es;
    const size_t capacity = optim_capacity(lo->cfg, lo->dp, pt->local_numel);
    const size_t arena = arena_len(lo, st, capacity);
    const int Lc = params_chunk_layers(pt), head = s->pp_rank == lo->pp - 1;
    uint64_t *mem = s->mem;
    memset(mem, 0, sizeof s->mem);
    s->rank_params = (int64_t)pt->local_numel;
    mem[PLAN_MEM_PARAM] = R((lo->zero == 3 ? (arena ? arena : 1) : capacity) * es->param);
    mem[PLAN_MEM_GRAD] = R(lo->zero < 2 ? capacity * es->grad : (arena ? arena : 1) * es->grad);
    mem[PLAN_MEM_MASTER] = es->master ? R((arena ? arena : 1) * es->master) : 0;
    mem[PLAN_MEM_ADAM] = 2 * R(arena * es->adam / 2); // m and v
    mem[PLAN_MEM_ACTIVATION] = activation_bytes(lo, s->n_slots, Lc, head);
    size_t widest = 1; // bf16 gradients: the widest piece or bucket shard, widened (optim.c)
    if (lo->zero >= 2) { // one workspace all layer buckets share, one per other bucket, scratch
        size_t layer_ws = 0, scratch = 0;
        uint64_t others = 0;
        for (int k = 0; k < st->n_buckets; k++) {
            const bucket *b = &st->buckets[k];
            if (b->is_layer) layer_ws = b->padded > layer_ws ? b->padded : layer_ws;
            else others += R(b->padded * es->grad);
            scratch = b->padded > scratch ? b->padded : scratch;
            widest = b->shard > widest ? b->shard : widest;
        }
        // parallel.overlap: two layer workspaces, one filled while the other is reduced
        const int n_layer_ws = lo->cfg->parallel.overlap ? 2 : 1;
        mem[PLAN_MEM_GRAD_BUCKET] = (layer_ws ? n_layer_ws * R(layer_ws * es->grad) : 0) + others +
                                    R(scratch * (es->grad > es->param ? es->grad : es->param));
    } else { // pieces lie within entries: the widest entry
        for (int i = 0; i < pt->n_entries; i++)
            widest = (size_t)pt->entries[i].local_numel > widest ? (size_t)pt->entries[i].local_numel : widest;
    }
    // reduce_dtype other than grad_dtype: the reduction's buffer (a bucket, or at stage 1
    // the whole buffer); then, or with bf16 gradients, the fp32 widening buffer.
    const int mixed = es->reduce != es->grad && lo->dp > 1;
    if (mixed) {
        size_t n = lo->zero == 1 ? capacity : 1;
        for (int k = 0; lo->zero != 1 && k < st->n_buckets; k++)
            n = st->buckets[k].padded > n ? st->buckets[k].padded : n;
        mem[PLAN_MEM_GRAD_BUCKET] += R(n * es->reduce);
    }
    if (es->grad == 2 || mixed) mem[PLAN_MEM_GRAD_BUCKET] += R(widest * sizeof(float));
    if (lo->zero == 3) { // the largest chunk's buckets ("pass"), or every chunk's ("step")
        size_t most = 0, all = 0;
        for (int c = 0; c < st->chunks; c++) {
            size_t n = 0;
            for (int k = 0; k < st->n_buckets; k++)
                if (st->buckets[k].chunk == c) n += st->buckets[k].padded;
            most = n > most ? n : most;
            all += n;
        }
        const int step = lo->cfg->parallel.zero3_gather == ZERO3_GATHER_STEP;
        size_t ws = step ? all : most;
        // "pass" with overlap: a second workspace, for the next pass's gathers
        mem[PLAN_MEM_PARAM_GATHER] = (!step && lo->cfg->parallel.overlap ? 2 : 1) * R((ws ? ws : 1) * es->param);
    }
    const uint64_t N = lo->N, C = lo->C, a = lo->es.act; // dln, dqkv, datty, dfch, rows_full
    mem[PLAN_MEM_SCRATCH] = R(N * C * a) + R(N * 3 * lo->C_local * a) + R(N * lo->C_local * a) +
                            R(N * 4 * lo->C_local * a) + (lo->sp ? R(N * C * a) : 0) +
                            (head ? R(sizeof(double)) : 0) + // the loss accumulator
                            R(sizeof(double)); // the optimizer's gradient-norm accumulator
    if (lo->es.master) // bf16: the fp32 staging of the parameters an op reads (model.c), and
                       // the matmuls' bf16 operand buffer
        mem[PLAN_MEM_SCRATCH] += R(params_stage_layout(pt, NULL, 0) * sizeof(float)) +
                                 R(model_mm16_numel(N, C, lo->C_local, lo->Vp_local, head) * 2);
    if (lo->es.grad == 2) // bf16 gradients: the fp32 staging the backward accumulates into
        mem[PLAN_MEM_SCRATCH] += R(params_stage_layout(pt, NULL, 1) * sizeof(float));
    s->mem_total = 0;
    for (int k = 0; k < PLAN_MEM_COUNT; k++) s->mem_total += mem[k];
}

// ---------------------------------------------------------------------------------------
// Communication: one training step of one rank, call by call (train.c's train_loop,
// run_schedule and run_p2p_group; model.c's forward, backward and finish_grads; optim.c's
// params_needed, bucket_ready, reduce_grads, grad_norm and step).

typedef struct {
    const layout *lo;
    const stage_tables *st;
    plan_stage *s;
    int group_size[COMM_GROUP_COUNT];
    int has_embed, has_head;
    int *gathered; // zero3_gather step: (chunks) gathered since the last update
    plan_phase phase;
} rank_step;

// comm_mpi.c and comm_self count nothing for a group of one.
static void count(rank_step *r, comm_group_id g, comm_op_id op, uint64_t bytes) {
    if (r->group_size[g] <= 1) return;
    r->s->comm.bytes[r->phase][g][op] += bytes;
    r->s->comm.calls[r->phase][g][op] += 1;
}

// tp_reduce_rows: an all-reduce of N*C, or under SP a reduce-scatter leaving Nl*C.
static void tp_reduce_rows(rank_step *r) {
    const layout *lo = r->lo;
    count(r, COMM_GROUP_TP, lo->sp ? COMM_OP_REDUCE_SCATTER : COMM_OP_ALL_REDUCE,
          (uint64_t)lo->N * lo->C * lo->es.act);
}

// tp_gather_rows and dresidual_all_rows: SP's all-gather of every rank's Nl*C rows.
static void tp_gather_rows(rank_step *r) {
    const layout *lo = r->lo;
    if (lo->sp) count(r, COMM_GROUP_TP, COMM_OP_ALL_GATHER, (uint64_t)lo->N * lo->C * lo->es.act);
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

// optim_params_needed: ZeRO-3 gathers the chunk's buckets before each pass (or once a step).
static void params_needed(rank_step *r, int chunk) {
    const layout *lo = r->lo;
    if (lo->zero != 3 || r->gathered[chunk]) return;
    r->gathered[chunk] = lo->cfg->parallel.zero3_gather == ZERO3_GATHER_STEP;
    for (int k = 0; k < r->st->n_buckets; k++)
        if (r->st->buckets[k].chunk == chunk)
            count(r, COMM_GROUP_DP, COMM_OP_ALL_GATHER, r->st->buckets[k].padded * lo->es.param);
}

static void forward(rank_step *r, int chunk) {
    const layout *lo = r->lo;
    params_needed(r, chunk);
    if (r->has_embed && chunk == 0) tp_reduce_rows(r);
    for (int i = 0; i < params_chunk_layers(&r->st->pt); i++) layer_forward(r);
    if (!(r->has_head && chunk == r->st->chunks - 1)) return;
    tp_gather_rows(r); // final LayerNorm
    for (int i = 0; i < 3; i++) // vocab-parallel cross-entropy: row max, sum of exp, target logit
        count(r, COMM_GROUP_TP, COMM_OP_ALL_REDUCE, (uint64_t)lo->N * sizeof(float));
}

// The chunk's backward, and optim_bucket_ready for each bucket it finishes: ZeRO-0
// all-reduces a bucket after the step's last micro-batch, ZeRO-2/3 reduce-scatter it after
// every micro-batch. A bucket of several layers is ready once, after its last layer.
static void backward(rank_step *r, int chunk, int micro) {
    const layout *lo = r->lo;
    params_needed(r, chunk);
    if (r->has_head && chunk == r->st->chunks - 1) tp_reduce_rows(r); // d(final LayerNorm)
    for (int i = 0; i < params_chunk_layers(&r->st->pt); i++) layer_backward(r);
    if (r->has_embed && chunk == 0) tp_gather_rows(r);
    if (!(lo->zero >= 2 || (lo->zero == 0 && lo->dp > 1))) return;
    for (int k = 0; k < r->st->n_buckets; k++) {
        const bucket *b = &r->st->buckets[k];
        if (b->chunk != chunk) continue;
        if (lo->zero == 0 && micro == lo->m - 1)
            count(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, b->numel * lo->es.reduce);
        else if (lo->zero >= 2)
            count(r, COMM_GROUP_DP, COMM_OP_REDUCE_SCATTER, b->padded * lo->es.reduce);
    }
}

// After the schedule: model_finish_grads, optim_reduce_grads, the loss and norm sums,
// optim_step.
static void step_end(rank_step *r, int dp_rank) {
    const layout *lo = r->lo;
    const param_table *pt = &r->st->pt;
    const size_t capacity = optim_capacity(lo->cfg, lo->dp, pt->local_numel);
    r->phase = PLAN_PHASE_STEP_END;
    if (lo->pp > 1) count(r, COMM_GROUP_PP, COMM_OP_ALL_REDUCE, sizeof(double)); // the loss
    if (lo->zero < 2) { // the model's full gradient buffer: SP's LayerNorms, the tied wte
        for (int i = 0; lo->sp && i < pt->n_entries; i++)
            if (pt->entries[i].layernorm)
                count(r, COMM_GROUP_TP, COMM_OP_ALL_REDUCE,
                      (uint64_t)pt->entries[i].local_numel * lo->es.grad);
        if (lo->pp > 1 && pt->wte >= 0)
            count(r, COMM_GROUP_EMBED, COMM_OP_ALL_REDUCE,
                  (uint64_t)pt->entries[pt->wte].local_numel * lo->es.grad);
    }
    if (lo->zero == 1)
        count(r, COMM_GROUP_DP, COMM_OP_REDUCE_SCATTER, capacity * lo->es.reduce);
    for (int k = 0; lo->zero >= 2 && k < r->st->n_buckets; k++) { // the same sums on this rank's pieces
        const bucket *b = &r->st->buckets[k];
        const size_t own = b->begin + (size_t)dp_rank * b->shard, own_end = own + b->shard;
        for (int i = b->first; i < b->first + b->count; i++) {
            const param_entry *e = &pt->entries[i];
            size_t lo_ = e->offset > own ? e->offset : own;
            size_t end = e->offset + (size_t)e->local_numel, hi = end < own_end ? end : own_end;
            if (lo_ >= hi) continue;
            if (lo->sp && e->layernorm)
                count(r, COMM_GROUP_TP, COMM_OP_ALL_REDUCE, (hi - lo_) * lo->es.grad);
            if (lo->pp > 1 && i == pt->wte)
                count(r, COMM_GROUP_EMBED, COMM_OP_ALL_REDUCE, (hi - lo_) * lo->es.grad);
        }
    }
    count(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, sizeof(double)); // the loss
    if (lo->zero) count(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, sizeof(double)); // norm over shards
    count(r, COMM_GROUP_MP, COMM_OP_ALL_REDUCE, sizeof(double));                // norm over tp x pp
    if (lo->zero == 1) count(r, COMM_GROUP_DP, COMM_OP_ALL_GATHER, capacity * lo->es.param);
    for (int k = 0; lo->zero == 2 && k < r->st->n_buckets; k++)
        count(r, COMM_GROUP_DP, COMM_OP_ALL_GATHER, r->st->buckets[k].padded * lo->es.param);
}

static void stage_comm(plan_stage *s, const layout *lo, const stage_tables *st,
                       const sched_table *sched) {
    rank_step r = {.lo = lo, .st = st, .s = s, .phase = PLAN_PHASE_SCHEDULE};
    const int first = s->pp_rank == 0, last = s->pp_rank == lo->pp - 1;
    r.has_embed = first, r.has_head = last;
    r.group_size[COMM_GROUP_TP] = lo->tp;
    r.group_size[COMM_GROUP_DP] = lo->dp;
    r.group_size[COMM_GROUP_PP] = lo->pp;
    r.group_size[COMM_GROUP_EMBED] = lo->pp > 1 && (first || last) ? 2 : 1;
    r.group_size[COMM_GROUP_MP] = lo->tp * lo->pp;
    r.group_size[COMM_GROUP_WORLD] = lo->world;
    r.gathered = xcalloc((size_t)st->chunks, sizeof(int));
    const uint64_t message = (uint64_t)lo->Nl * lo->C * lo->es.act; // a chunk's input or d(input)
    for (int i = 0; i < sched->n_actions; i++) {
        const sched_action *a = &sched->actions[i];
        switch (a->kind) {
        case SCHED_ACTION_FWD: forward(&r, a->chunk); break;
        case SCHED_ACTION_BWD: backward(&r, a->chunk, a->micro); break;
        case SCHED_ACTION_SEND_ACT:
        case SCHED_ACTION_SEND_GRAD: count(&r, COMM_GROUP_PP, COMM_OP_SEND, message); break;
        case SCHED_ACTION_RECV_ACT:
        case SCHED_ACTION_RECV_GRAD: count(&r, COMM_GROUP_PP, COMM_OP_RECV, message); break;
        }
    }
    step_end(&r, 0);
    free(r.gathered);
}

// ---------------------------------------------------------------------------------------
// FLOPs and time

double plan_flops_per_token(const run_config *cfg) {
    // train.c's flops_per_token: 6 per matmul parameter (the tied LM head included) plus the
    // attention scores and weighted sums, 12 * L * T * C (PaLM's accounting).
    const double L = cfg->model.n_layer, C = cfg->model.d_model, T = cfg->model.seq_len;
    const double Vp = config_padded_vocab(cfg);
    return 6.0 * (L * 12.0 * C * C + Vp * C) + 12.0 * L * T * C;
}

// Ring algorithms: an all-reduce moves 2(n-1)/n of its buffer through each rank's link, a
// reduce-scatter or all-gather (n-1)/n of the whole buffer, a send its message (a receive
// shares the send's time: links are full duplex).
static double wire_factor(comm_op_id op, int n) {
    switch (op) {
    case COMM_OP_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case COMM_OP_REDUCE_SCATTER:
    case COMM_OP_ALL_GATHER: return (double)(n - 1) / n;
    case COMM_OP_BROADCAST:
    case COMM_OP_SEND: return 1.0;
    default: return 0.0;
    }
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

static double comm_seconds(const layout *lo, const plan_comm *c, plan_phase ph) {
    const plan_device *d = lo->dev;
    double t = 0;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
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
            t += (double)c->bytes[ph][g][op] * wire_factor((comm_op_id)op, n) / bw;
            if (op != COMM_OP_RECV) t += (double)c->calls[ph][g][op] * lat;
        }
    }
    return t;
}

// Seconds per FLOP of a matmul whose smallest dimension is `dim`: small matmuls reach less
// of the peak, dim / (dim + gemm_half) of the large-matmul efficiency.
static double matmul_s_per_flop(const plan_device *d, double rate, double dim) {
    return (dim + d->gemm_half) / dim / rate;
}

// Model FLOPs this rank runs in a step (fwd + bwd = 3 x fwd, its tp share of m
// micro-batches): per token and layer the four matmuls (qkv 18 C^2, attention projection
// 6 C^2, MLP 24 C^2 + 24 C^2: 72 C^2) and attention (12 T C), and on the last stage the LM
// head (6 Vp C). Recompute runs each layer's forward again (1/3 more of its FLOPs).
static void stage_time(plan_stage *s, const layout *lo, const stage_tables *st, double rate) {
    const run_config *cfg = lo->cfg;
    const plan_device *d = lo->dev;
    const double C = (double)lo->C, T = (double)lo->T, N = (double)lo->N, tp = lo->tp;
    const double Cl = (double)lo->C_local, Vpl = (double)lo->Vp_local;
    const double layers = (double)params_chunk_layers(&st->pt) * st->chunks;
    const double tokens = (double)lo->m * (double)lo->B * T;
    const double rows = N < C ? N : C; // a matmul's smallest dimension: rows, C, or C/tp
#define MIN_DIM(x) ((x) < rows ? (x) : rows)
    const double layer_s = (18 * C * C * matmul_s_per_flop(d, rate, MIN_DIM(3 * Cl)) +
                            6 * C * C * matmul_s_per_flop(d, rate, MIN_DIM(Cl)) +
                            48 * C * C * matmul_s_per_flop(d, rate, MIN_DIM(4 * Cl)) +
                            12 * T * C / rate) / tp;
    const int head = s->pp_rank == lo->pp - 1;
    const double Vp = config_padded_vocab(cfg);
    const double head_s = head ? 6 * Vp * C * matmul_s_per_flop(d, rate, MIN_DIM(Vpl)) / tp : 0;
#undef MIN_DIM
    const double per_layer = 72.0 * C * C + 12.0 * T * C;
    s->model_flops = tokens * (layers * per_layer + (head ? 6.0 * Vp * C : 0)) / tp;
    const double redo = lo->recompute ? 4.0 / 3.0 : 1.0;
    s->hw_flops = s->model_flops + (redo - 1) * tokens * layers * per_layer / tp;
    s->t_compute = tokens * (redo * layers * layer_s + head_s);
    for (int ph = 0; ph < PLAN_PHASE_COUNT; ph++)
        s->t_comm[ph] = comm_seconds(lo, &s->comm, (plan_phase)ph);
    // AdamW streams m and v (read, write), the gradient, the parameters and master weights.
    const elem_sizes *es = &lo->es;
    const double per_elem = 2.0 * es->adam + es->grad + 2.0 * (es->master ? es->master : es->param) +
                            (es->master ? es->param : 0);
    const double elems = (double)s->mem[PLAN_MEM_ADAM] / es->adam;
    s->t_optimizer = elems * per_elem / d->mem_bw;
}

// ---------------------------------------------------------------------------------------

// What plan_compute builds, kept for the next layout that shares it (plan_search walks
// layouts so that consecutive ones do): the stage tables depend on the model, tp, pp, v, dp
// and bucket_mb; the schedules on (schedule, pp, v, m).
struct plan_cache {
    double table_key[11];
    stage_tables kinds[3]; // first, middle, last stage
    int built[3];
    int sched_key[4];
    sched_table *scheds;   // (n_scheds) one per pipeline rank
    int n_scheds;
};

plan_cache *plan_cache_create(void) { return xcalloc(1, sizeof(plan_cache)); }

static void cache_drop_tables(plan_cache *c) {
    for (int k = 0; k < 3; k++)
        if (c->built[k]) stage_tables_free(&c->kinds[k]), c->built[k] = 0;
}

static void cache_drop_scheds(plan_cache *c) {
    for (int r = 0; r < c->n_scheds; r++) sched_free(&c->scheds[r]);
    free(c->scheds);
    c->scheds = NULL, c->n_scheds = 0;
    memset(c->sched_key, 0, sizeof c->sched_key); // matches no layout (pp >= 1)
}

void plan_cache_free(plan_cache *c) {
    if (!c) return;
    cache_drop_tables(c);
    cache_drop_scheds(c);
    free(c);
}

// The tables of stage kind `kind` (0 first, 1 middle, 2 last) of pipeline rank r.
static const stage_tables *cached_tables(plan_cache *c, const layout *lo, int r) {
    const run_config *cfg = lo->cfg;
    const double key[11] = {cfg->model.n_layer, cfg->model.n_head, cfg->model.d_model,
                            cfg->model.seq_len, cfg->model.vocab_size, cfg->model.vocab_pad_to,
                            lo->tp, lo->pp, lo->v, lo->dp, cfg->parallel.bucket_mb};
    if (memcmp(key, c->table_key, sizeof key)) {
        cache_drop_tables(c);
        memcpy(c->table_key, key, sizeof key);
    }
    const int kind = r == 0 ? 0 : r == lo->pp - 1 ? 2 : 1;
    if (!c->built[kind]) stage_tables_build(&c->kinds[kind], lo, r), c->built[kind] = 1;
    return &c->kinds[kind];
}

static tri_status cached_scheds(plan_cache *c, const layout *lo) {
    const int key[4] = {(int)lo->cfg->parallel.schedule, lo->pp, lo->v, lo->m};
    if (c->scheds && !memcmp(key, c->sched_key, sizeof key)) return TRI_OK;
    cache_drop_scheds(c);
    c->scheds = xcalloc((size_t)lo->pp, sizeof(sched_table));
    for (; c->n_scheds < lo->pp; c->n_scheds++)
        TRI_CHECK(sched_build(&c->scheds[c->n_scheds], lo->cfg->parallel.schedule, lo->pp, lo->v,
                              lo->m, c->n_scheds));
    memcpy(c->sched_key, key, sizeof key);
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
    layout lo = {.cfg = cfg, .dev = dev, .es = elem_sizes_of(cfg), .world = tp * pp * dp,
                 .tp = tp, .pp = pp, .dp = dp, .v = cfg->parallel.virtual_stages,
                 .zero = dp > 1 ? cfg->parallel.zero : 0,
                 .sp = cfg->parallel.sequence_parallel && tp > 1,
                 .recompute = cfg->parallel.recompute == RECOMPUTE_FULL,
                 .m = config_micro_batches(cfg)};
    lo.B = (size_t)cfg->train.micro_batch, lo.T = (size_t)cfg->model.seq_len;
    lo.C = (size_t)cfg->model.d_model, lo.N = lo.B * lo.T;
    lo.Nl = lo.sp ? lo.N / (size_t)tp : lo.N;
    lo.NH_local = (size_t)(cfg->model.n_head / tp), lo.C_local = lo.C / (size_t)tp;
    lo.Vp_local = (size_t)(config_padded_vocab(cfg) / tp);
    TRI_CHECK(cached_scheds(cache, &lo));

    p->dev = *dev;
    p->world = lo.world, p->tp = tp, p->pp = pp, p->dp = dp, p->virtual_stages = lo.v;
    p->zero = lo.zero, p->micro_batches = lo.m;
    p->flops_per_token = plan_flops_per_token(cfg);
    p->tokens_per_step = (double)cfg->train.global_batch * cfg->model.seq_len;
    p->bubble = sched_bubble_fraction(cfg->parallel.schedule, pp, lo.v, lo.m);
    p->peak_flops = cfg->train.precision == DTYPE_BF16 ? dev->peak_bf16 : dev->peak_fp32;
    p->usable_bytes = dev->mem_bytes - dev->reserve_bytes;
    p->stages = xcalloc((size_t)pp, sizeof(plan_stage));
    double t_micro = 0;
    for (int r = 0; r < pp; r++) {
        // First, middle and last stages differ; every middle stage holds the same sizes.
        const stage_tables *st = cached_tables(cache, &lo, r);
        plan_stage *s = &p->stages[r];
        p->n_params = st->pt.global_numel;
        s->pp_rank = r;
        s->n_slots = cache->scheds[r].max_in_flight;
        stage_memory(s, &lo, st);
        stage_comm(s, &lo, st, &cache->scheds[r]);
        stage_time(s, &lo, st, p->peak_flops * dev->efficiency);
        double micro = (s->t_compute + s->t_comm[PLAN_PHASE_SCHEDULE]) / lo.m;
        t_micro = micro > t_micro ? micro : t_micro;
        const double end = s->t_comm[PLAN_PHASE_STEP_END];
        if (end > p->t_step_end) p->t_step_end = end;
        if (s->t_optimizer > p->t_optimizer) p->t_optimizer = s->t_optimizer;
        if (s->mem_total > p->stages[p->worst_stage].mem_total) p->worst_stage = r;
    }
    p->fits = (double)p->stages[p->worst_stage].mem_total <= p->usable_bytes;
    // The schedule: m micro-batches plus the fill and drain, (pp-1)/v of the slowest stage's.
    p->t_schedule = t_micro * (lo.m + (double)(pp - 1) / lo.v);
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
    return s->mem[PLAN_MEM_PARAM] + s->mem[PLAN_MEM_GRAD] + s->mem[PLAN_MEM_MASTER] +
           s->mem[PLAN_MEM_ADAM];
}

uint64_t plan_group_bytes(const plan_stage *s, comm_group_id g) {
    uint64_t n = 0;
    for (int ph = 0; ph < PLAN_PHASE_COUNT; ph++)
        for (int op = 0; op < COMM_OP_COUNT; op++) n += s->comm.bytes[ph][g][op];
    return n;
}

const char *plan_mem_name(plan_mem_kind k) {
    static const char *names[PLAN_MEM_COUNT] = {
        "param_bytes", "grad_bytes", "master_bytes", "adam_bytes", "activation_bytes",
        "grad_bucket_bytes", "param_gather_bytes", "scratch_bytes"};
    return (unsigned)k < PLAN_MEM_COUNT ? names[k] : "?";
}

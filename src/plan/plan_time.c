// plan_time.c: the predicted time of a stage (plan.h): FLOPs per token, the ops of its chunks
// (the model's op list, model_ops) at the device's (or profile's) rates, its collectives
// over the links, and what parallel.overlap hides; plan.c simulates the schedule with them.
#include "plan/plan_internal.h"

#include <string.h>

#include "config/config_layout.h"

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
    const double pp = comm_seconds_of(lo, c, PLAN_PHASE_SCHEDULE, 1u << COMM_GROUP_PP);
    s->t_busy = s->t_compute + sched, s->t_p2p = 0, s->t_p2p_busy = pp;
    if (!lo->cfg->parallel.overlap) return;
    s->t_p2p_busy = 0;
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

// A rate at t threads from a profile's thread_scaling points y (at c->scale_threads):
// interpolated between two measured counts, and beyond the last (or below the first) that
// point's rate per thread times t. No points: t itself (rates linear in the threads).
static double at_threads(const plan_calib *c, const double *y, double t) {
    const int n = c->n_scale;
    if (n == 0) return t;
    const double *x = c->scale_threads;
    if (t <= x[0]) return y[0] * t / x[0];
    if (t >= x[n - 1]) return y[n - 1] * t / x[n - 1];
    int i = 1;
    while (x[i] < t) i++;
    return y[i - 1] + (y[i] - y[i - 1]) * (t - x[i - 1]) / (x[i] - x[i - 1]);
}

static rates rates_of(const layout *lo, double rate) {
    const plan_device *d = lo->dev;
    // The CPU's numbers are per core (the table) or per calib.threads threads (a profile): a
    // rank runs rank_threads of them. Each kind of op scales as the profile's thread_scaling
    // measured it (a matmul shares its cores better than a pass bound by memory), or linearly
    // without one.
    double mm = 1, attn = 1, elem = 1;
    if (!d->cuda) {
        const plan_calib *c = &d->calib;
        const double t = rank_threads(lo), t0 = c->calibrated ? c->threads : 1;
        mm = at_threads(c, c->scale_mm, t) / at_threads(c, c->scale_mm, t0);
        attn = at_threads(c, c->scale_attn, t) / at_threads(c, c->scale_attn, t0);
        elem = at_threads(c, c->scale_elem, t) / at_threads(c, c->scale_elem, t0);
    }
    rates r = {.matmul = rate * mm, .attn = rate * mm, .elem = d->elem_bw * elem};
    if (lo->cfg->train.precision == DTYPE_BF16 && d->matmul_rate_bf16 > 0)
        r.matmul = d->matmul_rate_bf16 * mm;
    if (d->attn_rate > 0) r.attn = d->attn_rate * attn;
    return r;
}

// Seconds of one call of `op` (model.h's op list) at the rates r: a matmul's FLOPs at the
// matmul rate with the fall-off of its smallest dimension (rows, in or out: a tp share, a
// short micro-batch, the LM head's row chunks), attention's at the attention rate, an
// elementwise op's bytes at elem_bw (0 where the device has none: the built-in tables).
static double op_seconds(const plan_device *d, const rates *r, const model_op *op) {
    const int64_t *x = op->dims;
    switch (op->kind) {
    case MODEL_OP_MATMUL_FWD:
    case MODEL_OP_MATMUL_BWD:
    case MODEL_OP_MATMUL_FWD16:
    case MODEL_OP_MATMUL_BWD16: {
        const int64_t small = x[0] < x[1] ? x[0] : x[1];
        return model_op_flops(op) * matmul_s_per_flop(d, r->matmul, small < x[2] ? small : x[2]);
    }
    case MODEL_OP_ATTENTION_FWD:
    case MODEL_OP_ATTENTION_BWD: return model_op_flops(op) / r->attn;
    default: return r->elem > 0 ? model_op_bytes(op) / r->elem : 0;
    }
}

// Seconds per micro-batch of pass `pass` of chunk `chunk` on the rank `ml` describes: the sum
// over the model's op list (model_ops, the calls the backend runs: tests/test_oplist.c);
// its FLOPs added to *flops.
static double pass_seconds(const layout *lo, const model_layout *ml, const rates *r, int chunk,
                           model_pass pass, double *flops) {
    model_op_list l;
    model_ops(&l, &lo->cfg->model, ml, chunk, pass);
    double t = 0;
    for (int i = 0; i < l.n; i++) {
        t += (double)l.ops[i].count * op_seconds(lo->dev, r, &l.ops[i]);
        *flops += (double)l.ops[i].count * model_op_flops(&l.ops[i]);
    }
    return t;
}

// Seconds per micro-batch of one chunk: its forward and its backward as the schedule runs it,
// whole or split into B and W (the zero-bubble schedules: ml->n_wbufs > 0), recompute inside
// the backward; *flops gets the FLOPs the backend runs for it.
static double chunk_seconds(const layout *lo, const model_layout *ml, const rates *r, int chunk,
                            double *flops) {
    double t = pass_seconds(lo, ml, r, chunk, MODEL_PASS_FORWARD, flops);
    if (ml->n_wbufs > 0)
        return t + pass_seconds(lo, ml, r, chunk, MODEL_PASS_B, flops) +
               pass_seconds(lo, ml, r, chunk, MODEL_PASS_W, flops);
    return t + pass_seconds(lo, ml, r, chunk, MODEL_PASS_BACKWARD, flops);
}

// The FLOPs and the compute time of a stage per step, m micro-batches through each of its
// chunks, from the model's op list: hw_flops what the backend runs (recompute's forward
// included), model_flops the same without recompute (the model's own: fwd + bwd = 3 x fwd
// of its matmuls and attention, its tp share, as the trainer's MFU counts them). The time is
// chunk_seconds per micro-batch and chunk.
void plan_stage_time(plan_stage *s, const layout *lo, const stage_tables *st, double rate) {
    const plan_device *d = lo->dev;
    const model_dims *md = &st->d;
    const model_layout ml = config_model_layout(lo->cfg, 0, s->pp_rank, 1,
                                                plan_device_traits(lo->dev));
    model_layout plain = ml;
    plain.recompute = RECOMPUTE_NONE;
    const rates r = rates_of(lo, rate);
    double hw = 0, model = 0;
    s->t_compute = 0;
    for (int c = 0; c < md->chunks; c++) {
        s->t_compute += lo->m * chunk_seconds(lo, &ml, &r, c, &hw);
        if (ml.recompute != RECOMPUTE_NONE) (void)chunk_seconds(lo, &plain, &r, c, &model);
    }
    s->hw_flops = lo->m * hw;
    s->model_flops = lo->m * (ml.recompute != RECOMPUTE_NONE ? model : hw);
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

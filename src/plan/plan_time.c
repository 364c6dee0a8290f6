// plan_time.c: the predicted time of a stage (plan.h): FLOPs per token, the matmuls, attention
// and elementwise passes of its chunks at the device's (or profile's) rates, its collectives
// over the links, and what parallel.overlap hides; plan.c simulates the schedule with them.
#include "plan/plan_internal.h"

#include <string.h>

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
void plan_stage_time(plan_stage *s, const layout *lo, const stage_tables *st, double rate) {
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

// test_oplist.c: the op list of model_ops (model.h) is the list of calls the backend runs.
// The CPU backend's table is wrapped in recording shims (each records its entry's name and
// the call's shape, then calls the real op); a real forward, backward, B and W of a small
// model run through the model's own entry points, and what each pass called must equal
// model_ops' list for that pass, as multisets of (op, dtype, shape, parts). Modes: GPT-2
// and Llama (grouped-query), fp32 and bf16, the bf16 output route (the CUDA backend's,
// which the CPU runs for the tests), full recompute, 4 layers (a first, middle and last
// layer differ in what they fuse), pipeline stages (first: embedding, last: head), two
// virtual stages, and tp rank shapes with and without sequence parallelism: one process runs
// tp rank R of 2 with a tp group whose collectives complete at once and move nothing (the
// values are not a tp run's; the calls and their shapes are tp rank R's).
// Not covered: train.grad_dtype bf16 (its gradient flush is not in the list, model.h).
//   build/tests/test_oplist [SET[,SET...]...]   default: the table of modes below
// Run from the repository root.
#include "comm/comm_backend.h"
#include "compute/backend.h"
#include "config/config.h"
#include "config/config_layout.h"
#include "model/model.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

static backend *real; // the CPU backend the shims call
static int recording; // the shims record only inside a pass
static model_op_list got;
static int unknown; // calls of entries the op list has no kind for

static void rec(model_op_kind kind, tri_dtype dt, unsigned parts, int64_t a, int64_t b, int64_t c,
                int64_t d, int64_t e) {
    if (!recording) return;
    const model_op op = {kind, dt, parts, {a, b, c, d, e}, 1};
    model_op_add(&got, &op);
}
static void rec_unknown(void) { unknown += recording; }

#define BWD_PARTS(dinp, dw, db, gelu)                                                              \
    (((dinp) ? MODEL_OP_DINP : 0) | ((dw) ? MODEL_OP_DWEIGHT : 0) | ((db) ? MODEL_OP_DBIAS : 0) |  \
     ((gelu) ? MODEL_OP_GELU : 0))

static int s_matmul_fwd(backend *b, float *out, float *pre, operand inp, operand w,
                        const float *bias, int N, int IC, int OC) {
    (void)b;
    rec(MODEL_OP_MATMUL_FWD, inp.dtype, (bias ? MODEL_OP_BIAS : 0) | (pre ? MODEL_OP_GELU : 0), N,
        IC, OC, 0, 0);
    return real->matmul_fwd(real, out, pre, inp, w, bias, N, IC, OC);
}
static int s_matmul_bwd(backend *b, float *dinp, float *dw, float *db, operand dout, operand inp,
                        operand w, const float *pre, int N, int IC, int OC) {
    (void)b;
    rec(MODEL_OP_MATMUL_BWD, dout.dtype, BWD_PARTS(dinp, dw, db, pre), N, IC, OC, 0, 0);
    return real->matmul_bwd(real, dinp, dw, db, dout, inp, w, pre, N, IC, OC);
}
static void s_matmul_fwd16(backend *b, uint16_t *out, uint16_t *pre, operand inp, operand w,
                           const float *bias, int N, int IC, int OC) {
    (void)b;
    rec(MODEL_OP_MATMUL_FWD16, inp.dtype, (bias ? MODEL_OP_BIAS : 0) | (pre ? MODEL_OP_GELU : 0), N,
        IC, OC, 0, 0);
    real->matmul_fwd16(real, out, pre, inp, w, bias, N, IC, OC);
}
static void s_matmul_bwd16(backend *b, uint16_t *dinp, float *dw, float *db, operand dout,
                           operand inp, operand w, const uint16_t *pre, int N, int IC, int OC) {
    (void)b;
    rec(MODEL_OP_MATMUL_BWD16, dout.dtype, BWD_PARTS(dinp, dw, db, pre), N, IC, OC, 0, 0);
    real->matmul_bwd16(real, dinp, dw, db, dout, inp, w, pre, N, IC, OC);
}
static void s_attention_fwd(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                            int NKV, int HS, float rope_theta) {
    (void)b;
    rec(MODEL_OP_ATTENTION_FWD, qkv.dtype, 0, B, T, NH, NKV, HS);
    real->attention_fwd(real, out, state, qkv, B, T, NH, NKV, HS, rope_theta);
}
static void s_attention_bwd(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                            const void *state, int B, int T, int NH, int NKV, int HS,
                            float rope_theta) {
    (void)b;
    rec(MODEL_OP_ATTENTION_BWD, qkv.dtype, 0, B, T, NH, NKV, HS);
    real->attention_bwd(real, dqkv, dout, qkv, out, state, B, T, NH, NKV, HS, rope_theta);
}
static void s_layernorm_fwd(backend *b, float *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *bias, int N, int C) {
    (void)b;
    rec(MODEL_OP_LAYERNORM_FWD, DTYPE_FP32, 0, N, C, 0, 0, 0);
    real->layernorm_fwd(real, out, mean, rstd, inp, w, bias, N, C);
}
static void s_layernorm_bwd(backend *b, float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean, const float *rstd,
                            int N, int C) {
    (void)b;
    rec(MODEL_OP_LAYERNORM_BWD, DTYPE_FP32, BWD_PARTS(dinp, dw, 0, 0), N, C, 0, 0, 0);
    real->layernorm_bwd(real, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void s_residual_fwd(backend *b, float *out, const float *a, const float *c, size_t n) {
    (void)b;
    rec(MODEL_OP_RESIDUAL_FWD, DTYPE_FP32, 0, (int64_t)n, 0, 0, 0, 0);
    real->residual_fwd(real, out, a, c, n);
}
static void s_residual_layernorm_fwd(backend *b, float *res, float *out, float *mean, float *rstd,
                                     const float *a, const float *c, const float *w,
                                     const float *bias, int N, int C) {
    (void)b;
    rec(MODEL_OP_RESIDUAL_LAYERNORM_FWD, DTYPE_FP32, 0, N, C, 0, 0, 0);
    real->residual_layernorm_fwd(real, res, out, mean, rstd, a, c, w, bias, N, C);
}
static void s_gelu_fwd(backend *b, float *out, const float *inp, size_t n) {
    (void)b;
    rec(MODEL_OP_GELU_FWD, DTYPE_FP32, 0, (int64_t)n, 0, 0, 0, 0);
    real->gelu_fwd(real, out, inp, n);
}
static void s_gelu_bwd(backend *b, float *dinp, const float *inp, const float *dout, size_t n) {
    (void)b;
    rec(MODEL_OP_GELU_BWD, DTYPE_FP32, 0, (int64_t)n, 0, 0, 0, 0);
    real->gelu_bwd(real, dinp, inp, dout, n);
}
static void s_embedding_fwd(backend *b, float *out, const int *tok, const float *wte,
                            const float *wpe, int B, int T, int C, int vs, int V, int pos) {
    (void)b;
    rec(MODEL_OP_EMBEDDING_FWD, DTYPE_FP32, pos ? MODEL_OP_POS : 0, B, T, C, V, 0);
    real->embedding_fwd(real, out, tok, wte, wpe, B, T, C, vs, V, pos);
}
static void s_embedding_bwd(backend *b, float *dwte, float *dwpe, const float *dout, const int *tok,
                            int B, int T, int C, int vs, int V) {
    (void)b;
    rec(MODEL_OP_EMBEDDING_BWD, DTYPE_FP32, dwpe ? MODEL_OP_POS : 0, B, T, C, V, 0);
    real->embedding_bwd(real, dwte, dwpe, dout, tok, B, T, C, vs, V);
}
static void s_xent_max(backend *b, float *rowmax, const float *logits, int N, int Vp, int vs,
                       int Vv) {
    (void)b;
    rec(MODEL_OP_XENT_MAX, DTYPE_FP32, 0, N, Vp, 0, 0, 0);
    real->xent_max(real, rowmax, logits, N, Vp, vs, Vv);
}
static void s_xent_sumexp(backend *b, float *sumexp, float *tl, const float *logits,
                          const float *rowmax, const int *tg, int N, int Vp, int vs, int Vv) {
    (void)b;
    rec(MODEL_OP_XENT_SUMEXP, DTYPE_FP32, 0, N, Vp, 0, 0, 0);
    real->xent_sumexp(real, sumexp, tl, logits, rowmax, tg, N, Vp, vs, Vv);
}
static void s_xent_loss(backend *b, float *losses, const float *rowmax, const float *sumexp,
                        const float *tl, int N) {
    (void)b;
    rec(MODEL_OP_XENT_LOSS, DTYPE_FP32, 0, N, 0, 0, 0, 0);
    real->xent_loss(real, losses, rowmax, sumexp, tl, N);
}
static void s_xent_bwd(backend *b, float *logits, const float *rowmax, const float *sumexp,
                       const int *tg, float dloss, int N, int Vp, int vs, int Vv) {
    (void)b;
    rec(MODEL_OP_XENT_BWD, DTYPE_FP32, 0, N, Vp, 0, 0, 0);
    real->xent_bwd(real, logits, rowmax, sumexp, tg, dloss, N, Vp, vs, Vv);
}
static void s_xent_stats16(backend *b, float *rowmax, float *sumexp, float *tl, const uint16_t *l16,
                           const int *tg, int N, int Vp, int vs, int Vv) {
    (void)b;
    rec(MODEL_OP_XENT_STATS16, DTYPE_FP32, 0, N, Vp, 0, 0, 0);
    real->xent_stats16(real, rowmax, sumexp, tl, l16, tg, N, Vp, vs, Vv);
}
static void s_xent_rescale(backend *b, float *sumexp, const float *rl, const float *ra, int N) {
    (void)b;
    rec(MODEL_OP_XENT_RESCALE, DTYPE_FP32, 0, N, 0, 0, 0, 0);
    real->xent_rescale(real, sumexp, rl, ra, N);
}
static void s_xent_bwd16(backend *b, uint16_t *l16, const float *rowmax, const float *sumexp,
                         const int *tg, float dloss, int N, int Vp, int vs, int Vv) {
    (void)b;
    rec(MODEL_OP_XENT_BWD16, DTYPE_FP32, 0, N, Vp, 0, 0, 0);
    real->xent_bwd16(real, l16, rowmax, sumexp, tg, dloss, N, Vp, vs, Vv);
}
static void s_loss_sum(backend *b, double *acc, const float *losses, size_t n) {
    (void)b;
    rec(MODEL_OP_LOSS_SUM, DTYPE_FP32, 0, (int64_t)n, 0, 0, 0, 0);
    real->loss_sum(real, acc, losses, n);
}
static void s_to_bf16(backend *b, uint16_t *dst, const float *src, size_t n) {
    (void)b;
    rec(MODEL_OP_TO_BF16, DTYPE_FP32, 0, (int64_t)n, 0, 0, 0, 0);
    real->to_bf16(real, dst, src, n);
}
static void s_from_bf16(backend *b, float *dst, const uint16_t *src, size_t n) {
    (void)b;
    rec(MODEL_OP_FROM_BF16, DTYPE_FP32, 0, (int64_t)n, 0, 0, 0, 0);
    real->from_bf16(real, dst, src, n);
}
static void s_memset_zero(backend *b, void *p, size_t bytes) {
    (void)b;
    rec(MODEL_OP_MEMSET_ZERO, DTYPE_FP32, 0, (int64_t)bytes, 0, 0, 0, 0);
    real->memset_zero(real, p, bytes);
}
static void s_copy(backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    rec(MODEL_OP_COPY, DTYPE_FP32, 0, (int64_t)bytes, 0, 0, 0, 0);
    real->copy(real, dst, src, bytes);
}
static void s_copy_to_device(backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    rec(MODEL_OP_COPY_TO_DEVICE, DTYPE_FP32, 0, (int64_t)bytes, 0, 0, 0, 0);
    real->copy_to_device(real, dst, src, bytes);
}
static void s_rmsnorm_fwd(backend *b, float *out, float *rstd, const float *inp, const float *w,
                          int N, int C, float eps) {
    (void)b;
    rec(MODEL_OP_RMSNORM_FWD, DTYPE_FP32, 0, N, C, 0, 0, 0);
    real->rmsnorm_fwd(real, out, rstd, inp, w, N, C, eps);
}
static void s_rmsnorm_bwd(backend *b, float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C) {
    (void)b;
    rec(MODEL_OP_RMSNORM_BWD, DTYPE_FP32, BWD_PARTS(dinp, dw, 0, 0), N, C, 0, 0, 0);
    real->rmsnorm_bwd(real, dinp, dw, dout, inp, w, rstd, N, C);
}
static void s_residual_rmsnorm_fwd(backend *b, float *res, float *out, float *rstd, const float *a,
                                   const float *c, const float *w, int N, int C, float eps) {
    (void)b;
    rec(MODEL_OP_RESIDUAL_RMSNORM_FWD, DTYPE_FP32, 0, N, C, 0, 0, 0);
    real->residual_rmsnorm_fwd(real, res, out, rstd, a, c, w, N, C, eps);
}
static void s_rope_fwd(backend *b, float *qkv, int B, int T, int NH, int NKV, int HS, float th) {
    (void)b;
    rec(MODEL_OP_ROPE_FWD, DTYPE_FP32, 0, B, T, NH, NKV, HS);
    real->rope_fwd(real, qkv, B, T, NH, NKV, HS, th);
}
static void s_rope_bwd(backend *b, float *dqkv, int B, int T, int NH, int NKV, int HS, float th) {
    (void)b;
    rec(MODEL_OP_ROPE_BWD, DTYPE_FP32, 0, B, T, NH, NKV, HS);
    real->rope_bwd(real, dqkv, B, T, NH, NKV, HS, th);
}
static void s_swiglu_fwd(backend *b, float *out, const float *fc, int N, int F) {
    (void)b;
    rec(MODEL_OP_SWIGLU_FWD, DTYPE_FP32, 0, N, F, 0, 0, 0);
    real->swiglu_fwd(real, out, fc, N, F);
}
static void s_swiglu_bwd(backend *b, float *dfc, const float *dout, const float *fc, int N, int F) {
    (void)b;
    rec(MODEL_OP_SWIGLU_BWD, DTYPE_FP32, 0, N, F, 0, 0, 0);
    real->swiglu_bwd(real, dfc, dout, fc, N, F);
}
// Entries a pass should not call: counted, and each call fails the mode.
static void s_add_to_bf16(backend *b, uint16_t *dst, const float *src, size_t n) {
    (void)b, rec_unknown();
    real->add_to_bf16(real, dst, src, n);
}
static void s_copy_to_host(backend *b, void *dst, const void *src, size_t bytes) {
    (void)b, rec_unknown();
    real->copy_to_host(real, dst, src, bytes);
}
static void s_scale(backend *b, float *x, float s, size_t n) {
    (void)b, rec_unknown();
    real->scale(real, x, s, n);
}
static void s_sumsq_add(backend *b, double *acc, const float *x, size_t n) {
    (void)b, rec_unknown();
    real->sumsq_add(real, acc, x, n);
}

// The wrapped table: the real one's fields (its ctx: memory entries work unchanged), with the
// compute and copy entries recording.
static backend wrap(backend *r) {
    backend w = *r;
    w.matmul_fwd = s_matmul_fwd, w.matmul_bwd = s_matmul_bwd;
    w.matmul_fwd16 = s_matmul_fwd16, w.matmul_bwd16 = s_matmul_bwd16;
    w.attention_fwd = s_attention_fwd, w.attention_bwd = s_attention_bwd;
    w.layernorm_fwd = s_layernorm_fwd, w.layernorm_bwd = s_layernorm_bwd;
    w.residual_fwd = s_residual_fwd, w.residual_layernorm_fwd = s_residual_layernorm_fwd;
    w.gelu_fwd = s_gelu_fwd, w.gelu_bwd = s_gelu_bwd;
    w.embedding_fwd = s_embedding_fwd, w.embedding_bwd = s_embedding_bwd;
    w.xent_max = s_xent_max, w.xent_sumexp = s_xent_sumexp, w.xent_loss = s_xent_loss;
    w.xent_bwd = s_xent_bwd, w.xent_stats16 = s_xent_stats16, w.xent_rescale = s_xent_rescale;
    w.xent_bwd16 = s_xent_bwd16, w.loss_sum = s_loss_sum;
    w.to_bf16 = s_to_bf16, w.from_bf16 = s_from_bf16;
    w.memset_zero = s_memset_zero, w.copy = s_copy, w.copy_to_device = s_copy_to_device;
    w.rmsnorm_fwd = s_rmsnorm_fwd, w.rmsnorm_bwd = s_rmsnorm_bwd;
    w.residual_rmsnorm_fwd = s_residual_rmsnorm_fwd;
    w.rope_fwd = s_rope_fwd, w.rope_bwd = s_rope_bwd;
    w.swiglu_fwd = s_swiglu_fwd, w.swiglu_bwd = s_swiglu_bwd;
    w.add_to_bf16 = s_add_to_bf16, w.copy_to_host = s_copy_to_host, w.scale = s_scale;
    w.sumsq_add = s_sumsq_add;
    return w;
}

// A comm whose tp group has `tp` ranks (this one `tp_rank`) and whose collectives complete at
// once, moving nothing: the model makes tp rank tp_rank's calls, with tp's shapes, in one
// process (the values are not a tp run's; the calls and their shapes are).
static tri_status fake_all_reduce(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                  comm_reduce_op op, comm_request *req) {
    (void)c, (void)g, (void)buf, (void)count, (void)dt, (void)op, (void)req;
    return TRI_OK;
}
static tri_status fake_blocks(comm *c, comm_group_id g, const void *send, void *recv, size_t count,
                              tri_dtype dt, comm_request *req) {
    (void)c, (void)g, (void)send, (void)recv, (void)count, (void)dt, (void)req;
    return TRI_OK;
}
static tri_status fake_group(comm *c) {
    (void)c;
    return TRI_OK;
}
static tri_status fake_group_end(comm *c, comm_request *req) {
    (void)c, (void)req;
    return TRI_OK;
}
static tri_status fake_wait(comm *c, comm_request *req, int on_host) {
    (void)c, (void)req, (void)on_host;
    return TRI_OK;
}
static void fake_progress(comm *c) { (void)c; }
static void fake_destroy(comm *c) { free(c); }
static const struct comm_iface fake_iface = {
    /* .all_reduce_start     = */ fake_all_reduce,
    /* .reduce_scatter_start = */ fake_blocks,
    /* .all_gather_start     = */ fake_blocks,
    /* .broadcast_start      = */ NULL,
    /* .barrier_start        = */ NULL,
    /* .send                 = */ NULL,
    /* .recv                 = */ NULL,
    /* .group_start          = */ fake_group,
    /* .group_end_start      = */ fake_group_end,
    /* .wait                 = */ fake_wait,
    /* .progress             = */ fake_progress,
    /* .local_copy           = */ NULL,
    /* .destroy              = */ fake_destroy,
};
static comm *fake_comm(int tp, int tp_rank) {
    comm *c = comm_backend_new("fake-tp", &fake_iface, NULL, 0, 1, 0);
    for (int g = 0; g < COMM_GROUP_COUNT; g++) c->groups[g] = (comm_group){.size = 1, .rank = 0};
    c->groups[COMM_GROUP_TP] = (comm_group){.size = tp, .rank = tp_rank};
    return c;
}

// The ops of a list as sorted "count x description" lines, to compare and to print.
static int line_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}
static char **lines_of(const model_op_list *l) {
    char **v = xmalloc((size_t)(l->n + 1) * sizeof *v);
    for (int i = 0; i < l->n; i++) {
        char d[200];
        model_op_describe(&l->ops[i], d, sizeof d);
        v[i] = xmalloc(240);
        snprintf(v[i], 240, "%s x%lld", d, (long long)l->ops[i].count);
    }
    qsort(v, (size_t)l->n, sizeof *v, line_cmp);
    return v;
}

// One pass's recorded calls against model_ops' list; the differences printed.
static void check_pass(const char *mode, const char *pass_name, const model_op_list *want) {
    char **g = lines_of(&got), **w = lines_of(want);
    int ok = got.n == want->n && !unknown;
    for (int i = 0; ok && i < got.n; i++) ok = !strcmp(g[i], w[i]);
    char name[300];
    snprintf(name, sizeof name, "oplist %s: %s calls = model_ops (%d distinct ops)", pass_name,
             mode, want->n);
    TEST_CHECK(ok, name, "the lists below (%d calls of entries the list has no kind for)", unknown);
    if (!ok) {
        for (int i = 0; i < got.n; i++) printf("  called:  %s\n", g[i]);
        for (int i = 0; i < want->n; i++) printf("  listed:  %s\n", w[i]);
    }
    for (int i = 0; i < got.n; i++) free(g[i]);
    for (int i = 0; i < want->n; i++) free(w[i]);
    free(g), free(w);
    got.n = 0, unknown = 0;
}

// A mode: key=value sets over tests/configs/tiny.yaml, and optionally "pp=P:R:V" (the rank R
// of P pipeline stages with V virtual stages, run in this one process: the model has no pp
// collective), "tp=T:R" (tp rank R of T, fake_comm), "sp" (sequence parallelism) and
// "bf16_out" (the backend's bf16 output route).
static void check_mode(const char *mode) {
    char *copy = xstrdup(mode), *sets[16];
    int n_set = 0, pp = 1, pp_rank = 0, vs = 1, bf16_out = 0, tp = 1, tp_rank = 0, sp = 0;
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        if (sscanf(tok, "pp=%d:%d:%d", &pp, &pp_rank, &vs) == 3) continue;
        if (sscanf(tok, "tp=%d:%d", &tp, &tp_rank) == 2) continue;
        if (!strcmp(tok, "sp")) sp = 1;
        else if (!strcmp(tok, "bf16_out")) bf16_out = 1;
        else if (n_set < 16) sets[n_set++] = tok;
    }
    run_config cfg;
    config_defaults(&cfg);
    TRI_ASSERT(config_load(&cfg, "tests/configs/tiny.yaml", n_set, sets) == TRI_OK &&
               config_resolve_world(&cfg, 1) == TRI_OK);
    TRI_ASSERT(backend_cpu_create(&real, 1) == TRI_OK);
    real->bf16_out = bf16_out; // what TRIDENT_TEST_CPU_BF16_OUT=1 sets
    backend be = wrap(real);
    comm *cm = fake_comm(tp, tp_rank);
    model_layout ml = config_model_layout(&cfg, 0, 0, 1, backend_traits_of(&be));
    ml.n_wbufs = 1;
    ml.shard.pp = pp, ml.shard.pp_rank = pp_rank, ml.shard.virtual_stages = vs;
    ml.shard.tp = tp, ml.shard.tp_rank = tp_rank, ml.sequence_parallel = sp;
    model m;
    TRI_ASSERT(model_create(&m, &cfg.model, &ml, &be, cm, NULL) == TRI_OK);
    // The store: each entry's parameters (small random values, in the run's dtype) and fp32
    // gradients, with no hooks (those are the parallel layer's, not the model's ops).
    const int ne = m.table.n_entries;
    void **params = xcalloc((size_t)ne, sizeof *params),
         **grads = xcalloc((size_t)ne, sizeof *grads);
    uint32_t seed = 12345;
    for (int e = 0; e < ne; e++) {
        const size_t n = (size_t)m.table.entries[e].local_numel;
        float *h = xmalloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            h[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.04f;
        }
        grads[e] = real->alloc(real, n * sizeof(float));
        if (ml.precision == DTYPE_BF16) {
            params[e] = real->alloc(real, n * sizeof(uint16_t));
            real->to_bf16(real, params[e], h, n);
        } else {
            params[e] = real->alloc(real, n * sizeof(float));
            memcpy(params[e], h, n * sizeof(float));
        }
        free(h);
    }
    model_set_store(&m, &(model_store){.param_of = params, .grad_of = grads});
    const int N = m.d.N;
    int *inputs = xmalloc((size_t)N * sizeof(int)), *targets = xmalloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++)
        inputs[i] = (i * 7) % cfg.model.vocab_size,
        targets[i] = (i * 13 + 1) % cfg.model.vocab_size;
    const float dloss = 1.0f / (float)N;
    model_op_list want;
    for (int chunk = 0; chunk < m.d.chunks; chunk++) {
        char where[400];
        snprintf(where, sizeof where, "%s%schunk %d", mode, ", ", chunk);
        // Joint: F, BWD.
        recording = 1;
        TRI_ASSERT(model_forward(&m, 0, chunk, inputs, targets) == TRI_OK);
        recording = 0;
        model_ops(&want, &cfg.model, &ml, chunk, MODEL_PASS_FORWARD);
        check_pass(where, "forward", &want);
        recording = 1;
        TRI_ASSERT(model_backward(&m, 0, chunk, dloss) == TRI_OK);
        recording = 0;
        model_ops(&want, &cfg.model, &ml, chunk, MODEL_PASS_BACKWARD);
        check_pass(where, "backward", &want);
        // Split: F, B, W.
        TRI_ASSERT(model_forward(&m, 0, chunk, inputs, targets) == TRI_OK);
        recording = 1;
        TRI_ASSERT(model_backward_b(&m, 0, 0, chunk, dloss) == TRI_OK);
        recording = 0;
        model_ops(&want, &cfg.model, &ml, chunk, MODEL_PASS_B);
        check_pass(where, "B", &want);
        recording = 1;
        TRI_ASSERT(model_backward_w(&m, 0, 0, chunk) == TRI_OK);
        recording = 0;
        model_ops(&want, &cfg.model, &ml, chunk, MODEL_PASS_W);
        check_pass(where, "W", &want);
    }
    (void)model_take_loss(&m);
    for (int e = 0; e < ne; e++) real->free(real, params[e]), real->free(real, grads[e]);
    free(params), free(grads), free(inputs), free(targets);
    model_free(&m);
    comm_destroy(cm);
    real->destroy(real);
    config_free(&cfg);
    free(copy);
}

int main(int argc, char **argv) {
    backend_cpu_prepare_process(argv, 0);
    log_init();
    static const char *const L = "model.arch=llama,model.n_kv_head=1,model.ffn_hidden=48";
    static char llama[5][200];
    snprintf(llama[0], 200, "%s", L);
    snprintf(llama[1], 200, "%s,train.precision=bf16", L);
    snprintf(llama[2], 200, "%s,parallel.recompute=full", L);
    snprintf(llama[3], 200, "%s,train.precision=bf16,parallel.recompute=full,pp=2:1:1", L);
    snprintf(llama[4], 200, "%s,model.n_head=4,model.n_kv_head=2,tp=2:1,sp,train.precision=bf16",
             L);
    const char *const defaults[] = {
        "model.n_layer=4",
        "model.n_layer=4,train.precision=bf16",
        "model.n_layer=4,train.precision=bf16,bf16_out",
        "model.n_layer=4,parallel.recompute=full",
        "model.n_layer=4,parallel.recompute=full,train.precision=bf16",
        "model.n_layer=4,parallel.recompute=full,train.precision=bf16,bf16_out",
        "model.n_layer=4,pp=2:0:1",
        "model.n_layer=8,train.precision=bf16,pp=2:1:2",
        "model.n_layer=8,pp=2:0:2",
        "model.n_layer=4,tp=2:1",
        "model.n_layer=4,tp=2:0,sp,train.precision=bf16,bf16_out",
        "model.n_layer=4,tp=2:1,sp,parallel.recompute=full",
        llama[0],
        llama[1],
        llama[2],
        llama[3],
        llama[4],
    };
    if (argc > 1)
        for (int i = 1; i < argc; i++) check_mode(argv[i]);
    else
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) check_mode(defaults[i]);
    TEST_EXIT();
}

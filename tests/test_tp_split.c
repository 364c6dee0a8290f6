// test_tp_split.c: each tensor-parallel split of the parameter table against the unsplit
// computation. Column-parallel qkv (rows split per q/k/v block, so each rank owns whole
// heads) and fc: every rank's output columns equal the matching columns of the unsplit
// matmul. Row-parallel attproj and fcproj: the partial outputs of the ranks sum to the
// unsplit output. Vocab-parallel wte: the masked lookups sum to the unsplit lookup.
// Slicing a global tensor and placing the slices back gives it unchanged.
#include <math.h>
#include <string.h>

#include "compute/backend.h"
#include "config/config.h"
#include "model/params.h"
#include "testlib.h"

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

// One entry's check at tp: X (N, in) @ W^T against the per-rank pieces.
static void check_entry(backend *be, const run_config *cfg, int tp, const char *name) {
    param_table full;
    params_build_full(&full, &cfg->model, cfg->parallel.tp);
    const param_entry *fe = &full.entries[params_find(&full, name)];
    const int OC = (int)fe->global_rows, IC = (int)fe->global_cols, N = 6;
    uint64_t seed = 42;
    float *W = xmalloc(sizeof(float) * OC * IC), *X = xmalloc(sizeof(float) * N * IC);
    for (int i = 0; i < OC * IC; i++) W[i] = frand(&seed);
    for (int i = 0; i < N * IC; i++) X[i] = frand(&seed);
    float *ref = xcalloc((size_t)N * OC, sizeof(float)),
          *sum = xcalloc((size_t)N * OC, sizeof(float));
    float *back = xcalloc((size_t)OC * IC, sizeof(float));
    backend_matmul_fwd(be, ref, NULL, operand_fp32(X), operand_fp32(W), NULL, N, IC, OC);
    double err = 0;
    for (int r = 0; r < tp; r++) {
        param_table pt;
        params_build(&pt, &cfg->model,
                     &(model_shard){.tp = tp, .tp_rank = r, .pp = 1, .virtual_stages = 1});
        const param_entry *e = &pt.entries[params_find(&pt, name)];
        const int lr = (int)e->local_rows, lc = (int)e->local_cols;
        float *Wl = xmalloc(sizeof(float) * lr * lc), *out = xcalloc((size_t)N * lr, sizeof(float));
        params_slice_from_global(&pt, e, W, Wl);
        params_place_into_global(&pt, e, Wl, back);
        if (e->split == SPLIT_COLS) { // this rank's input columns, partial sums of all outputs
            float *Xl = xmalloc(sizeof(float) * N * lc);
            for (int n = 0; n < N; n++)
                memcpy(Xl + n * lc, X + n * IC + r * lc, sizeof(float) * lc);
            backend_matmul_fwd(be, out, NULL, operand_fp32(Xl), operand_fp32(Wl), NULL, N, lc, lr);
            for (int i = 0; i < N * OC; i++) sum[i] += out[i];
            free(Xl);
        } else { // this rank's output columns: compare each with the unsplit column it maps to
            backend_matmul_fwd(be, out, NULL, operand_fp32(X), operand_fp32(Wl), NULL, N, IC, lr);
            for (int n = 0; n < N; n++)
                for (int j = 0; j < lr; j++) {
                    int64_t gj = params_global_index(&pt, e, j, 0) / IC;
                    err = fmax(err, fabs((double)out[n * lr + j] - ref[n * OC + gj]));
                }
        }
        free(Wl), free(out);
        params_free(&pt);
    }
    if (fe->split == SPLIT_COLS) err = max_diff(sum, ref, (size_t)N * OC);
    char label[96];
    snprintf(label, sizeof label, "split_%s_tp%d", name, tp);
    TEST_CHECK(err < 1e-5, label, "max |split - unsplit| = %g", err);
    snprintf(label, sizeof label, "slice_place_%s_tp%d", name, tp);
    TEST_CHECK(max_diff(back, W, (size_t)OC * IC) == 0, label, "slices do not tile the tensor");
    free(W), free(X), free(ref), free(sum), free(back);
    params_free(&full);
}

static void check_vocab(backend *be, const run_config *cfg, int tp) {
    param_table full;
    params_build_full(&full, &cfg->model, cfg->parallel.tp);
    const param_entry *fe = &full.entries[params_wte(&full)];
    const int Vp = (int)fe->global_rows, C = (int)fe->global_cols, B = 2, T = 5;
    uint64_t seed = 7;
    float *wte = xmalloc(sizeof(float) * Vp * C);
    for (int i = 0; i < Vp * C; i++) wte[i] = frand(&seed);
    int tok[10];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 37 + 11) % cfg->model.vocab_size;
    float *ref = xcalloc((size_t)B * T * C, sizeof(float)),
          *sum = xcalloc((size_t)B * T * C, sizeof(float));
    be->embedding_fwd(be, ref, tok, wte, NULL, B, T, C, 0, Vp, 0);
    for (int r = 0; r < tp; r++) {
        param_table pt;
        params_build(&pt, &cfg->model,
                     &(model_shard){.tp = tp, .tp_rank = r, .pp = 1, .virtual_stages = 1});
        const param_entry *e = &pt.entries[params_wte(&pt)];
        float *wl = xmalloc(sizeof(float) * e->local_numel),
              *out = xcalloc((size_t)B * T * C, sizeof(float));
        params_slice_from_global(&pt, e, wte, wl);
        be->embedding_fwd(be, out, tok, wl, NULL, B, T, C, r * (int)e->local_rows,
                          (int)e->local_rows, 0);
        for (int i = 0; i < B * T * C; i++) sum[i] += out[i];
        free(wl), free(out);
        params_free(&pt);
    }
    char label[64];
    snprintf(label, sizeof label, "split_wte_vocab_tp%d", tp);
    TEST_CHECK(max_diff(sum, ref, (size_t)B * T * C) == 0, label,
               "masked lookups do not sum to the lookup");
    free(wte), free(ref), free(sum);
    params_free(&full);
}

int main(int argc, char **argv) {
    (void)argc;
    backend_cpu_prepare_process(argv, 0);
    log_init();
    backend *be;
    if (backend_cpu_create(&be, 1)) return 1;
    run_config cfg;
    config_defaults(&cfg);
    cfg.model.n_layer = 1, cfg.model.n_head = 4, cfg.model.d_model = 16;
    cfg.model.seq_len = 8, cfg.model.vocab_size = 250, cfg.model.vocab_pad_to = 16;
    for (int tp = 2; tp <= 4; tp *= 2) {
        cfg.parallel.tp = tp;
        const char *names[] = {"h0.qkvw", "h0.fcw", "h0.attprojw", "h0.fcprojw"};
        for (int i = 0; i < 4; i++) check_entry(be, &cfg, tp, names[i]);
        check_vocab(be, &cfg, tp);
    }
    be->destroy(be);
    config_free(&cfg);
    TEST_EXIT();
}

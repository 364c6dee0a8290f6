// test_attn_out.c: the model hands attention_bwd the attention output O of the same layer's
// forward (backend.h): the same fp32 values, or under train.precision bf16 their bf16
// rounding, with and without parallel.recompute full. The CPU backend reads no O (it gets D
// from the probabilities it keeps), so a wrong O would pass every CPU test and only break the
// CUDA backend, whose FA2 and fp32 kernels take D = rowsum(dO * O) from it; here a CPU backend
// whose attention entries are wrapped records each forward's output and checks the O of each
// backward against it, bit for bit. Run from the repository root (tests/configs/tiny.yaml,
// the data shards).
#include "base/bf16.h"
#include "comm/comm.h"
#include "compute/backend.h"
#include "config/config.h"
#include "config/config_layout.h"
#include "io/data.h"
#include "io/model_init.h"
#include "model/model.h"
#include "parallel/zero.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

// The last forward's output per attention state buffer: one per layer and slot (under
// recompute, the work state, written by the recomputed forward just before the backward).
#define MAX_STATES 32
static struct {
    const void *state;
    float *out;
    size_t n;
} seen[MAX_STATES];
static int n_seen, n_checked, n_wrong;
static void (*real_fwd)(backend *, float *, void *, operand, int, int, int, int, int, float);
static void (*real_bwd)(backend *, float *, const float *, operand, operand, const void *, int, int,
                        int, int, int, float);

static void wrapped_fwd(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                        int NKV, int HS, float rope_theta) {
    real_fwd(b, out, state, qkv, B, T, NH, NKV, HS, rope_theta);
    int k = 0;
    while (k < n_seen && seen[k].state != state) k++;
    TRI_ASSERT(k < MAX_STATES);
    if (k == n_seen) n_seen++;
    seen[k].state = state;
    seen[k].n = (size_t)B * T * NH * HS;
    seen[k].out = realloc(seen[k].out, seen[k].n * sizeof(float)); // CPU buffers are host memory
    memcpy(seen[k].out, out, seen[k].n * sizeof(float));
}

static void wrapped_bwd(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                        const void *state, int B, int T, int NH, int NKV, int HS,
                        float rope_theta) {
    int k = 0;
    while (k < n_seen && seen[k].state != state) k++;
    int ok = k < n_seen && seen[k].n == (size_t)B * T * NH * HS && out.dtype == qkv.dtype;
    for (size_t i = 0; ok && i < seen[k].n; i++)
        ok = out.dtype == DTYPE_BF16
                 ? ((const uint16_t *)out.ptr)[i] == bf16_from_f32(seen[k].out[i])
                 : !memcmp((const float *)out.ptr + i, seen[k].out + i, sizeof(float));
    n_checked++, n_wrong += !ok;
    real_bwd(b, dqkv, dout, qkv, out, state, B, T, NH, NKV, HS, rope_theta);
}

// One micro-batch forward and backward of tests/configs/tiny.yaml (2 layers) with `sets`.
static void check_mode(const char *what, char **sets, int n_set) {
    run_config cfg;
    config_defaults(&cfg);
    TRI_ASSERT(config_load(&cfg, "tests/configs/tiny.yaml", n_set, sets) == TRI_OK &&
               config_resolve_world(&cfg, 1) == TRI_OK);
    backend *be;
    comm *cm;
    TRI_ASSERT(backend_cpu_create(&be, 1) == TRI_OK && comm_self_create(&cm, NULL) == TRI_OK);
    real_fwd = be->attention_fwd, real_bwd = be->attention_bwd;
    be->attention_fwd = wrapped_fwd, be->attention_bwd = wrapped_bwd;
    const model_layout ml = config_model_layout(&cfg, 0, 0, 1, backend_traits_of(be));
    model m;
    zero_state *z;
    model_init mi;
    data_stream ds;
    const int B = cfg.train.micro_batch, T = cfg.model.seq_len, GB = cfg.train.global_batch;
    TRI_ASSERT(model_create(&m, &cfg.model, &ml, be, cm, NULL) == TRI_OK &&
               model_init_open(&mi, &cfg, &m.table) == TRI_OK);
    const zero_config zc = config_zero_config(&cfg, 0);
    TRI_ASSERT(zero_create(&z, &zc, &m, model_init_entry, &mi, be, cm, NULL) == TRI_OK &&
               data_open(&ds, cfg.data.train.items[0].path, T, cfg.model.vocab_size, GB,
                         "data.train") == TRI_OK);
    model_init_close(&mi);
    int *inputs = xmalloc((size_t)B * T * sizeof(int)),
        *targets = xmalloc((size_t)B * T * sizeof(int));
    data_batch(&ds, 0, B, inputs, targets);
    n_seen = n_checked = n_wrong = 0;
    const int ok_run = model_forward(&m, 0, 0, inputs, targets) == TRI_OK &&
                       model_backward(&m, 0, 0, 1.0f / (float)(B * T)) == TRI_OK;
    char name[160];
    snprintf(name, sizeof name, "attention_bwd gets the forward's output O (%s)", what);
    TEST_CHECK(ok_run && n_checked == cfg.model.n_layer && n_wrong == 0, name,
               "run %s, %d backward calls for %d layers, %d with another O",
               ok_run ? "ok" : "FAILED", n_checked, cfg.model.n_layer, n_wrong);
    for (int k = 0; k < n_seen; k++) free(seen[k].out), seen[k].out = NULL;
    free(inputs), free(targets);
    data_close(&ds);
    zero_free(z);
    model_free(&m);
    be->destroy(be);
    comm_destroy(cm);
    config_free(&cfg);
}

int main(int argc, char **argv) {
    (void)argc;
    backend_cpu_prepare_process(argv, 0);
    log_init();
    char bf16[] = "train.precision=bf16", rc[] = "parallel.recompute=full";
    char *none[] = {NULL}, *only16[] = {bf16}, *onlyrc[] = {rc}, *both[] = {bf16, rc};
    check_mode("fp32", none, 0);
    check_mode("bf16", only16, 1);
    check_mode("fp32, recompute", onlyrc, 1);
    check_mode("bf16, recompute", both, 2);
    TEST_EXIT();
}

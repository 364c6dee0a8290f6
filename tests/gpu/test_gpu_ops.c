// test_gpu_ops.c: every row of the op table (tests/op_cases.h) on the CUDA backend against
// the CPU backend on the same random inputs (tests/op_harness.h's twin mode): each output
// within its tolerance of the CPU's (op_cases.h says why each is what it is), the device's
// rerun bitwise the same, and in the rows that ask for it the device's gradients against
// finite differences of the double-precision references; then the bf16 conversion ops
// against src/base/bf16.h bit for bit (tests/gpu/gpu_convert.h). Each row's wall time is
// printed ("# row ... s", with the device's and the CPU's part of it: the rest is the host's
// staging and comparing, which with the CPU's GEMMs is the slow side at model size), and the
// total per kind of row at the end. Needs a GPU: it is not one of the tests/test_*.c that
// `make test` runs; `make
// test-gpu` runs it (tests/gpu/run.sh).
//
//   build/tests/gpu/test_gpu_ops               the checks, then a table of the largest error
//                                              of each output against the CPU
//   build/tests/gpu/test_gpu_ops --bench       op timings at GPT-2 124M sizes (not a test)
//   build/tests/gpu/test_gpu_ops --self-test   the same checks with a 1-thread CPU backend in
//                                              place of CUDA: proves the harness without a GPU
//   build/tests/gpu/test_gpu_ops --fa2-model   the same checks with a 1-thread CPU backend
//                                              whose attention is the host model of CUDA's
//                                              FA2 kernels (tests/fa2_model.h): what the
//                                              device should show, from their algorithm
//   build/tests/gpu/test_gpu_ops --attention   only the attention rows (tests/gpu/run.sh runs
//                                              them again with TRIDENT_CUDA_ATTN=v1)
//   build/tests/gpu/test_gpu_ops --bench-attn  attention timings alone, per head size
//   build/tests/gpu/test_gpu_ops --matmuls     the matmul rows only (with
//                                              TRIDENT_TEST_CUDA_FALLBACK=1: every cuBLASLt
//                                              fallback, the bf16 fallback GEMM among them)
//   build/tests/gpu/test_gpu_ops --small       only the rows below model size (those without
//                                              CASE_TWIN_ONLY), and the conversions
//   build/tests/gpu/test_gpu_ops --model-size  only the model-sized rows (CASE_TWIN_ONLY)
//   build/tests/gpu/test_gpu_ops --convert     only the conversion ops against bf16.h
//
// TRIDENT_CUDA_TF32=1 must be unset: TF32 matmuls are ~1e-3 off by design.
#include "../fa2_model.h"
#include "../op_cases.h"
#include "../testlib.h"
#include "compute/backend.h"
#include "compute/cuda_api.h"
#include "compute/rope_math.h"
#include "gpu_bench.h"
#include "gpu_convert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static backend *dut, *cpu; // the device under test, the CPU reference

// ---------------------------------------------------------------------------------------
// --fa2-model: attention by the host model of the FA2 kernels, on the CPU backend's (host)
// buffers: rounding as the kernels round on bf16 q, k, v, in fp32 otherwise; its state is the
// kernels' (each row's lse).

static const float *model_widened(operand x, size_t n, float **owned) {
    *owned = NULL;
    if (x.dtype != DTYPE_BF16) return x.ptr;
    float *w = xmalloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = bf16_to_f32(((const uint16_t *)x.ptr)[i]);
    return *owned = w;
}

// Grouped-query attention in the model: kv heads repeated into the multi-head layout (3 NH HS
// per row), and the multi-head dk, dv folded back, summed over each group's query heads in
// head order (the kernels add the group's products before their one scaling of dK: the same
// sum to float rounding). dir 1: expand gqa into mha; -1: fold mha into gqa.
static void model_gqa(float *gqa, float *mha, int B, int T, int NH, int NKV, int HS, int dir) {
    const size_t C = (size_t)NH * HS, ld = (size_t)(NH + 2 * NKV) * HS;
    if (dir < 0) memset(gqa, 0, (size_t)B * T * ld * sizeof(float));
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int h = 0; h < NH; h++)
            for (int part = 0; part < 3; part++) {
                const size_t g = r * ld + (part ? C + (size_t)(part - 1) * NKV * HS +
                                                      (size_t)(h / (NH / NKV)) * HS
                                                : (size_t)h * HS);
                float *m = mha + r * 3 * C + (size_t)part * C + (size_t)h * HS;
                for (int d = 0; d < HS; d++) {
                    if (dir > 0) m[d] = gqa[g + d];
                    else gqa[g + d] += m[d];
                }
            }
}

// RoPE as the CUDA kernels apply it (backend.attn_rope): the q and k heads of a host fp32 qkv
// turned in place by rope_math.h's table and rule (dir 1), each element rounded to bf16 after
// when the kernels stage bf16 (round16); dir -1 unrotates a gradient (fp32, as the kernels).
static void model_rope(float *qkv, int B, int T, int NH, int NKV, int HS, float theta, float dir,
                       int round16) {
    float *tab = xmalloc(rope_table_floats(T, HS) * sizeof(float));
    rope_table_fill(tab, T, HS, (double)theta);
    const size_t ld = (size_t)(NH + 2 * NKV) * HS;
    for (size_t row = 0; row < (size_t)B * T; row++)
        for (int h = 0; h < NH + NKV; h++) {
            float *x = qkv + row * ld + (size_t)h * HS;
            for (int i = 0; i < HS / 2; i++) {
                const float *cs = tab + rope_at((int)(row % T), i, HS);
                const float u = x[i], v = x[i + HS / 2];
                x[i] = rope_rotated(u, v, cs[0], cs[1], i, HS, dir);
                x[i + HS / 2] = rope_rotated(v, u, cs[0], cs[1], i + HS / 2, HS, dir);
                if (round16) {
                    x[i] = bf16_to_f32(bf16_from_f32(x[i]));
                    x[i + HS / 2] = bf16_to_f32(bf16_from_f32(x[i + HS / 2]));
                }
            }
        }
    free(tab);
}

// The q, k, v the model's kernels read: widened, and rotated with rope_theta > 0 (then a copy).
static const float *model_qkv(operand qkv, int B, int T, int NH, int NKV, int HS, float rope_theta,
                              float **owned) {
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    const float *q = model_widened(qkv, n, owned);
    if (rope_theta <= 0) return q;
    if (!*owned) *owned = memcpy(xmalloc(n * sizeof(float) + 4), q, n * sizeof(float));
    model_rope(*owned, B, T, NH, NKV, HS, rope_theta, 1.0f, qkv.dtype == DTYPE_BF16);
    return *owned;
}

static void model_attention_fwd(backend *b, float *out, void *state, operand qkv, int B, int T,
                                int NH, int NKV, int HS, float rope_theta) {
    (void)b;
    float *w, *mha = NULL;
    fa2_model md = {.round_bf16 = qkv.dtype == DTYPE_BF16};
    const float *q = model_qkv(qkv, B, T, NH, NKV, HS, rope_theta, &w);
    if (NKV != NH) {
        mha = xmalloc((size_t)B * T * 3 * NH * HS * sizeof(float));
        model_gqa((float *)q, mha, B, T, NH, NKV, HS, 1);
    }
    fa2_model_fwd(&md, out, state, mha ? mha : q, B, T, NH, HS);
    free(w), free(mha);
}

static void model_attention_bwd(backend *b, float *dqkv, const float *dout, operand qkv,
                                operand out, const void *state, int B, int T, int NH, int NKV,
                                int HS, float rope_theta) {
    (void)b;
    float *wq, *wo, *mha = NULL, *dmha = NULL;
    fa2_model md = {.round_bf16 = qkv.dtype == DTYPE_BF16};
    const float *q = model_qkv(qkv, B, T, NH, NKV, HS, rope_theta, &wq);
    const float *o = model_widened(out, (size_t)B * T * NH * HS, &wo);
    if (NKV != NH) {
        const size_t n3 = (size_t)B * T * 3 * NH * HS;
        mha = xmalloc(n3 * sizeof(float)), dmha = xmalloc(n3 * sizeof(float));
        model_gqa((float *)q, mha, B, T, NH, NKV, HS, 1);
    }
    fa2_model_bwd(&md, dmha ? dmha : dqkv, dout, o, mha ? mha : q, state, B, T, NH, HS);
    if (dmha) model_gqa(dqkv, dmha, B, T, NH, NKV, HS, -1);
    if (rope_theta > 0) model_rope(dqkv, B, T, NH, NKV, HS, rope_theta, -1.0f, 0);
    free(wq), free(wo), free(mha), free(dmha);
}

// ---------------------------------------------------------------------------------------
// Memory

static void test_memory(void) {
    const size_t n = 1 << 20;
    size_t peak0 = dut->mem_peak_bytes(dut);
    float *p = dut->alloc(dut, n * sizeof(float) + 12);
    TEST_CHECK(p != NULL, "alloc 4 MiB", "NULL");
    if (!p) return;
    float *h = host_of(dut, p, n);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= h[i] == 0.0f;
    TEST_CHECK(zero, "alloc zero-fills", "nonzero bytes in a fresh block");
    TEST_CHECK(dut->mem_peak_bytes(dut) >= peak0 + n * sizeof(float) + 12, "mem_peak_bytes counts",
               "peak %zu after %zu + %zu", dut->mem_peak_bytes(dut), peak0, n * sizeof(float) + 12);
    float *src = rand_f(n, -1, 1), *q = dut->alloc(dut, n * sizeof(float));
    dut->copy_to_device(dut, p, src, n * sizeof(float));
    dut->copy(dut, q, p, n * sizeof(float));
    dut->memset_zero(dut, q + 100, 50 * sizeof(float));
    free(h);
    h = host_of(dut, q, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= h[i] == (i >= 100 && i < 150 ? 0.0f : src[i]);
    TEST_CHECK(ok, "copy_to_device, copy, memset_zero, copy_to_host", "round trip differs");
    size_t peak1 = dut->mem_peak_bytes(dut);
    dut->free(dut, p), dut->free(dut, q);
    float *z = dut->alloc(dut, 0);
    TEST_CHECK(z != NULL, "alloc 0 bytes", "NULL");
    dut->free(dut, z);
    TEST_CHECK(dut->mem_peak_bytes(dut) == peak1, "free keeps the high-water mark", "changed");
    free(h), free(src);
}

// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    backend_cpu_prepare_process(argv, 0); // OpenBLAS's fast kernels for the CPU reference
    log_init();
    int do_bench = 0, self_test = 0, attention_only = 0, fa2_model_dut = 0, matmuls = 0;
    int rows_small = 1, rows_model = 1, rows_ops = 1; // which rows run; rows_ops: any at all
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) do_bench = 1;
        else if (!strcmp(argv[i], "--bench-small")) do_bench = 2;
        else if (!strcmp(argv[i], "--bench-attn")) do_bench = 3;
        else if (!strcmp(argv[i], "--self-test")) self_test = 1;
        else if (!strcmp(argv[i], "--attention")) attention_only = 1;
        else if (!strcmp(argv[i], "--matmuls")) matmuls = 1;
        else if (!strcmp(argv[i], "--fa2-model")) self_test = fa2_model_dut = 1;
        else if (!strcmp(argv[i], "--small")) rows_model = 0;
        else if (!strcmp(argv[i], "--model-size")) rows_small = 0;
        else if (!strcmp(argv[i], "--convert")) rows_ops = 0;
        else {
            fprintf(stderr,
                    "usage: %s [--bench | --bench-small | --bench-attn] [--self-test | "
                    "--fa2-model] [--attention | --matmuls | --convert] [--small | --model-size]\n",
                    argv[0]);
            return 2;
        }
    }
    if (backend_cpu_create(&cpu, 0) != TRI_OK) return 1;
    if (self_test) {
        if (backend_cpu_create(&dut, 1) != TRI_OK) return 1;
        snprintf(test_tag, sizeof test_tag, " (cpu 1 thread)");
        if (fa2_model_dut) {
            dut->attention_fwd = model_attention_fwd;
            dut->attention_bwd = model_attention_bwd;
            dut->attn_state = ATTN_STATE_LSE;
            dut->attn_rope = 1; // as CUDA's: the attention rows with RoPE take the fused path
            snprintf(test_tag, sizeof test_tag, " (fa2 model)");
        }
    } else {
        int device = -1;
        if (cuda_device_count() <= 0 || cuda_device_select(0, &device) != TRI_OK ||
            backend_cuda_create(&dut, device) != TRI_OK) {
            printf("FAIL test_gpu_ops: no usable CUDA device (this test needs a GPU; "
                   "--self-test runs the harness on the CPU)\n");
            return 1;
        }
        // TRIDENT_TEST_CUDA_FALLBACK=1 (read by the backend): the same rows on every fallback.
        const char *kernels = getenv("TRIDENT_CUDA_ATTN");
        snprintf(test_tag, sizeof test_tag, " (cuda%s%s%s)", kernels ? " attn " : "",
                 kernels ? kernels : "", getenv("TRIDENT_TEST_CUDA_FALLBACK") ? ", fallbacks" : "");
        if (getenv("TRIDENT_CUDA_TF32"))
            printf("note: TRIDENT_CUDA_TF32 is set; fp32 tolerances will not hold\n");
        // flash-style attention: the backward recomputes the probabilities from each row's
        // log-sum-exp, B * NH * T floats of state
        TEST_CHECK(dut->attn_state == ATTN_STATE_LSE, "cuda attention state is the row log-sum-exp",
                   "attn_state %d", (int)dut->attn_state);
    }
    if (do_bench) {
        if (do_bench == 3) bench_attention_only(dut, self_test);
        else bench(dut, do_bench == 2);
        dut->destroy(dut), cpu->destroy(cpu);
        return 0;
    }
    if (!attention_only && !matmuls && rows_ops && rows_small) test_memory();
    double seconds[2] = {0, 0}; // below model size, model-sized
    int counted[2] = {0, 0};
    for (size_t i = 0; i < N_OP_CASES && rows_ops; i++) {
        const int model = OP_CASES[i].flags & CASE_TWIN_ONLY ? 1 : 0;
        if ((attention_only && OP_CASES[i].op != &OP_ATTENTION &&
             OP_CASES[i].op != &OP_ATTN_ROPE) ||
            (matmuls && OP_CASES[i].op != &OP_MATMUL && OP_CASES[i].op != &OP_MATMUL_ACC) ||
            !(model ? rows_model : rows_small))
            continue;
        op_case_check_twin(&OP_CASES[i], i, dut, cpu, test_tag);
        printf("# row %zu%s: %.2f s (device under test, both runs: %.2f s; cpu: %.2f s)\n", i,
               model ? " (model size)" : "", twin_seconds_all, twin_seconds_dut, twin_seconds_cpu);
        seconds[model] += twin_seconds_all, counted[model]++;
    }
    if (rows_ops) {
        print_error_table();
        printf("# %d rows below model size in %.1f s, %d model-sized rows in %.1f s%s\n",
               counted[0], seconds[0], counted[1], seconds[1], test_tag);
    }
    if (!attention_only && !matmuls && (rows_small || !rows_ops)) {
        const double t0 = time_now_s();
        test_conversions(dut, test_tag);
        printf("# the conversions in %.1f s\n", time_now_s() - t0);
    }
    dut->destroy(dut), cpu->destroy(cpu);
    TEST_EXIT();
}

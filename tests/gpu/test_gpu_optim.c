// test_gpu_optim.c: the multi-tensor optimizer ops (backend.h mt_sumsq_add, mt_adamw;
// compute/multi_tensor.h) on the CUDA backend against the CPU backend's per-piece ops, the
// optimizer's reference path, on a table of pieces with the edge sizes of the block split
// (empty, 1, a block's span -1 / +1, several spans) and a GPT-2-sized mix, fp32 and bf16
// gradients, fp32 and bf16 parameters. Needs a GPU; tests/gpu/run.sh runs it (ops part).
//   build/tests/gpu/test_gpu_optim              on CUDA
//   build/tests/gpu/test_gpu_optim --self-test  a 1-thread CPU backend in CUDA's place
//
// Tolerances, and why:
//   norm (sum of squares in double): relative 1e-10. Both sum the same exact doubles (a
//     float squared is exact in double) in different fixed orders; n <= 2^24 terms of one
//     sign bound the relative difference by about n * 2^-53 ~ 2e-9 in the worst case and
//     ~1e-12 in practice. The device's rerun must give the same bits (deterministic).
//   AdamW m, v, p: relative 1e-6 (p: of |p| + lr). nvcc contracts a*b + c into FMAs where
//     the CPU rounds the product first, so m and v differ by an ulp or so (2^-23 ~ 1.2e-7)
//     and the update by a few; the division and sqrtf are IEEE-rounded on both.
//   bf16 parameters: the rounding of p, equal or one bf16 ulp apart (where p's fp32 value
//     differs across a rounding boundary).
#include "../testlib.h"
#include "base/bf16.h"
#include "compute/backend.h"
#include "compute/cuda_api.h"

#include <math.h>
#include <string.h>

static backend *dut, *cpu;
static char test_tag[32];

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 17;
}
static void fill(float *x, size_t n, uint64_t *seed, float lo, float hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)((double)rng_next(seed) / (double)(1ULL << 47));
}
static void *to_dut(const void *h, size_t bytes) {
    void *d = dut->alloc(dut, bytes ? bytes : 4);
    if (bytes) dut->copy_to_device(dut, d, h, bytes);
    return d;
}
static void *from_dut(const void *d, size_t bytes) {
    void *h = xmalloc(bytes ? bytes : 4);
    if (bytes) dut->copy_to_host(dut, h, d, bytes);
    return h;
}

// Largest |a - b| / (|b| + floor) over n, and where.
static double worst_rel(const float *a, const float *b, size_t n, float floor, size_t *at) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + floor);
        if (d > w || d != d) w = d, *at = i;
    }
    return w;
}

static void run_case(const char *name, const size_t *sizes, int K, tri_dtype gdt, int bf16_params) {
    size_t total = 0, widest = 1;
    for (int i = 0; i < K; i++) total += sizes[i], widest = sizes[i] > widest ? sizes[i] : widest;
    uint64_t seed = 1234 + (uint64_t)K + (uint64_t)gdt * 3 + (uint64_t)bf16_params;
    float *p = xmalloc(total * 4), *m = xmalloc(total * 4), *v = xmalloc(total * 4);
    float *g = xmalloc(total * 4), *wide = xmalloc(widest * 4);
    uint16_t *g16 = xmalloc(total * 2 + 2), *p16 = xmalloc(total * 2 + 2);
    fill(p, total, &seed, -1, 1), fill(m, total, &seed, -0.01f, 0.01f);
    fill(v, total, &seed, 0, 1e-4f), fill(g, total, &seed, -0.05f, 0.05f);
    for (size_t i = 0; i < total; i++) g16[i] = bf16_from_f32(g[i]), p16[i] = 0;
    const size_t gbytes = total * (gdt == DTYPE_BF16 ? 2 : 4);
    float *dp = to_dut(p, total * 4), *dm = to_dut(m, total * 4), *dv = to_dut(v, total * 4);
    char *dg = to_dut(gdt == DTYPE_BF16 ? (void *)g16 : (void *)g, gbytes);
    uint16_t *dp16 = to_dut(p16, total * 2);
    mt_tensor *t = xcalloc((size_t)K, sizeof *t);
    size_t off = 0;
    for (int i = 0; i < K; i++) {
        t[i] = (mt_tensor){.param = dp + off,
                           .param16 = bf16_params ? dp16 + off : NULL,
                           .grad = dg + off * (gdt == DTYPE_BF16 ? 2 : 4),
                           .m = dm + off,
                           .v = dv + off,
                           .n = sizes[i],
                           .decay = i % 3 != 1,
                           .in_norm = i % 5 != 4};
        off += sizes[i];
    }
    mt_table tab = {.n_tensors = K, .tensors = t, .grad_dtype = gdt};
    tab.adam_start = xcalloc((size_t)K + 1, 4), tab.norm_start = xcalloc((size_t)K + 1, 4);
    TRI_ASSERT(mt_prefix_build(tab.adam_start, t, K, 0, &tab.adam_blocks) == TRI_OK);
    TRI_ASSERT(mt_prefix_build(tab.norm_start, t, K, 1, &tab.norm_blocks) == TRI_OK);
    // The device copy, as the optimizer uploads it (a CPU backend under test reads the host's).
    tab.dev_tensors = to_dut(t, (size_t)K * sizeof *t);
    tab.dev_adam_start = to_dut(tab.adam_start, ((size_t)K + 1) * 4);
    tab.dev_norm_start = to_dut(tab.norm_start, ((size_t)K + 1) * 4);
    tab.dev_partial = dut->alloc(dut, (tab.adam_blocks + 1) * sizeof(double));
    if (gdt == DTYPE_BF16) tab.grad_wide = dut->alloc(dut, widest * 4);
    double *dacc = dut->alloc(dut, sizeof(double));
    double norm_dut[2];
    for (int r = 0; r < 2; r++) { // twice: the same bits
        dut->memset_zero(dut, dacc, sizeof(double));
        dut->mt_sumsq_add(dut, dacc, &tab);
        dut->copy_to_host(dut, &norm_dut[r], dacc, sizeof(double));
    }
    const adamw_step s = {.lr = 6e-4f,
                          .beta1 = 0.9f,
                          .beta2 = 0.95f,
                          .eps = 1e-8f,
                          .weight_decay = 0.1f,
                          .grad_scale = 0.8f,
                          .t = 7};
    dut->mt_adamw(dut, &tab, &s);
    // The reference: the CPU backend's per-piece ops, the optimizer's previous loop.
    double norm_ref = 0;
    off = 0;
    for (int i = 0; i < K; i++) {
        const float *gi = g + off;
        if (gdt == DTYPE_BF16) {
            cpu->from_bf16(cpu, wide, g16 + off, sizes[i]);
            gi = wide;
        }
        if (t[i].in_norm) cpu->sumsq_add(cpu, &norm_ref, gi, sizes[i]);
        adamw_step si = s;
        si.weight_decay = t[i].decay ? s.weight_decay : 0.0f;
        cpu->adamw(cpu, p + off, gi, m + off, v + off, sizes[i], &si,
                   bf16_params ? p16 + off : NULL);
        off += sizes[i];
    }
    float *hp = from_dut(dp, total * 4), *hm = from_dut(dm, total * 4),
          *hv = from_dut(dv, total * 4);
    uint16_t *hp16 = from_dut(dp16, total * 2);
    char row[160];
    snprintf(row, sizeof row, "%s grads %s%s%s", name, dtype_name(gdt),
             bf16_params ? ", bf16 params" : "", test_tag);
    const double nrel = fabs(norm_dut[0] - norm_ref) / (norm_ref > 0 ? norm_ref : 1);
    TEST_CHECK(nrel <= 1e-10, "mt_sumsq_add vs per-piece cpu", "%s: %.17g vs %.17g (rel %.3g)", row,
               norm_dut[0], norm_ref, nrel);
    TEST_CHECK(!memcmp(&norm_dut[0], &norm_dut[1], sizeof(double)), "mt_sumsq_add rerun bitwise",
               "%s: %.17g then %.17g", row, norm_dut[0], norm_dut[1]);
    size_t at_m = 0, at_v = 0, at_p = 0;
    const double wm = worst_rel(hm, m, total, 1e-30f, &at_m);
    const double wv = worst_rel(hv, v, total, 1e-30f, &at_v);
    const double wp = worst_rel(hp, p, total, s.lr, &at_p);
    TEST_CHECK(wm <= 1e-6 && wv <= 1e-6 && wp <= 1e-6, "mt_adamw vs per-piece cpu",
               "%s: worst rel m %.3g at %zu, v %.3g at %zu, p %.3g at %zu", row, wm, at_m, wv, at_v,
               wp, at_p);
    if (bf16_params) {
        size_t bad = 0;
        for (size_t i = 0; i < total; i++) bad += abs((int)hp16[i] - (int)p16[i]) > 1;
        TEST_CHECK(!bad, "mt_adamw bf16 params within one bf16 ulp", "%s: %zu elements", row, bad);
    }
    printf("# %s: %d tensors, %zu elements, %u blocks; norm rel diff %.3g; adamw worst rel m %.3g "
           "v %.3g p %.3g\n",
           row, K, total, tab.adam_blocks, nrel, wm, wv, wp);
    dut->free(dut, dp), dut->free(dut, dm), dut->free(dut, dv), dut->free(dut, dg);
    dut->free(dut, dp16), dut->free(dut, (void *)tab.dev_tensors);
    dut->free(dut, (void *)tab.dev_adam_start), dut->free(dut, (void *)tab.dev_norm_start);
    dut->free(dut, tab.dev_partial), dut->free(dut, dacc);
    if (tab.grad_wide) dut->free(dut, tab.grad_wide);
    free(p), free(m), free(v), free(g), free(wide), free(g16), free(p16), free(t);
    free(tab.adam_start), free(tab.norm_start), free(hp), free(hm), free(hv), free(hp16);
}

int main(int argc, char **argv) {
    log_init();
    int self_test = argc > 1 && !strcmp(argv[1], "--self-test");
    if (backend_cpu_create(&cpu, 1) != TRI_OK) return 1;
    if (self_test) {
        if (backend_cpu_create(&dut, 1) != TRI_OK) return 1;
        snprintf(test_tag, sizeof test_tag, " (cpu 1 thread)");
    } else {
        int device = -1;
        if (cuda_device_count() <= 0 || cuda_device_select(0, &device) != TRI_OK ||
            backend_cuda_create(&dut, device) != TRI_OK) {
            printf("FAIL test_gpu_optim: no usable CUDA device (this test needs a GPU; "
                   "--self-test runs it on the CPU)\n");
            return 1;
        }
        snprintf(test_tag, sizeof test_tag, " (cuda)");
    }
    static const size_t edges[] = {0,      1,  65535, 65536, 65537,        0, 131072, 3,
                                   200000, 17, 0,     1000,  65536 * 3 + 5};
    // GPT-2 124M's pieces of one layer at tp1 (ln, qkv, proj, ln, fc, proj, weights and biases)
    // and no embedding: 11 tensors, ~7.1M elements.
    static const size_t layer[] = {768, 768, 2304 * 768, 2304, 768 * 768, 768,
                                   768, 768, 3072 * 768, 3072, 768 * 3072};
    for (int gb = 0; gb < 2; gb++)
        for (int pb = 0; pb < 2; pb++) {
            const tri_dtype gdt = gb ? DTYPE_BF16 : DTYPE_FP32;
            run_case("edges", edges, (int)(sizeof edges / sizeof edges[0]), gdt, pb);
            run_case("gpt2 layer", layer, (int)(sizeof layer / sizeof layer[0]), gdt, pb);
        }
    dut->destroy(dut), cpu->destroy(cpu);
    TEST_EXIT();
}

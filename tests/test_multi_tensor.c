// test_multi_tensor.c: the multi-tensor optimizer table (compute/multi_tensor.h) and the CPU
// backend's multi-tensor ops.
//   - the prefix tables: over seeded tables of pieces (empty ones, one element, a block's
//     span -1 / exactly / +1, several spans), every block maps to a tensor that owns it and
//     every element of every tensor is covered by exactly one block, in order; the norm's
//     table gives the tensors outside the norm no block;
//   - the CPU's mt_sumsq_add and mt_adamw give the bits of the per-piece ops in order (the
//     optimizer's previous path), fp32 and bf16 gradients, with and without bf16 params.
#include "base/bf16.h"
#include "compute/backend.h"
#include "testlib.h"

#include <string.h>

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 17;
}

// Checks one prefix table of `t` (norm: only in_norm tensors own blocks); returns 1 when
// every element is covered exactly once, and describes the first defect in `why`.
static int check_cover(const mt_tensor *t, int count, int norm, char *why, size_t nwhy) {
    uint32_t *start = xcalloc((size_t)count + 1, sizeof *start), total = 0;
    int ok = mt_prefix_build(start, t, count, norm, &total) == TRI_OK;
    uint64_t *next = xcalloc((size_t)count ? (size_t)count : 1, sizeof *next); // next element due
    uint64_t want = 0;
    for (int i = 0; i < count; i++)
        if (!norm || t[i].in_norm) want += mt_blocks_of(t[i].n);
    if (ok && total != want) {
        snprintf(why, nwhy, "total %u blocks, want %llu", total, (unsigned long long)want);
        ok = 0;
    }
    for (uint32_t b = 0; ok && b < total; b++) {
        const int i = mt_block_tensor(start, count, b);
        uint64_t lo, hi;
        if (i < 0 || i >= count || start[i] > b || b >= start[i + 1]) {
            snprintf(why, nwhy, "block %u -> tensor %d outside its blocks", b, i);
            ok = 0;
            break;
        }
        mt_block_range(b, start[i], t[i].n, &lo, &hi);
        if (lo != next[i] || hi <= lo || hi > t[i].n || hi - lo > MT_SPAN) {
            snprintf(why, nwhy, "block %u of tensor %d (n %llu): [%llu, %llu), want from %llu", b,
                     i, (unsigned long long)t[i].n, (unsigned long long)lo, (unsigned long long)hi,
                     (unsigned long long)next[i]);
            ok = 0;
            break;
        }
        next[i] = hi;
    }
    for (int i = 0; ok && i < count; i++) {
        const uint64_t due = (!norm || t[i].in_norm) ? t[i].n : 0;
        if (next[i] != due) {
            snprintf(why, nwhy, "tensor %d: covered up to %llu of %llu", i,
                     (unsigned long long)next[i], (unsigned long long)due);
            ok = 0;
        }
    }
    free(start);
    free(next);
    return ok;
}

static void test_cover(void) {
    static const uint64_t edges[] = {0,           1,           MT_SPAN - 1,     MT_SPAN,
                                     MT_SPAN + 1, 2 * MT_SPAN, 3 * MT_SPAN + 7, 0};
    const int n_edges = (int)(sizeof edges / sizeof edges[0]);
    int cases = 0, bad = 0;
    char why[256] = "";
    uint64_t seed = 17;
    for (int c = 0; c < 300; c++) {
        const int count = 1 + (int)(rng_next(&seed) % 40);
        mt_tensor *t = xcalloc((size_t)count, sizeof *t);
        for (int i = 0; i < count; i++) {
            const uint64_t r = rng_next(&seed);
            t[i].n = r % 3 == 0 ? edges[rng_next(&seed) % (uint64_t)n_edges]
                                : rng_next(&seed) % (5 * (uint64_t)MT_SPAN);
            t[i].in_norm = (int)(rng_next(&seed) % 4 != 0);
        }
        if (c == 0) // all empty
            for (int i = 0; i < count; i++) t[i].n = 0;
        for (int norm = 0; norm < 2; norm++, cases++)
            if (!check_cover(t, count, norm, why, sizeof why)) bad++;
        free(t);
    }
    // The edge sizes in order, with empty tensors first, between and last.
    mt_tensor e[sizeof edges / sizeof edges[0]];
    memset(e, 0, sizeof e);
    for (int i = 0; i < n_edges; i++) e[i].n = edges[i], e[i].in_norm = i % 2;
    for (int norm = 0; norm < 2; norm++, cases++)
        if (!check_cover(e, n_edges, norm, why, sizeof why)) bad++;
    TEST_CHECK(!bad, "mt_prefix_every_element_once", "%d of %d tables wrong; first: %s", bad, cases,
               why);
    uint32_t start[2], total = 1;
    mt_tensor one = {.n = 0};
    TEST_CHECK(mt_prefix_build(start, &one, 1, 0, &total) == TRI_OK && total == 0 && start[1] == 0,
               "mt_prefix_empty_table", "total %u", total);
}

// n floats in [-1, 1) (scaled), seeded.
static void fill(float *x, size_t n, uint64_t *seed, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (float)((double)rng_next(seed) / (double)(1ULL << 47) * 2.0 - 1.0);
}

// The CPU's multi-tensor ops against its per-piece ops in order, bit for bit.
static void test_cpu_bitwise(tri_dtype gdt, int bf16_params) {
    backend *b = NULL;
    TRI_ASSERT(backend_cpu_create(&b, 2) == TRI_OK);
    static const size_t sizes[] = {0, 1, 17, MT_SPAN - 1, MT_SPAN + 3, 1000, 2 * MT_SPAN + 5};
    enum { K = sizeof sizes / sizeof sizes[0] };
    size_t total = 0, widest = 1;
    for (int i = 0; i < K; i++) total += sizes[i], widest = sizes[i] > widest ? sizes[i] : widest;
    // Two copies of the state: [0] for the multi-tensor op, [1] for the per-piece one.
    float *p[2], *m[2], *v[2], *g32 = xmalloc(total * sizeof(float)), *wide = xmalloc(widest * 4);
    uint16_t *p16[2], *g16 = xmalloc(total * sizeof(uint16_t));
    uint64_t seed = 99 + (uint64_t)gdt * 7 + (uint64_t)bf16_params;
    fill(g32, total, &seed, 0.1f);
    for (size_t i = 0; i < total; i++) g16[i] = bf16_from_f32(g32[i]);
    for (int c = 0; c < 2; c++) {
        p[c] = xmalloc(total * 4), m[c] = xmalloc(total * 4), v[c] = xmalloc(total * 4);
        p16[c] = xmalloc(total * 2);
        seed = 5;
        fill(p[c], total, &seed, 1.0f);
        fill(m[c], total, &seed, 0.01f);
        fill(v[c], total, &seed, 0.001f);
        for (size_t i = 0; i < total; i++) v[c][i] = v[c][i] < 0 ? -v[c][i] : v[c][i];
    }
    mt_tensor t[K];
    mt_table tab = {.n_tensors = K,
                    .tensors = t,
                    .grad_dtype = gdt,
                    .grad_wide = gdt == DTYPE_BF16 ? wide : NULL};
    size_t off = 0;
    for (int i = 0; i < K; i++) {
        t[i] = (mt_tensor){.param = p[0] + off,
                           .param16 = bf16_params ? p16[0] + off : NULL,
                           .grad = gdt == DTYPE_BF16 ? (const void *)(g16 + off) : g32 + off,
                           .m = m[0] + off,
                           .v = v[0] + off,
                           .n = sizes[i],
                           .decay = i % 2,
                           .in_norm = i != 2};
        off += sizes[i];
    }
    double acc_mt = 0.25, acc_ref = 0.25; // += semantics
    b->mt_sumsq_add(b, &acc_mt, &tab);
    const adamw_step s = {.lr = 1e-3f,
                          .beta1 = 0.9f,
                          .beta2 = 0.95f,
                          .eps = 1e-8f,
                          .weight_decay = 0.1f,
                          .grad_scale = 0.5f,
                          .t = 3};
    b->mt_adamw(b, &tab, &s);
    off = 0;
    for (int i = 0; i < K; i++) { // the optimizer's previous loop
        const float *g = g32 + off;
        if (gdt == DTYPE_BF16) {
            b->from_bf16(b, wide, g16 + off, sizes[i]);
            g = wide;
        }
        if (t[i].in_norm) b->sumsq_add(b, &acc_ref, g, sizes[i]);
        adamw_step si = s;
        si.weight_decay = t[i].decay ? s.weight_decay : 0.0f;
        if (gdt == DTYPE_BF16) b->from_bf16(b, wide, g16 + off, sizes[i]);
        b->adamw(b, p[1] + off, g, m[1] + off, v[1] + off, sizes[i], &si,
                 bf16_params ? p16[1] + off : NULL);
        off += sizes[i];
    }
    const int same = !memcmp(p[0], p[1], total * 4) && !memcmp(m[0], m[1], total * 4) &&
                     !memcmp(v[0], v[1], total * 4) &&
                     (!bf16_params || !memcmp(p16[0], p16[1], total * 2));
    char name[96];
    snprintf(name, sizeof name, "cpu_mt_sumsq_bitwise_%s_grads%s", dtype_name(gdt),
             bf16_params ? "_bf16_params" : "");
    TEST_CHECK(!memcmp(&acc_mt, &acc_ref, sizeof acc_mt), name, "%.17g vs per piece %.17g", acc_mt,
               acc_ref);
    snprintf(name, sizeof name, "cpu_mt_adamw_bitwise_%s_grads%s", dtype_name(gdt),
             bf16_params ? "_bf16_params" : "");
    TEST_CHECK(same, name, "the multi-tensor AdamW differs from the per-piece one");
    for (int c = 0; c < 2; c++) free(p[c]), free(m[c]), free(v[c]), free(p16[c]);
    free(g32), free(g16), free(wide);
    b->destroy(b);
}

int main(void) {
    test_cover();
    test_cpu_bitwise(DTYPE_FP32, 0);
    test_cpu_bitwise(DTYPE_BF16, 1);
    test_cpu_bitwise(DTYPE_FP32, 1);
    TEST_EXIT();
}

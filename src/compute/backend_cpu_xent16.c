// backend_cpu_xent16.c: the CPU backend's entries of the fused bf16 classifier (backend.h
// xent_stats16, xent_rescale, xent_bwd16). The model uses them only on a backend with bf16
// outputs (the CPU's fp32 path never does, unless a test asks: TRIDENT_TEST_CPU_BF16_OUT);
// they are the references of the CUDA kernels in tests/gpu/test_gpu_ops: formula for formula
// xent_max, xent_sumexp and xent_bwd of backend_cpu.c on the exactly widened logits, the
// maximum first and then the sums (no online rescaling: the same value up to rounding).
#include "compute/backend_cpu_internal.h"

#include "base/bf16.h"

#include <math.h>

#define XENT16_CHUNK 512 // columns per float partial sum, as backend_cpu.c's XENT_CHUNK

static inline int real_cols(int Vp_local, int vocab_start, int V_valid) {
    const int n = V_valid - vocab_start;
    return n < 0 ? 0 : n > Vp_local ? Vp_local : n;
}

static inline int threads_of(backend *b) { return ((cpu_ctx *)b->ctx)->threads; }

void cpu_xent_stats16(backend *b, float *rowmax, float *sumexp, float *target_logit,
                      const uint16_t *logits16, const int *targets, int N, int Vp_local,
                      int vocab_start, int V_valid) {
    const int nreal = real_cols(Vp_local, vocab_start, V_valid);
#pragma omp parallel for schedule(static) num_threads(threads_of(b))
    for (int n = 0; n < N; n++) {
        const uint16_t *restrict row = logits16 + (size_t)n * Vp_local;
        float m = -INFINITY;
        for (int c = 0; c < nreal; c++) {
            const float x = bf16_to_f32(row[c]);
            m = x > m ? x : m;
        }
        double total = 0.0;
        for (int c0 = 0; c0 < nreal; c0 += XENT16_CHUNK) {
            const int c1 = c0 + XENT16_CHUNK < nreal ? c0 + XENT16_CHUNK : nreal;
            float s = 0.0f;
            for (int c = c0; c < c1; c++) s += cpu_expf(bf16_to_f32(row[c]) - m);
            total += s;
        }
        rowmax[n] = m;
        sumexp[n] = (float)total;
        const int local = targets[n] - vocab_start;
        target_logit[n] = local >= 0 && local < nreal ? bf16_to_f32(row[local]) : 0.0f;
    }
}

void cpu_xent_rescale(backend *b, float *sumexp, const float *rowmax_local, const float *rowmax_all,
                      int N) {
    (void)b; // N exps: not worth a parallel region
    for (int n = 0; n < N; n++)
        sumexp[n] = sumexp[n] == 0.0f ? 0.0f : sumexp[n] * expf(rowmax_local[n] - rowmax_all[n]);
}

void cpu_xent_bwd16(backend *b, uint16_t *logits16, const float *rowmax, const float *sumexp,
                    const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                    int V_valid) {
    const int nreal = real_cols(Vp_local, vocab_start, V_valid);
#pragma omp parallel for schedule(static) num_threads(threads_of(b))
    for (int n = 0; n < N; n++) {
        uint16_t *restrict row = logits16 + (size_t)n * Vp_local;
        const float m = rowmax[n], scale = dloss / sumexp[n];
        const int local = targets[n] - vocab_start;
        for (int c = 0; c < nreal; c++) {
            float g = cpu_expf(bf16_to_f32(row[c]) - m) * scale;
            if (c == local) g -= dloss;
            row[c] = bf16_from_f32(g);
        }
        for (int c = nreal; c < Vp_local; c++) row[c] = 0; // +0.0 in bf16
    }
}

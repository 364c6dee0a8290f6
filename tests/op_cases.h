// op_cases.h: every op case of the compute backend, defined once (ggml's test-backend-ops).
// OP_CASES below is the table (op, shape, operand dtype, how gradients are checked); the op
// families of tests/op_families.h say, for each op, which tensors a case has, how to run it
// on a backend, what its double-precision reference is, and which of the tolerances
// justified here each tensor takes, against the reference and against the CPU backend.
// tests/test_ops.c runs every row on the CPU backend against the reference;
// tests/gpu/test_gpu_ops.c runs the same rows on CUDA against the CPU backend (both through
// tests/op_harness.h). A new shape is one row; a new op is one family and its rows.
//
// Tolerances: max |got - ref| / max |ref| per tensor (ref: the reference, or the CPU's values).
// Float keeps ~6e-8 relative per rounding, so:
//   exact            xent's rowmax against the reference: a maximum of floats is one of them.
//   TOL_FEW 1e-6     ops of one or two roundings per element (a residual add, a scale, a
//                    lookup, a maximum against another backend's, AdamW against another
//                    backend's).
//   TOL_CHAIN 1e-5   ops that chain up to a few dozen roundings per element (LayerNorm, GELU
//                    with cpu_expf's 2 ulp, softmax, the reductions of a row or a column),
//                    also against the analytic double gradients, and every fp32 op against
//                    another backend that sums in a different order (a sum of K terms moves
//                    by ~sqrt(K) roundings; the shapes here keep that two orders below). Two
//                    orders of margin, while a wrong index or formula is O(1) off.
//   matmul forward   max |got - ref| <= 1e-5 * sqrt(K) * max |inp| * max |w|: a float dot
//                    product of K terms accumulates rounding like a random walk.
//   TOL_LONG_SUM 1e-4  a bias gradient summed over more than 4096 rows (the model-sized
//                    matmuls, N = 16K-64K): the CPU adds each column's rows in order, so its
//                    error grows as sqrt(N) roundings of the partial sums; 6.5e-6 of the
//                    largest against the double reference at 64K rows (measured), where
//                    TOL_CHAIN would keep no margin. Still four orders below a wrong index.
//   TOL_FD 1e-4      gradients against finite differences (op_harness.h): the double FD with step 1e-4 * max(1, |x|) has
//                    truncation error ~1e-8 and cancellation ~1e-12; the rest is the
//                    backend's float rounding (~1e-6).
//   TOL_BF16_TC 1e-2 bf16 attention on CUDA against the CPU: CUDA rounds P, dO and dS to bf16
//                    for the tensor cores (2^-9 per element; sums of T such terms average
//                    them). The CPU widens bf16 operands exactly, so against the reference bf16
//                    cases keep their fp32 tolerances (a product of two bf16 values is exact in
//                    fp32).
//   sums in double   sumsq 1e-12 against the long double sum (1e-10 against the CPU: another
//                    order of n double additions), loss_sum 1e-12.
//   AdamW            the parameter change 2e-5 of its largest: p's float rounding (6e-8 per
//                    step of |p| <= 1) against a change of ~lr = 1e-2 per step.
//   bf16 outputs     one unit in the last place (a float one ulp apart can round either way).
#pragma once
#include "op_harness.h"

#define TOL_FEW 1e-6
#define TOL_CHAIN 1e-5
#define TOL_BF16_TC 1e-2
#define TOL_LONG_SUM 1e-4
#define LONG_SUM_ROWS 4096 // a bias gradient over more rows takes TOL_LONG_SUM

#define CASE_BIAS (1u << 0)    // matmul: with a bias (and its gradient)
#define CASE_GELU (1u << 1)    // matmul: the MLP's GELU on the forward output and in the backward
#define CASE_POS (1u << 2)     // embedding: positions added (and their gradient)
#define CASE_PARAM16 (1u << 3) // adamw: the bf16 parameters written too
// Model-sized: against the CPU backend only (tests/gpu/test_gpu_ops, and its --self-test),
// never against the double references of tests/test_ops.c and test_ops_attn.c, whose cost
// (T^2 HS per head in double, on every backend of those tests) make test cannot afford.
#define CASE_TWIN_ONLY (1u << 4)

#include "op_families.h"
#include "op_families_optim.h"
#include "op_families_xent16.h"
#include "op_families_llama.h"

// ---------------------------------------------------------------------------------------
// The table

#define F32 DTYPE_FP32
#define BF16 DTYPE_BF16
static const op_case OP_CASES[] = {
    // matmul {N, IC, OC, offset}: small ones against finite differences; 128 x 96 x 70 tiles
    // C over the CPU's threads (OC no multiple of 16); GPT-2's shapes; odd and misaligned
    // ones for cuBLASLt's fallbacks.
    {&OP_MATMUL, {5, 7, 6}, F32, CASE_BIAS, FD_ALL},
    {&OP_MATMUL, {5, 7, 6}, F32, 0, FD_ALL},
    {&OP_MATMUL, {128, 96, 70}, F32, CASE_BIAS, 0},
    {&OP_MATMUL, {512, 768, 2304}, F32, CASE_BIAS, 0},
    {&OP_MATMUL, {256, 3072, 768}, F32, CASE_BIAS, 0},
    {&OP_MATMUL, {300, 768, 1000}, F32, 0, 0},
    {&OP_MATMUL, {37, 29, 53}, F32, CASE_BIAS, 0},
    {&OP_MATMUL, {37, 29, 53, 1}, F32, CASE_BIAS, 0},
    {&OP_MATMUL, {64, 96, 80, 3}, F32, CASE_BIAS, 0},
    {&OP_MATMUL, {128, 96, 70}, BF16, CASE_BIAS, 0},
    {&OP_MATMUL, {512, 768, 2304}, BF16, CASE_BIAS, 0},
    {&OP_MATMUL, {256, 3072, 768}, BF16, CASE_BIAS, 0},
    {&OP_MATMUL, {300, 768, 1000}, BF16, 0, 0},
    {&OP_MATMUL, {37, 29, 53}, BF16, CASE_BIAS, 0},
    {&OP_MATMUL, {64, 96, 80, 3}, BF16, CASE_BIAS, 0},
    // the MLP's fc layer with its GELU (cuBLASLt's epilogues need OC, IC multiples of 8)
    {&OP_MATMUL, {48, 40, 56}, F32, CASE_BIAS | CASE_GELU, 0},
    {&OP_MATMUL, {512, 768, 3072}, F32, CASE_BIAS | CASE_GELU, 0},
    {&OP_MATMUL, {512, 768, 3072}, BF16, CASE_BIAS | CASE_GELU, 0},
    {&OP_MATMUL, {300, 96, 200}, BF16, CASE_GELU, 0},
    {&OP_MATMUL, {37, 29, 53}, F32, CASE_BIAS | CASE_GELU, 0},
    {&OP_MATMUL, {37, 29, 53}, BF16, CASE_BIAS | CASE_GELU, 0},
    // layernorm {N, C}, residual_layernorm {N, C}
    {&OP_LAYERNORM, {7, 10}, F32, 0, FD_ALL},
    {&OP_LAYERNORM, {4, 10}, F32, 0, FD_ALL},
    {&OP_LAYERNORM, {37, 768}, F32, 0, 0},
    {&OP_LAYERNORM, {1000, 768}, F32, 0, 0},
    {&OP_LAYERNORM, {77, 33}, F32, 0, 0},
    {&OP_RESIDUAL_LAYERNORM, {33, 40}, F32, 0, 0},
    {&OP_RESIDUAL_LAYERNORM, {1000, 768}, F32, 0, 0},
    {&OP_RESIDUAL_LAYERNORM, {77, 33}, F32, 0, 0},
    // pointwise {n}: not multiples of the vector width, so the tails run too
    {&OP_RESIDUAL, {1003}, F32, 0, 0},
    {&OP_RESIDUAL, {1000003}, F32, 0, 0},
    {&OP_GELU, {1001}, F32, 0, FD_ALL},
    {&OP_GELU, {101}, F32, 0, FD_ALL},
    {&OP_GELU, {1000003}, F32, 0, 0},
    {&OP_SCALE, {1003}, F32, 0, 0},
    {&OP_SCALE, {1000003}, F32, 0, 0},
    // attention {B, T, NH, HS}: T not a multiple of the tiles (the CPU's 64-row blocks, CUDA's
    // tiles), head sizes below their padded widths; bf16 q, k, v on CUDA's tensor cores for
    // HS a multiple of 16 up to 128, else its fp32 fallback
    {&OP_ATTENTION, {2, 7, 3, 4}, F32, 0, FD_ALL},
    {&OP_ATTENTION, {1, 64, 2, 8}, F32, 0, 600},
    {&OP_ATTENTION, {1, 150, 2, 8}, F32, 0, 600},
    {&OP_ATTENTION, {2, 37, 2, 5}, F32, 0, FD_ALL},
    {&OP_ATTENTION, {2, 256, 4, 64}, F32, 0, 0},
    {&OP_ATTENTION, {1, 100, 3, 32}, F32, 0, 0},
    {&OP_ATTENTION, {2, 77, 2, 80}, F32, 0, 0},
    {&OP_ATTENTION, {1, 130, 2, 128}, F32, 0, 0},
    {&OP_ATTENTION, {1, 70, 1, 256}, F32, 0, 0},
    {&OP_ATTENTION, {3, 19, 2, 7}, F32, 0, 0},
    {&OP_ATTENTION, {2, 19, 2, 8}, BF16, 0, 0},
    {&OP_ATTENTION, {2, 256, 4, 64}, BF16, 0, 0},
    {&OP_ATTENTION, {1, 100, 3, 64}, BF16, 0, 0},
    {&OP_ATTENTION, {2, 77, 2, 128}, BF16, 0, 0},
    {&OP_ATTENTION, {1, 130, 2, 32}, BF16, 0, 0},
    {&OP_ATTENTION, {1, 70, 1, 16}, BF16, 0, 0},
    {&OP_ATTENTION, {3, 19, 2, 7}, BF16, 0, 0},
    {&OP_ATTENTION, {1, 1, 1, 64}, BF16, 0, 0},
    // embedding {B, T, C, V, ranks, rank}: the vocabulary split over `ranks`; tokens repeat
    // (half of them in rows 0..3) and some fall outside the rank's rows
    {&OP_EMBEDDING, {2, 5, 20, 10, 2, 0}, F32, CASE_POS, FD_ALL},
    {&OP_EMBEDDING, {2, 5, 20, 10, 2, 0}, F32, 0, FD_ALL},
    {&OP_EMBEDDING, {2, 5, 20, 10, 2, 1}, F32, CASE_POS, FD_ALL},
    {&OP_EMBEDDING, {2, 5, 20, 10, 2, 1}, F32, 0, FD_ALL},
    {&OP_EMBEDDING, {2, 5, 6, 7, 1, 0}, F32, CASE_POS, FD_ALL},
    {&OP_EMBEDDING, {4, 64, 96, 300, 2, 0}, F32, CASE_POS, 0},
    {&OP_EMBEDDING, {4, 64, 96, 300, 2, 0}, F32, 0, 0},
    {&OP_EMBEDDING, {4, 64, 96, 300, 2, 1}, F32, CASE_POS, 0},
    {&OP_EMBEDDING, {4, 64, 96, 300, 2, 1}, F32, 0, 0},
    {&OP_EMBEDDING, {2, 33, 130, 10, 2, 0}, F32, CASE_POS, 0},
    {&OP_EMBEDDING, {2, 33, 130, 10, 2, 0}, F32, 0, 0},
    {&OP_EMBEDDING, {2, 33, 130, 10, 2, 1}, F32, CASE_POS, 0},
    {&OP_EMBEDDING, {2, 33, 130, 10, 2, 1}, F32, 0, 0},
    // xent {N, Vp_local, vocab_start, V_valid}: padded columns; a rank without real columns
    {&OP_XENT, {6, 48, 0, 37}, F32, 0, FD_ALL},
    {&OP_XENT, {6, 48, 0, 20}, F32, 0, FD_ALL},
    {&OP_XENT, {3, 11, 0, 9}, F32, 0, FD_ALL},
    {&OP_XENT, {64, 384, 0, 700}, F32, 0, 0},
    {&OP_XENT, {64, 384, 384, 700}, F32, 0, 0},
    {&OP_XENT, {16, 384, 768, 700}, F32, 0, 0},
    {&OP_XENT, {8, 50304, 0, 50257}, F32, 0, 0},
    // sumsq {n}, loss_sum {n}, adamw {n, t, steps}
    {&OP_SUMSQ, {(1 << 20) + 3}, F32, 0, 0},
    {&OP_SUMSQ, {1000003}, F32, 0, 0},
    {&OP_SUMSQ, {5}, F32, 0, 0},
    {&OP_SUMSQ, {0}, F32, 0, 0},
    {&OP_LOSS_SUM, {8192}, F32, 0, 0},
    {&OP_LOSS_SUM, {37}, F32, 0, 0},
    {&OP_ADAMW, {1003, 1, 3}, F32, 0, 0},
    {&OP_ADAMW, {100003, 1, 1}, F32, 0, 0},
    {&OP_ADAMW, {100003, 7, 1}, F32, 0, 0},
    {&OP_ADAMW, {100003, 3, 1}, F32, CASE_PARAM16, 0},
    // attention on bf16 q, k, v at every head size of CUDA's FA2 kernels (64, 80, 96, 128):
    // T past a tile boundary (64-row tiles), then at model size, T = 1024 and 2048 (issue 17),
    // against the CPU only. (Appended, so that the rows above keep their random values.)
    {&OP_ATTENTION, {2, 150, 2, 80}, BF16, 0, 0},
    {&OP_ATTENTION, {1, 200, 3, 96}, BF16, 0, 0},
    {&OP_ATTENTION, {2, 1024, 2, 64}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {2, 1024, 2, 80}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {2, 1024, 2, 96}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {2, 1024, 2, 128}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {1, 2048, 2, 64}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {1, 2048, 2, 80}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {1, 2048, 2, 96}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {1, 2048, 2, 128}, BF16, CASE_TWIN_ONLY, 0},
    // matmul_accumulate {N, IC, OC, micro_batches}: the backward over several micro-batches
    // into one dweight and dbias, small enough for the double reference
    {&OP_MATMUL_ACC, {37, 29, 53, 3}, F32, CASE_BIAS, 0},
    {&OP_MATMUL_ACC, {64, 96, 80, 2}, BF16, 0, 0},
    // Model-sized (issue 17), against the CPU only (CASE_TWIN_ONLY; tests/gpu/run.sh's
    // "model" part, where the host's staging and the CPU's GEMMs are the slow side: sizes
    // trimmed to what shows the model's paths). GPT-2 124M's fc layer with its GELU at
    // B * T = 16K tokens (8K in fp32), the weight and bias gradients reducing over those rows;
    // its projection (the forward reducing over 3072); one call reducing over 64K rows
    // (cuBLASLt's split-K kernels); the attention projection over 4 (fp32) or 2 (bf16)
    // micro-batches of 16K rows; the LM head, OC = 50304, whose dinp reduces over 50304.
    {&OP_MATMUL, {8192, 768, 3072}, F32, CASE_BIAS | CASE_GELU | CASE_TWIN_ONLY, 0},
    {&OP_MATMUL, {16384, 768, 3072}, BF16, CASE_BIAS | CASE_GELU | CASE_TWIN_ONLY, 0},
    {&OP_MATMUL, {16384, 3072, 768}, BF16, CASE_BIAS | CASE_TWIN_ONLY, 0},
    {&OP_MATMUL_ACC, {65536, 64, 96, 1}, F32, CASE_BIAS | CASE_TWIN_ONLY, 0},
    {&OP_MATMUL_ACC, {65536, 64, 96, 1}, BF16, CASE_BIAS | CASE_TWIN_ONLY, 0},
    {&OP_MATMUL_ACC, {16384, 768, 768, 4}, F32, CASE_BIAS | CASE_TWIN_ONLY, 0},
    {&OP_MATMUL_ACC, {16384, 768, 768, 2}, BF16, CASE_BIAS | CASE_TWIN_ONLY, 0},
    {&OP_MATMUL, {1024, 768, 50304}, F32, CASE_TWIN_ONLY, 0},
    {&OP_MATMUL, {1024, 768, 50304}, BF16, CASE_TWIN_ONLY, 0},
    // cross-entropy over GPT-2's vocabulary at many positions: padded (50257 real of 50304),
    // unpadded, and the second rank of tp 2 (its last 47 columns padding)
    {&OP_XENT, {512, 50304, 0, 50257}, F32, CASE_TWIN_ONLY, 0},
    {&OP_XENT, {256, 50304, 0, 50304}, F32, CASE_TWIN_ONLY, 0},
    {&OP_XENT, {256, 25152, 25152, 50257}, F32, CASE_TWIN_ONLY, 0},
    // the embedding's backward at V = 50304 over 8K tokens (half of them in rows 0..3: runs
    // of thousands), whole and vocab-parallel (rank 1 of 2, which owns none of those rows)
    {&OP_EMBEDDING, {8, 1024, 768, 50304, 1, 0}, F32, CASE_POS | CASE_TWIN_ONLY, 0},
    {&OP_EMBEDDING, {8, 1024, 768, 50304, 2, 1}, F32, CASE_TWIN_ONLY, 0},
    // the fused bf16 classifier {N, Vp_local, vocab_start, V_valid} (op_families_xent16.h):
    // xent's shapes (padding, a rank without real columns, Vp % 8 != 0: the scalar loads), rows
    // whose maximum changes late, -inf and huge logits; then GPT-2's vocabulary, whole and
    // as tp 2's second rank, against the CPU only
    {&OP_XENT16, {6, 48, 0, 37}, BF16, 0, 0},
    {&OP_XENT16, {3, 11, 0, 9}, BF16, 0, 0},
    {&OP_XENT16, {64, 384, 0, 700}, BF16, 0, 0},
    {&OP_XENT16, {64, 384, 384, 700}, BF16, 0, 0},
    {&OP_XENT16, {16, 384, 768, 700}, BF16, 0, 0},
    {&OP_XENT16, {16, 1000, 0, 997}, BF16, CASE_XENT_EXTREME, 0},
    {&OP_XENT16, {16, 1003, 0, 1003}, BF16, CASE_XENT_EXTREME, 0},
    {&OP_XENT16, {8, 50304, 0, 50257}, BF16, CASE_XENT_EXTREME, 0},
    {&OP_XENT16, {512, 50304, 0, 50257}, BF16, CASE_XENT_EXTREME | CASE_TWIN_ONLY, 0},
    {&OP_XENT16, {256, 25152, 25152, 50257}, BF16, CASE_TWIN_ONLY, 0},
    // Llama (op_families_llama.h; their finite differences are tests/test_ops_llama.c's):
    // rmsnorm and residual_rmsnorm {N, C}: C % 4 != 0 (CUDA's scalar kernels), SmolLM's 576,
    // GPT-2's 768; rope {B, T, NH, NKV, HS, theta}: HS / 2 odd or no multiple of 4 (scalar),
    // NKV in {1, NH / 2, NH}, Llama 3's theta; swiglu {N, F}: F % 4 != 0, SmolLM's 1536
    {&OP_RMSNORM, {7, 10}, F32, 0, 0},
    {&OP_RMSNORM, {77, 33}, F32, 0, 0},
    {&OP_RMSNORM, {300, 576}, F32, 0, 0},
    {&OP_RMSNORM, {1000, 768}, F32, 0, 0},
    {&OP_RESIDUAL_RMSNORM, {33, 40}, F32, 0, 0},
    {&OP_RESIDUAL_RMSNORM, {77, 33}, F32, 0, 0},
    {&OP_RESIDUAL_RMSNORM, {1000, 768}, F32, 0, 0},
    {&OP_ROPE, {2, 7, 4, 2, 6}, F32, 0, 0},
    {&OP_ROPE, {2, 19, 3, 3, 4}, F32, 0, 0},
    {&OP_ROPE, {2, 77, 8, 4, 64}, F32, 0, 0},
    {&OP_ROPE, {1, 130, 9, 3, 64}, F32, 0, 0},
    {&OP_ROPE, {1, 64, 4, 1, 128, 500000}, F32, 0, 0},
    {&OP_SWIGLU, {5, 7}, F32, 0, 0},
    {&OP_SWIGLU, {37, 13}, F32, 0, 0},
    {&OP_SWIGLU, {64, 1536}, F32, 0, 0},
    // grouped-query attention {B, T, NH, HS, NKV}: NKV 1 and NH / 2 (NH itself: the rows
    // above), fp32 (CUDA's v1 kernels), bf16 at FA2's head sizes, at 32 (the v1 tensor-core
    // kernels) and 8 (their fp32 fallback on widened operands)
    {&OP_ATTENTION, {2, 37, 4, 8, 2}, F32, 0, 0},
    {&OP_ATTENTION, {2, 77, 4, 16, 1}, F32, 0, 0},
    {&OP_ATTENTION, {1, 100, 6, 32, 3}, F32, 0, 0},
    {&OP_ATTENTION, {2, 130, 4, 64, 2}, F32, 0, 0},
    {&OP_ATTENTION, {1, 70, 4, 128, 1}, F32, 0, 0},
    {&OP_ATTENTION, {2, 150, 4, 64, 2}, BF16, 0, 0},
    {&OP_ATTENTION, {1, 200, 4, 80, 1}, BF16, 0, 0},
    {&OP_ATTENTION, {2, 77, 6, 96, 3}, BF16, 0, 0},
    {&OP_ATTENTION, {1, 130, 4, 128, 2}, BF16, 0, 0},
    {&OP_ATTENTION, {1, 100, 4, 32, 1}, BF16, 0, 0},
    {&OP_ATTENTION, {2, 19, 4, 8, 2}, BF16, 0, 0},
    // attention with RoPE {B, T, NH, HS, NKV, theta}, unrotated qkv: on CUDA fused into every
    // attention kernel (backend.attn_rope), elsewhere the model's rope_fwd / rope_bwd around the
    // attention: fp32 (CUDA's fp32 kernels, HS / 2 not a multiple of 32: HS 48), bf16 at FA2's
    // 64 (GQA) and 128 (Llama 3's theta), 80, the v1 tensor-core kernels' 32 and their fp32
    // fallback's 8
    {&OP_ATTN_ROPE, {2, 37, 4, 8, 2}, F32, 0, 0},
    {&OP_ATTN_ROPE, {1, 100, 6, 48, 3}, F32, 0, 0},
    {&OP_ATTN_ROPE, {2, 130, 4, 64, 2, 500000}, F32, 0, 0},
    {&OP_ATTN_ROPE, {2, 150, 4, 64, 2}, BF16, 0, 0},
    {&OP_ATTN_ROPE, {1, 200, 4, 80, 1}, BF16, 0, 0},
    {&OP_ATTN_ROPE, {1, 130, 4, 128, 2, 500000}, BF16, 0, 0},
    {&OP_ATTN_ROPE, {1, 100, 4, 32, 1}, BF16, 0, 0},
    {&OP_ATTN_ROPE, {2, 19, 4, 8, 2}, BF16, 0, 0},
    // Llama 3 8B's shapes, against the CPU only: C 4096 (and T 2048 rows), 32 q and 8 kv heads
    // of 128, F 14336 (512 rows: the host's double copies of 2F-wide rows are the cost)
    {&OP_RMSNORM, {2048, 4096}, F32, CASE_TWIN_ONLY, 0},
    {&OP_RESIDUAL_RMSNORM, {2048, 4096}, F32, CASE_TWIN_ONLY, 0},
    {&OP_ROPE, {1, 2048, 32, 8, 128, 500000}, F32, CASE_TWIN_ONLY, 0},
    {&OP_SWIGLU, {512, 14336}, F32, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {1, 2048, 4, 128, 1}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {1, 2048, 8, 128, 2}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTENTION, {1, 1024, 4, 128, 2}, F32, CASE_TWIN_ONLY, 0},
    // attention with RoPE at Llama 3 8B's heads (a tp 4 rank's 8 q and 2 kv heads of 128,
    // theta 5e5) and SmolLM-135M's (9 q and 3 kv heads of 64)
    {&OP_ATTN_ROPE, {1, 2048, 8, 128, 2, 500000}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTN_ROPE, {2, 1024, 9, 64, 3}, BF16, CASE_TWIN_ONLY, 0},
    {&OP_ATTN_ROPE, {1, 1024, 4, 128, 1, 500000}, F32, CASE_TWIN_ONLY, 0},
};
#undef F32
#undef BF16
#define N_OP_CASES (sizeof OP_CASES / sizeof OP_CASES[0])

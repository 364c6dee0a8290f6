// backend_cuda_ops.cu: the CUDA backend's ops other than the matmuls and attention:
// LayerNorm, pointwise, embeddings, the vocab-parallel cross-entropy, the loss sum, scale
// (sumsq and AdamW: backend_cuda_optim.cu).
// The semantics are backend.h's, formula for formula those of src/compute/backend_cpu.c.
//
// Determinism (backend_cuda.cu): every reduction has a fixed shape that depends only on the
// problem size, never on the device or on timing, and no float is accumulated atomically:
//   LayerNorm dweight/dbias: partial column sums over fixed chunks of LN_CHUNK rows, summed
//     chunk by chunk in order by a second kernel;
//   embedding backward: the tokens are sorted by vocabulary row with CUB's stable radix sort,
//     and one thread per (row, column) adds that row's tokens in their original order, the
//     order in which the CPU backend adds them; dwpe sums the batch in order;
//   cross-entropy and the loss sum: block-wide trees in a fixed order (block_reduce,
//   backend_cuda_internal.cuh).
#include "backend_cuda_internal.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <math.h>

#define LN_ROWS_PER_BLOCK 8    // one warp per row
#define LN_CHUNK CUDA_LN_CHUNK // rows per partial column sum (compute/cuda_workspace.h)
#define XENT_THREADS 512
#define EMB_COLS 128 // columns per block of the embedding backward

// gelu_tanh(x) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), as in backend_cpu.c.
#define GELU_K0 0.7978845608028654f
#define GELU_K1 0.044715f
#define LN_EPS 1e-5f

// ---------------------------------------------------------------------------------------
// Helpers of the matmul (backend_cuda_matmul.cu)

__global__ void add_inplace_kernel(float *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] += src[i];
}

void cuda_add_inplace(cuda_ctx *x, float *dst, const float *src, size_t n) {
    if (n) LAUNCH_N(add_inplace_kernel, x, n, dst, src, n);
}

__global__ void broadcast_rows_kernel(float *out, const float *bias, size_t n, int OC) {
    GRID_STRIDE(i, n) out[i] = bias[i % (size_t)OC];
}

void cuda_broadcast_rows(cuda_ctx *x, float *out, const float *bias, int N, int OC) {
    size_t n = (size_t)N * OC;
    if (n) LAUNCH_N(broadcast_rows_kernel, x, n, out, bias, n, OC);
}

// ---------------------------------------------------------------------------------------
// Column sums over rows in fixed chunks: pb (nchunks, C) = sum of dout over the chunk's rows;
// with NORM also pw (nchunks, C) = sum of dout * norm, norm = (inp - mean) * rstd. A block is
// 32 columns x 8 row lanes; the 8 lanes' sums are added in lane order. dout is fp32, or bf16
// (uint16_t) for the bf16 matmul's bias gradient.

__device__ __forceinline__ float load_f32(const float *p) { return *p; }
__device__ __forceinline__ float load_f32(const uint16_t *p) {
    return __bfloat162float(__ushort_as_bfloat16(*p));
}

template <bool NORM, typename T>
__global__ void col_partials_kernel(float *pw, float *pb, const T *dout, const float *inp,
                                    const float *mean, const float *rstd, int N, int C) {
    __shared__ float sw[8][33], sb[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    const int r0 = blockIdx.y * LN_CHUNK, r1 = min(r0 + LN_CHUNK, N);
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int r = r0 + ty; r < r1; r += 8) {
            const size_t at = (size_t)r * C + c;
            const float dy = load_f32(dout + at);
            ab += dy;
            if (NORM) aw += dy * ((inp[at] - mean[r]) * rstd[r]);
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        float w = 0.0f, bsum = 0.0f;
        for (int k = 0; k < 8; k++) {
            w += sw[k][tx];
            bsum += sb[k][tx];
        }
        pb[(size_t)blockIdx.y * C + c] = bsum;
        if (NORM) pw[(size_t)blockIdx.y * C + c] = w;
    }
}

// dweight (C) += sum over chunks of pw (when dweight), dbias (C) += sum of pb, chunk order.
__global__ void col_finish_kernel(float *dweight, float *dbias, const float *pw, const float *pb,
                                  int nchunks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float w = 0.0f, bsum = 0.0f;
    for (int k = 0; k < nchunks; k++) {
        bsum += pb[(size_t)k * C + c];
        if (dweight) w += pw[(size_t)k * C + c];
    }
    dbias[c] += bsum;
    if (dweight) dweight[c] += w;
}

// The two kernels above; inp/mean/rstd/dweight NULL for plain column sums.
template <typename T>
static void column_sums(cuda_ctx *x, float *dweight, float *dbias, const T *dout, const float *inp,
                        const float *mean, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const int nchunks = (N + LN_CHUNK - 1) / LN_CHUNK;
    const size_t part = cuda_align256((size_t)nchunks * C * sizeof(float));
    float *pb = (float *)cuda_scratch(x, cuda_ws_column_sums((size_t)N, (size_t)C)); // 2 parts
    float *pw = (float *)((char *)pb + part);
    dim3 grid((C + 31) / 32, nchunks), block(32, 8);
    if (dweight) {
        col_partials_kernel<true, T>
            <<<grid, block, 0, x->stream>>>(pw, pb, dout, inp, mean, rstd, N, C);
        CUDA_LAUNCH_CHECK("col_partials_kernel<true>");
    } else {
        col_partials_kernel<false, T>
            <<<grid, block, 0, x->stream>>>(NULL, pb, dout, NULL, NULL, NULL, N, C);
        CUDA_LAUNCH_CHECK("col_partials_kernel<false>");
    }
    col_finish_kernel<<<(C + 255) / 256, 256, 0, x->stream>>>(dweight, dbias, pw, pb, nchunks, C);
    CUDA_LAUNCH_CHECK("col_finish_kernel");
}

void cuda_column_sums_add(cuda_ctx *x, float *dbias, const float *dout, int N, int OC) {
    column_sums(x, NULL, dbias, dout, NULL, NULL, NULL, N, OC);
}

void cuda_column_sums_add_bf16(cuda_ctx *x, float *dbias, const uint16_t *dout, int N, int OC) {
    column_sums(x, NULL, dbias, dout, NULL, NULL, NULL, N, OC);
}

// ---------------------------------------------------------------------------------------
// LayerNorm: one warp per row; two passes over the row for the exact biased variance, as
// the CPU backend does.

// Row `row` of the LayerNorm, from its lane's partial sum of xr: the variance pass, the
// output, and the statistics (when mean and rstd are not NULL).
__device__ __forceinline__ void layernorm_row(float *yr, float *mean, float *rstd, const float *xr,
                                              float sum, const float *weight, const float *bias,
                                              int row, int lane, int C) {
    const float m = cuda_warp_sum(sum) / (float)C;
    float var = 0.0f;
    for (int i = lane; i < C; i += 32) var += (xr[i] - m) * (xr[i] - m);
    const float s = 1.0f / sqrtf(cuda_warp_sum(var) / (float)C + LN_EPS);
    for (int i = lane; i < C; i += 32) yr[i] = (xr[i] - m) * s * weight[i] + bias[i];
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

__global__ void layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *inp,
                                     const float *weight, const float *bias, int N, int C) {
    const int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *xr = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += xr[i];
    layernorm_row(out + (size_t)row * C, mean, rstd, xr, sum, weight, bias, row, lane, C);
}

void cuda_layernorm_fwd(backend *b, float *out, float *mean, float *rstd, const float *inp,
                        const float *weight, const float *bias, int N, int C) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || C <= 0) return;
    if (cuda_ln4_fwd(x, NULL, out, mean, rstd, inp, NULL, weight, bias, N, C)) return;
    layernorm_fwd_kernel<<<(N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK, 32 * LN_ROWS_PER_BLOCK,
                           0, x->stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    CUDA_LAUNCH_CHECK("layernorm_fwd_kernel");
}

// The residual add fused in: res = a + c is written and summed in the first pass; the next
// passes read it back (each lane its own elements, so its own writes).
__global__ void residual_layernorm_fwd_kernel(float *res, float *out, float *mean, float *rstd,
                                              const float *a, const float *c, const float *weight,
                                              const float *bias, int N, int C) {
    const int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const size_t at = (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) {
        const float r = a[at + i] + c[at + i];
        res[at + i] = r;
        sum += r;
    }
    layernorm_row(out + at, mean, rstd, res + at, sum, weight, bias, row, lane, C);
}

void cuda_residual_layernorm_fwd(backend *b, float *res, float *out, float *mean, float *rstd,
                                 const float *a, const float *c, const float *weight,
                                 const float *bias, int N, int C) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || C <= 0) return;
    if (cuda_ln4_fwd(x, res, out, mean, rstd, a, c, weight, bias, N, C)) return;
    residual_layernorm_fwd_kernel<<<(N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK,
                                    32 * LN_ROWS_PER_BLOCK, 0, x->stream>>>(res, out, mean, rstd, a,
                                                                            c, weight, bias, N, C);
    CUDA_LAUNCH_CHECK("residual_layernorm_fwd_kernel");
}

// dinp (N, C) += s (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = dout * weight.
__global__ void layernorm_bwd_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                          const float *weight, const float *mean, const float *rstd,
                                          int N, int C) {
    const int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *xr = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int i = lane; i < C; i += 32) {
        const float norm = (xr[i] - m) * s, dnorm = dy[i] * weight[i];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * norm;
    }
    const float dnorm_mean = cuda_warp_sum(dnorm_sum) / (float)C;
    const float dnorm_norm_mean = cuda_warp_sum(dnorm_norm_sum) / (float)C;
    for (int i = lane; i < C; i += 32) {
        const float norm = (xr[i] - m) * s, dnorm = dy[i] * weight[i];
        dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

void cuda_layernorm_bwd(backend *b, float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean, const float *rstd,
                        int N, int C) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || C <= 0) return;
    // The split forms (backend.h): dinp NULL skips its kernel, dweight (and dbias) NULL the
    // column sums; each kernel writes only its own output, so the values are the joint call's.
    if (dinp && !cuda_ln4_bwd_dinp(x, dinp, dout, inp, weight, mean, rstd, N, C)) {
        layernorm_bwd_dinp_kernel<<<(N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK,
                                    32 * LN_ROWS_PER_BLOCK, 0, x->stream>>>(dinp, dout, inp, weight,
                                                                            mean, rstd, N, C);
        CUDA_LAUNCH_CHECK("layernorm_bwd_dinp_kernel");
    }
    if (dweight) column_sums(x, dweight, dbias, dout, inp, mean, rstd, N, C);
}

// ---------------------------------------------------------------------------------------
// Pointwise

__global__ void residual_kernel(float *out, const float *a, const float *c, size_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] + c[i]; // out may alias a: element-wise, no hazard
}

void cuda_residual_fwd(backend *b, float *out, const float *a, const float *c, size_t n) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (!n) return;
    const size_t done = cuda_residual4(x, out, a, c, n); // the float4s (backend_cuda_ln4.cu)
    if (done < n) LAUNCH_N(residual_kernel, x, n - done, out + done, a + done, c + done, n - done);
}

__global__ void gelu_fwd_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        const float xi = inp[i], u = GELU_K0 * (xi + GELU_K1 * xi * xi * xi);
        out[i] = xi * (1.0f / (1.0f + expf(-2.0f * u)));
    }
}

void cuda_gelu_fwd(backend *b, float *out, const float *inp, size_t n) {
    if (n) LAUNCH_N(gelu_fwd_kernel, cuda_ctx_of(b), n, out, inp, n);
}

// d/dx = s + 2 x s (1 - s) du/dx, s = sigmoid(2u); dinp may alias dout.
__global__ void gelu_bwd_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    GRID_STRIDE(i, n) {
        const float xi = inp[i], u = GELU_K0 * (xi + GELU_K1 * xi * xi * xi);
        const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * xi * xi);
        const float s = 1.0f / (1.0f + expf(-2.0f * u));
        dinp[i] = (s + 2.0f * xi * s * (1.0f - s) * du) * dout[i];
    }
}

void cuda_gelu_bwd(backend *b, float *dinp, const float *inp, const float *dout, size_t n) {
    if (n) LAUNCH_N(gelu_bwd_kernel, cuda_ctx_of(b), n, dinp, inp, dout, n);
}

__global__ void scale_kernel(float *x, float s, size_t n) { GRID_STRIDE(i, n) x[i] *= s; }

void cuda_scale(backend *b, float *x, float s, size_t n) {
    if (n) LAUNCH_N(scale_kernel, cuda_ctx_of(b), n, x, s, n);
}

// bf16 storage: __float2bfloat16_rn rounds to nearest even, as bf16.h does on the host.
__global__ void to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}
__global__ void from_bf16_kernel(float *dst, const uint16_t *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __bfloat162float(__ushort_as_bfloat16(src[i]));
}

__global__ void add_to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) {
        float sum = __bfloat162float(__ushort_as_bfloat16(dst[i])) + src[i];
        dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(sum));
    }
}

void cuda_add_to_bf16(backend *b, uint16_t *dst, const float *src, size_t n) {
    if (n) LAUNCH_N(add_to_bf16_kernel, cuda_ctx_of(b), n, dst, src, n);
}

void cuda_to_bf16(backend *b, uint16_t *dst, const float *src, size_t n) {
    if (n) LAUNCH_N(to_bf16_kernel, cuda_ctx_of(b), n, dst, src, n);
}
void cuda_from_bf16(backend *b, float *dst, const uint16_t *src, size_t n) {
    if (n) LAUNCH_N(from_bf16_kernel, cuda_ctx_of(b), n, dst, src, n);
}

float *cuda_widened_copy(cuda_ctx *x, const uint16_t *src, size_t n) {
    float *dst = (float *)cuda_widened_space(x, cuda_align256(n * sizeof(float)));
    if (n) LAUNCH_N(from_bf16_kernel, x, n, dst, src, n);
    return dst;
}

// Nothing to free: the next copy reuses the workspace after the ops enqueued so far.
void cuda_widened_free(cuda_ctx *x, float *p) { TRI_ASSERT(p == x->widened); }

// The bf16-output matmuls' fallbacks (cuBLASLt without a bf16-D algorithm): what their
// epilogues compute, from the fp32 GEMM result. pre16 may be NULL (no GELU: out16 = pre).
__global__ void round_gelu_kernel(uint16_t *out16, uint16_t *pre16, const float *pre, size_t n) {
    GRID_STRIDE(i, n) {
        const float xi = pre[i];
        float y = xi;
        if (pre16) {
            const float u = GELU_K0 * (xi + GELU_K1 * xi * xi * xi);
            y = xi * (1.0f / (1.0f + expf(-2.0f * u)));
            pre16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(xi));
        }
        out16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(y));
    }
}

void cuda_round_gelu(cuda_ctx *x, uint16_t *out16, uint16_t *pre16, const float *pre, size_t n) {
    if (n) LAUNCH_N(round_gelu_kernel, x, n, out16, pre16, pre, n);
}

// dinp16 = bf16(dinp * gelu_tanh'(pre16 widened)), or bf16(dinp) without pre16.
__global__ void gelu_bwd_round_kernel(uint16_t *dinp16, const float *dinp, const uint16_t *pre16,
                                      size_t n) {
    GRID_STRIDE(i, n) {
        float g = dinp[i];
        if (pre16) {
            const float xi = __bfloat162float(__ushort_as_bfloat16(pre16[i]));
            const float u = GELU_K0 * (xi + GELU_K1 * xi * xi * xi);
            const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * xi * xi);
            const float s = 1.0f / (1.0f + expf(-2.0f * u));
            g *= s + 2.0f * xi * s * (1.0f - s) * du;
        }
        dinp16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(g));
    }
}

void cuda_gelu_bwd_round(cuda_ctx *x, uint16_t *dinp16, const float *dinp, const uint16_t *pre16,
                         size_t n) {
    if (n) LAUNCH_N(gelu_bwd_round_kernel, x, n, dinp16, dinp, pre16, n);
}

// ---------------------------------------------------------------------------------------
// Embeddings

// One block per token row.
__global__ void embedding_fwd_kernel(float *out, const int *tokens, const float *wte,
                                     const float *wpe, int T, int C, int vocab_start, int V_local,
                                     int add_pos) {
    const int bt = blockIdx.x;
    const int local = tokens[bt] - vocab_start;
    const float *e = local >= 0 && local < V_local ? wte + (size_t)local * C : NULL;
    const float *p = add_pos ? wpe + (size_t)(bt % T) * C : NULL;
    float *y = out + (size_t)bt * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        y[i] = e && p ? e[i] + p[i] : e ? e[i] : p ? p[i] : 0.0f;
}

void cuda_embedding_fwd(backend *b, float *out, const int *tokens, const float *wte,
                        const float *wpe, int B, int T, int C, int vocab_start, int V_local,
                        int add_pos) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (B * T <= 0 || C <= 0) return;
    embedding_fwd_kernel<<<B * T, (C < OPS_THREADS ? 32 * ((C + 31) / 32) : OPS_THREADS), 0,
                           x->stream>>>(out, tokens, wte, wpe, T, C, vocab_start, V_local, add_pos);
    CUDA_LAUNCH_CHECK("embedding_fwd_kernel");
}

// Sort keys: the token's local row, or V_local (after every real row) when not owned here.
__global__ void embedding_keys_kernel(unsigned *keys, int *order, const int *tokens, int n,
                                      int vocab_start, int V_local) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int local = tokens[i] - vocab_start;
    keys[i] = local >= 0 && local < V_local ? (unsigned)local : (unsigned)V_local;
    order[i] = i;
}

// Block (i, column slice): when sorted position i starts the run of a row, adds the dout rows
// of the run (token order, the sort being stable) to that row of dwte.
__global__ void embedding_bwd_runs_kernel(float *dwte, const float *dout, const unsigned *keys,
                                          const int *order, int n, int C, unsigned V_local) {
    const int i = blockIdx.x, c = blockIdx.y * EMB_COLS + threadIdx.x;
    const unsigned row = keys[i];
    if (row >= V_local || (i > 0 && keys[i - 1] == row) || c >= C) return;
    float acc = dwte[(size_t)row * C + c];
    int j = i;
    // Four rows in flight at a time (a frequent token has thousands), added in order; the
    // keys are sorted, so keys[j + 3] == row means all four belong to the run.
    for (; j + 3 < n && keys[j + 3] == row; j += 4) {
        const float v0 = dout[(size_t)order[j] * C + c];
        const float v1 = dout[(size_t)order[j + 1] * C + c];
        const float v2 = dout[(size_t)order[j + 2] * C + c];
        const float v3 = dout[(size_t)order[j + 3] * C + c];
        acc += v0;
        acc += v1;
        acc += v2;
        acc += v3;
    }
    for (; j < n && keys[j] == row; j++) acc += dout[(size_t)order[j] * C + c];
    dwte[(size_t)row * C + c] = acc;
}

// dwpe (T, C) += sum over the batch, in batch order.
__global__ void embedding_bwd_pos_kernel(float *dwpe, const float *dout, int B, size_t TC) {
    GRID_STRIDE(i, TC) {
        float acc = dwpe[i];
        for (int bb = 0; bb < B; bb++) acc += dout[(size_t)bb * TC + i];
        dwpe[i] = acc;
    }
}

// Key bits that tell V_local rows apart (at least 1).
static int sort_end_bit(int V_local) {
    int end_bit = 1;
    while (end_bit < 32 && (1u << end_bit) <= (unsigned)V_local) end_bit++;
    return end_bit;
}

size_t cuda_embedding_sort_bytes(cuda_ctx *x, int tokens, int V_local) {
    size_t sort_bytes = 0;
    if (tokens <= 0 || V_local <= 0) return 0;
    CUDA_OP_CHECK(cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, (const unsigned *)NULL,
                                                  (unsigned *)NULL, (const int *)NULL, (int *)NULL,
                                                  tokens, 0, sort_end_bit(V_local), x->stream));
    return sort_bytes;
}

void cuda_embedding_bwd(backend *b, float *dwte, float *dwpe, const float *dout, const int *tokens,
                        int B, int T, int C, int vocab_start, int V_local) {
    cuda_ctx *x = cuda_ctx_of(b);
    const int n = B * T;
    if (n <= 0 || C <= 0) return;
    if (V_local > 0) {
        const int end_bit = sort_end_bit(V_local);
        size_t sort_bytes = cuda_embedding_sort_bytes(x, n, V_local);
        const size_t arr = cuda_align256((size_t)n * sizeof(int));
        char *ws = (char *)cuda_scratch(x, cuda_ws_embedding_bwd((size_t)n, sort_bytes));
        unsigned *keys_in = (unsigned *)ws, *keys = (unsigned *)(ws + arr);
        int *order_in = (int *)(ws + 2 * arr), *order = (int *)(ws + 3 * arr);
        embedding_keys_kernel<<<(n + OPS_THREADS - 1) / OPS_THREADS, OPS_THREADS, 0, x->stream>>>(
            keys_in, order_in, tokens, n, vocab_start, V_local);
        CUDA_LAUNCH_CHECK("embedding_keys_kernel");
        CUDA_OP_CHECK(cub::DeviceRadixSort::SortPairs(ws + 4 * arr, sort_bytes, keys_in, keys,
                                                      order_in, order, n, 0, end_bit, x->stream));
        dim3 grid(n, (C + EMB_COLS - 1) / EMB_COLS);
        embedding_bwd_runs_kernel<<<grid, EMB_COLS, 0, x->stream>>>(dwte, dout, keys, order, n, C,
                                                                    (unsigned)V_local);
        CUDA_LAUNCH_CHECK("embedding_bwd_runs_kernel");
    }
    if (dwpe) LAUNCH_N(embedding_bwd_pos_kernel, x, (size_t)T * C, dwpe, dout, B, (size_t)T * C);
}

// ---------------------------------------------------------------------------------------
// Vocab-parallel softmax cross-entropy: one block per row.

// Columns of this rank that are real vocabulary entries.
static inline int xent_real_cols(int Vp_local, int vocab_start, int V_valid) {
    int n = V_valid - vocab_start;
    return n < 0 ? 0 : n > Vp_local ? Vp_local : n;
}

__global__ void xent_max_kernel(float *rowmax, const float *logits, int Vp_local, int nreal) {
    const float *row = logits + (size_t)blockIdx.x * Vp_local;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < nreal; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_reduce(m, op_max(), -INFINITY);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

void cuda_xent_max(backend *b, float *rowmax, const float *logits, int N, int Vp_local,
                   int vocab_start, int V_valid) {
    if (N <= 0) return;
    xent_max_kernel<<<N, XENT_THREADS, 0, cuda_ctx_of(b)->stream>>>(
        rowmax, logits, Vp_local, xent_real_cols(Vp_local, vocab_start, V_valid));
    CUDA_LAUNCH_CHECK("xent_max_kernel");
}

// Each thread sums its columns in float; the block adds the threads' sums in double.
__global__ void xent_sumexp_kernel(float *sumexp, float *target_logit, const float *logits,
                                   const float *rowmax, const int *targets, int Vp_local, int nreal,
                                   int vocab_start) {
    const float *row = logits + (size_t)blockIdx.x * Vp_local;
    const float m = rowmax[blockIdx.x];
    float s = 0.0f;
    for (int c = threadIdx.x; c < nreal; c += blockDim.x) s += expf(row[c] - m);
    const double total = block_reduce((double)s, op_sum(), 0.0);
    if (threadIdx.x == 0) {
        sumexp[blockIdx.x] = (float)total;
        const int local = targets[blockIdx.x] - vocab_start;
        target_logit[blockIdx.x] = local >= 0 && local < nreal ? row[local] : 0.0f;
    }
}

void cuda_xent_sumexp(backend *b, float *sumexp, float *target_logit, const float *logits,
                      const float *rowmax, const int *targets, int N, int Vp_local, int vocab_start,
                      int V_valid) {
    if (N <= 0) return;
    xent_sumexp_kernel<<<N, XENT_THREADS, 0, cuda_ctx_of(b)->stream>>>(
        sumexp, target_logit, logits, rowmax, targets, Vp_local,
        xent_real_cols(Vp_local, vocab_start, V_valid), vocab_start);
    CUDA_LAUNCH_CHECK("xent_sumexp_kernel");
}

__global__ void xent_loss_kernel(float *losses, const float *rowmax, const float *sumexp,
                                 const float *target_logit, int N) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) losses[n] = logf(sumexp[n]) + rowmax[n] - target_logit[n];
}

void cuda_xent_loss(backend *b, float *losses, const float *rowmax, const float *sumexp,
                    const float *target_logit, int N) {
    if (N <= 0) return;
    xent_loss_kernel<<<(N + OPS_THREADS - 1) / OPS_THREADS, OPS_THREADS, 0,
                       cuda_ctx_of(b)->stream>>>(losses, rowmax, sumexp, target_logit, N);
    CUDA_LAUNCH_CHECK("xent_loss_kernel");
}

// In place: dloss * softmax over real columns, minus dloss at the target, 0 over padding.
__global__ void xent_bwd_kernel(float *logits, const float *rowmax, const float *sumexp,
                                const int *targets, float dloss, int Vp_local, int nreal,
                                int vocab_start) {
    float *row = logits + (size_t)blockIdx.x * Vp_local;
    const float m = rowmax[blockIdx.x], scale = dloss / sumexp[blockIdx.x];
    const int local = targets[blockIdx.x] - vocab_start;
    for (int c = threadIdx.x; c < Vp_local; c += blockDim.x) {
        float g = 0.0f;
        if (c < nreal) {
            g = expf(row[c] - m) * scale;
            if (c == local) g -= dloss;
        }
        row[c] = g;
    }
}

void cuda_xent_bwd(backend *b, float *logits, const float *rowmax, const float *sumexp,
                   const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                   int V_valid) {
    if (N <= 0) return;
    xent_bwd_kernel<<<N, XENT_THREADS, 0, cuda_ctx_of(b)->stream>>>(
        logits, rowmax, sumexp, targets, dloss, Vp_local,
        xent_real_cols(Vp_local, vocab_start, V_valid), vocab_start);
    CUDA_LAUNCH_CHECK("xent_bwd_kernel");
}

// ---------------------------------------------------------------------------------------
// Optimizer and reductions

// One block: each thread sums its strided losses in double, then a fixed tree; thread 0 adds
// the total to *acc. A micro-batch has a few thousand losses, so one block is enough.
__global__ void loss_sum_kernel(double *acc, const float *losses, size_t n) {
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += losses[i];
    s = block_reduce(s, op_sum(), 0.0);
    if (threadIdx.x == 0) *acc += s;
}

void cuda_loss_sum(backend *b, double *acc, const float *losses, size_t n) {
    loss_sum_kernel<<<1, OPS_THREADS, 0, cuda_ctx_of(b)->stream>>>(acc, losses, n);
    CUDA_LAUNCH_CHECK("loss_sum_kernel");
}

// backend_cuda.cu: the CUDA compute backend (DESIGN.md "Module boundaries"): memory, the
// device workspace, creation and the function table. fp32 storage, as backend.h says; the
// ops are in backend_cuda_matmul.cu (cuBLASLt), backend_cuda_attn.cu (flash-style
// attention) and backend_cuda_ops.cu (the rest). backend_cuda_internal.cuh says how streams
// and errors work.
//
// Determinism: no op uses floating-point atomics or a launch shape that depends on the
// device, so two runs on the same GPU model give bitwise identical results (cuBLASLt keeps
// its algorithm per plan, and its reductions are ordered). The reduction orders are not the
// CPU backend's, so the two agree to rounding (tests/gpu/test_gpu_ops.c measures by how
// much), not bitwise.
//
// Environment: TRIDENT_CUDA_TF32=1 runs the matmuls in TF32 on the tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32: 10-bit mantissas in the products, fp32 accumulation),
// several times faster than the default full-fp32 CUBLAS_COMPUTE_32F, at ~1e-3 relative
// error per product, so outside the fp32 tolerances of tests/gpu: a speed option for
// benchmarks and training, never the default.
#include "backend_cuda_internal.cuh"

#include <new>
#include <string.h>

#include "base/env.h"

[[noreturn]] void cuda_op_fail(const char *what, const char *stmt, const char *file, int line) {
    LOG_ERROR("the CUDA backend stops: %s failed (%s at %s:%d), and the device state is no "
              "longer usable",
              what, stmt, file, line);
    LOG_HINT("an illegal address or launch failure is a bug in trident (rerun under "
             "compute-sanitizer to find it); 'out of memory' means the run does not fit: "
             "`trident plan` shows the memory per rank");
    fflush(NULL);
    abort();
}

// ---------------------------------------------------------------------------------------
// Memory. alloc() zero-fills and counts bytes; sizes live in a host map, since a header in
// front of a device block could not be read from the host without a copy.

static void *cuda_alloc(backend *b, size_t bytes) {
    cuda_ctx *x = cuda_ctx_of(b);
    void *p = NULL;
    // alloc() may run on a host thread that never selected the device.
    if (cudaSetDevice(x->device) != cudaSuccess) return NULL;
    // Zero bytes still get a distinct non-NULL block: NULL is the failure value.
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError(); // out of memory is not sticky; the caller reports it
        return NULL;
    }
    // Zero-filled before any other stream may touch it: a comm stream can be first.
    if (cudaMemsetAsync(p, 0, bytes ? bytes : 256, x->stream) != cudaSuccess ||
        cudaStreamSynchronize(x->stream) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    std::lock_guard<std::mutex> hold(x->mem_lock);
    (*x->mem_sizes)[p] = bytes;
    x->mem_current += bytes;
    if (x->mem_current > x->mem_peak) x->mem_peak = x->mem_current;
    return p;
}

static void cuda_free_block(backend *b, void *ptr) {
    if (!ptr) return;
    cuda_ctx *x = cuda_ctx_of(b);
    {
        std::lock_guard<std::mutex> hold(x->mem_lock);
        auto it = x->mem_sizes->find(ptr);
        TRI_ASSERT(it != x->mem_sizes->end()); // not from this backend, or freed twice
        x->mem_current -= it->second;
        x->mem_sizes->erase(it);
    }
    CUDA_OP_CHECK(cudaSetDevice(x->device));
    CUDA_OP_CHECK(cudaFree(ptr)); // waits for the work that may still use it
}

static size_t cuda_mem_peak_bytes(backend *b) {
    cuda_ctx *x = cuda_ctx_of(b);
    std::lock_guard<std::mutex> hold(x->mem_lock);
    return x->mem_peak;
}

// The host buffer may be reused as soon as this returns, as on the CPU: a pageable buffer
// is staged by the driver before cudaMemcpyAsync returns; a pinned one is read by the DMA
// engine later, so then the copy is waited for.
static void cuda_copy_to_device(backend *b, void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    cuda_ctx *x = cuda_ctx_of(b);
    // cudaMemcpyDefault (unified addressing): either side may be host or device memory, as
    // the staged comm backend (src/comm_staged.c) passes host pointers through here too.
    CUDA_OP_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyDefault, x->stream));
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, host_src) != cudaSuccess) {
        (void)cudaGetLastError();
        attr.type = cudaMemoryTypeHost; // unknown: be safe
    }
    if (attr.type == cudaMemoryTypeHost) CUDA_OP_CHECK(cudaStreamSynchronize(x->stream));
}

static void cuda_copy_to_host(backend *b, void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_ctx *x = cuda_ctx_of(b);
    CUDA_OP_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDefault, x->stream));
    CUDA_OP_CHECK(cudaStreamSynchronize(x->stream));
}

static void cuda_copy(backend *b, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    // cudaMemcpy does not promise overlapping copies (memmove); the ops never ask for them.
    CUDA_OP_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_ctx_of(b)->stream));
}

static void cuda_memset_zero(backend *b, void *ptr, size_t bytes) {
    if (!bytes) return;
    CUDA_OP_CHECK(cudaMemsetAsync(ptr, 0, bytes, cuda_ctx_of(b)->stream));
}

static void cuda_synchronize(backend *b) {
    CUDA_OP_CHECK(cudaStreamSynchronize(cuda_ctx_of(b)->stream));
}

void *cuda_scratch(cuda_ctx *x, size_t bytes) {
    if (bytes <= x->scratch_bytes) return x->scratch;
    size_t grown = x->scratch_bytes * 2 > bytes ? x->scratch_bytes * 2 : bytes;
    grown = cuda_align256(grown);
    if (x->scratch) {
        CUDA_OP_CHECK(cudaStreamSynchronize(x->stream)); // ops still reading the old one
        CUDA_OP_CHECK(cudaFree(x->scratch));
        x->scratch = NULL;
        x->scratch_bytes = 0;
    }
    CUDA_OP_CHECK(cudaMalloc(&x->scratch, grown));
    x->scratch_bytes = grown;
    return x->scratch;
}

// ---------------------------------------------------------------------------------------
// Creation

static void cuda_destroy(backend *b) {
    if (!b) return;
    cuda_ctx *x = cuda_ctx_of(b);
    if (x) {
        cudaSetDevice(x->device);
        if (x->stream) cudaStreamSynchronize(x->stream);
        cuda_matmul_free(x);
        if (x->scratch) cudaFree(x->scratch);
        if (x->host_result) cudaFreeHost(x->host_result);
        if (x->stream) cudaStreamDestroy(x->stream);
        delete x->mem_sizes;
        delete x;
    }
    free(b);
}

static const backend cuda_backend_table = {
    /* .name                  = */ "cuda",
    /* .ctx                   = */ NULL,
    /* .threads               = */ 0,
    /* .device_memory         = */ 1,
    /* .peak_flops            = */ 989e12, // dense bf16 of an H100/H200, as the benchmarks report
    /* .attn_state            = */ ATTN_STATE_LSE, // flash-style attention: row statistics only
    /* .stream                = */ NULL,           // the context's stream, set below
    /* .bf16_out              = */ 0,              // TRIDENT_CUDA_BF16_PATH, set below
    /* .alloc                 = */ cuda_alloc,
    /* .free                  = */ cuda_free_block,
    /* .copy_to_device        = */ cuda_copy_to_device,
    /* .copy_to_host          = */ cuda_copy_to_host,
    /* .memset_zero           = */ cuda_memset_zero,
    /* .copy                  = */ cuda_copy,
    /* .synchronize           = */ cuda_synchronize,
    /* .mem_peak_bytes        = */ cuda_mem_peak_bytes,
    /* .matmul_fwd            = */ cuda_matmul_fwd,
    /* .matmul_bwd            = */ cuda_matmul_bwd,
    /* .matmul_fwd16          = */ cuda_matmul_fwd16,
    /* .matmul_bwd16          = */ cuda_matmul_bwd16,
    /* .layernorm_fwd         = */ cuda_layernorm_fwd,
    /* .layernorm_bwd         = */ cuda_layernorm_bwd,
    /* .residual_fwd          = */ cuda_residual_fwd,
    /* .residual_layernorm_fwd = */ cuda_residual_layernorm_fwd,
    /* .gelu_fwd              = */ cuda_gelu_fwd,
    /* .gelu_bwd              = */ cuda_gelu_bwd,
    /* .attention_fwd         = */ cuda_attention_fwd,
    /* .attention_bwd         = */ cuda_attention_bwd,
    /* .embedding_fwd         = */ cuda_embedding_fwd,
    /* .embedding_bwd         = */ cuda_embedding_bwd,
    /* .xent_max              = */ cuda_xent_max,
    /* .xent_sumexp           = */ cuda_xent_sumexp,
    /* .xent_loss             = */ cuda_xent_loss,
    /* .xent_bwd              = */ cuda_xent_bwd,
    /* .loss_sum              = */ cuda_loss_sum,
    /* .sumsq                 = */ cuda_sumsq,
    /* .sumsq_add             = */ cuda_sumsq_add,
    /* .scale                 = */ cuda_scale,
    /* .to_bf16               = */ cuda_to_bf16,
    /* .from_bf16             = */ cuda_from_bf16,
    /* .add_to_bf16           = */ cuda_add_to_bf16,
    /* .adamw                 = */ cuda_adamw,
    /* .destroy               = */ cuda_destroy,
};

int cuda_in_build(void) { return 1; }

tri_status backend_cuda_create(backend **out, int device) {
    *out = NULL;
    tri_status rc = TRI_OK;
    backend *b = (backend *)xmalloc(sizeof *b);
    *b = cuda_backend_table;
    cuda_ctx *x = new (std::nothrow) cuda_ctx();
    if (!x) {
        free(b);
        LOG_ERROR("out of host memory creating the CUDA backend");
        return TRI_ERR_INTERNAL;
    }
    b->ctx = x;
    x->device = device;
    x->mem_sizes = new (std::nothrow) std::unordered_map<void *, size_t>();
    if (!x->mem_sizes) {
        LOG_ERROR("out of host memory creating the CUDA backend");
        rc = TRI_ERR_INTERNAL;
        goto fail;
    }
    {
        CUDA_CHECK_GOTO(cudaSetDevice(device), rc, fail);
        cudaDeviceProp prop;
        CUDA_CHECK_GOTO(cudaGetDeviceProperties(&prop, device), rc, fail);
        CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking), rc, fail);
        b->stream = x->stream;
        CUDA_CHECK_GOTO(cudaMallocHost((void **)&x->host_result, 2 * sizeof(double)), rc, fail);
        x->compute = env_flag(ENV_TRIDENT_CUDA_TF32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                     : CUBLAS_COMPUTE_32F;
        TRI_CHECK_GOTO(cuda_matmul_init(x), rc, fail);
        b->bf16_out = x->bf16_out;
        TRI_CHECK_GOTO(cuda_attention_init(x, prop.sharedMemPerBlockOptin), rc, fail);
        LOG_DEBUG("CUDA backend on device %d (%s, sm_%d%d, %d SMs, %.1f GiB), matmuls in %s, "
                  "GELU %s",
                  device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                  (double)prop.totalGlobalMem / (1 << 30),
                  x->compute == CUBLAS_COMPUTE_32F ? "fp32" : "TF32 (TRIDENT_CUDA_TF32=1)",
                  x->gelu_epilogue ? "fused into the GEMMs (cuBLASLt epilogues)"
                                   : "in its own kernels (the cuBLASLt epilogue differs)");
        // (fp32 operands; the bf16-operand matmuls always accumulate in fp32 on tensor cores)
    }
    *out = b;
    return TRI_OK;
fail:
    cuda_destroy(b);
    return rc;
}

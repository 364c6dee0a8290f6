// backend_cuda.cu: the CUDA compute backend (DESIGN.md "Module boundaries"): memory, the
// device workspace, creation and the function table. fp32 storage, as backend.h says; the
// ops are in backend_cuda_matmul.cu (cuBLASLt), backend_cuda_attn.cu (flash-style
// attention), backend_cuda_llama.cu (RMSNorm, RoPE, SwiGLU) and backend_cuda_ops.cu (the
// rest). backend_cuda_internal.cuh says how streams and errors work.
//
// Determinism: no op uses floating-point atomics or a launch shape that depends on the
// device, so two runs on the same GPU model give bitwise identical results (cuBLASLt keeps
// its algorithm per plan, and its reductions are ordered). The reduction orders are not the
// CPU backend's, so the two agree to rounding (tests/gpu/test_gpu_ops.c measures by how
// much), not bitwise.
//
// TF32: with train.precision tf32 (backend.tf32, set by the trainer) the fp32-operand matmuls
// run in TF32 on the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: 10-bit mantissas in the
// products, fp32 accumulation), several times faster than full-fp32 CUBLAS_COMPUTE_32F, at
// ~1e-3 relative error per product, so outside the fp32 tolerances of tests/gpu.
// TRIDENT_CUDA_TF32=1 forces it whatever the config says (the op benchmarks, which have
// none).
//
// No allocation inside a step: every buffer of the model comes from the arenas (alloc(),
// at start-up), the ops' workspaces are sized by reserve from the run's shapes, and the
// token uploads go through a pinned ring; alloc_count counts every device and pinned
// allocation, so that the trainer can check that a step made none. Stream-ordered
// allocations (the workspaces, NCCL's aside copies) come from the device's default pool,
// whose release threshold is raised at creation so that its memory stays mapped instead of
// going back to the driver at every synchronisation.
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
    cuda_count_alloc(x);
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

// The host buffer may be reused as soon as this returns, as on the CPU. A pageable buffer
// that fits a slot of the upload ring (a micro-batch's token ids) is copied into the next
// pinned slot and sent from there on the stream, asynchronously: a copy from pageable memory
// would wait for the stream to drain first. Larger pageable buffers (start-up, checkpoints,
// the staged comm's host copies) go as before: staged by the driver. A pinned source is read
// by the DMA engine later, so that copy is waited for.
static void cuda_copy_to_device(backend *b, void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    cuda_ctx *x = cuda_ctx_of(b);
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, host_src) != cudaSuccess) {
        (void)cudaGetLastError();
        attr.type = cudaMemoryTypeHost; // unknown: be safe
    }
    if (attr.type == cudaMemoryTypeUnregistered) {
        int slot;
        void *pinned = upload_ring_take(&x->ring, bytes, &slot);
        if (pinned) {
            memcpy(pinned, host_src, bytes);
            CUDA_OP_CHECK(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyDefault, x->stream));
            CUDA_OP_CHECK(cudaEventRecord(x->ring_events[slot], x->stream));
            upload_ring_issued(&x->ring, slot);
            return;
        }
    }
    // cudaMemcpyDefault (unified addressing): either side may be host or device memory, as
    // the staged comm backend (src/comm_staged.c) passes host pointers through here too.
    CUDA_OP_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyDefault, x->stream));
    if (attr.type == cudaMemoryTypeHost) CUDA_OP_CHECK(cudaStreamSynchronize(x->stream));
}

// The upload ring's events (compute/upload_ring.h).
static int ring_done(void *ctx, int slot) {
    cuda_ctx *x = (cuda_ctx *)ctx;
    cudaError_t err = cudaEventQuery(x->ring_events[slot]);
    if (err == cudaErrorNotReady) return 0;
    CUDA_OP_CHECK(err);
    return 1;
}
static void ring_wait(void *ctx, int slot) {
    CUDA_OP_CHECK(cudaEventSynchronize(((cuda_ctx *)ctx)->ring_events[slot]));
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

// *buf holds at least `bytes` (256-byte aligned): a stream-ordered allocation, so that a
// growth (the old buffer freed after the ops enqueued so far, a larger one taken from the
// pool) never synchronises. Without reserve (sampling, the op tests) workspaces grow on first
// use; after it a growth means cuda_workspace.c missed an op's request: reported once, named
// by `what`.
static void *workspace_at_least(cuda_ctx *x, void **buf, size_t *have, size_t bytes,
                                const char *what) {
    if (bytes <= *have) return *buf;
    const size_t grown = cuda_align256(bytes);
    if (x->reserved && !x->grew) {
        x->grew = 1;
        LOG_WARN("the CUDA backend's %s workspace grows from %zu to %zu bytes in the middle of "
                 "a run (compute/cuda_workspace.h sized it too small); please report this as a "
                 "bug",
                 what, *have, grown);
    }
    if (*buf) CUDA_OP_CHECK(cudaFreeAsync(*buf, x->stream));
    *buf = NULL;
    *have = 0;
    cuda_count_alloc(x);
    CUDA_OP_CHECK(cudaMallocAsync(buf, grown, x->stream));
    *have = grown;
    return *buf;
}

void *cuda_scratch(cuda_ctx *x, size_t bytes) {
    return workspace_at_least(x, &x->scratch, &x->scratch_bytes, bytes, "op");
}

void *cuda_widened_space(cuda_ctx *x, size_t bytes) {
    return workspace_at_least(x, &x->widened, &x->widened_bytes, bytes, "widened");
}

// Out of device or pinned memory for the workspaces: as for the arenas (mempool.h), the
// message names the bytes and every rank of the job ends.
static void workspace_oom(const char *what, size_t bytes, cudaError_t err) {
    LOG_ERROR("out of cuda memory: the CUDA backend's %s needs %zu bytes (%.3g GB): %s", what,
              bytes, (double)bytes / 1e9, cudaGetErrorString(err));
    LOG_HINT("`trident plan CONFIG --device h100` states these workspaces; lower "
             "train.micro_batch or model.seq_len");
    tri_abort_job(TRI_ERR_INTERNAL);
}

// backend.reserve: the workspaces of the run's shapes (compute/cuda_workspace.h), before the
// first step. The embedding's sort takes what CUB asks for when that exceeds the bound the
// planner uses (then `trident plan` understates the op workspace by the difference).
static tri_status cuda_reserve(backend *b, const backend_shapes *s) {
    cuda_ctx *x = cuda_ctx_of(b);
    CUDA_CHECK(cudaSetDevice(x->device));
    const size_t bound = cuda_ws_sort_bound((size_t)(s->rows > 0 ? s->rows : 0));
    const size_t sort = cuda_embedding_sort_bytes(x, s->rows, s->V_local);
    if (sort > bound)
        LOG_DEBUG("CUB's sort of %d tokens asks for %zu bytes, more than the planner's bound "
                  "%zu",
                  s->rows, sort, bound);
    const cuda_workspace w = cuda_workspace_for(s, sort > bound ? sort : bound);
    // The growths below are the reservation, not a run's: no report.
    cudaError_t err = cudaSuccess;
    if (w.scratch > x->scratch_bytes) {
        if (x->scratch) CUDA_CHECK(cudaFreeAsync(x->scratch, x->stream));
        x->scratch = NULL, x->scratch_bytes = 0;
        cuda_count_alloc(x);
        if ((err = cudaMallocAsync(&x->scratch, w.scratch, x->stream)) != cudaSuccess)
            workspace_oom("op workspace", w.scratch, err);
        x->scratch_bytes = w.scratch;
    }
    if (w.widened > x->widened_bytes) {
        if (x->widened) CUDA_CHECK(cudaFreeAsync(x->widened, x->stream));
        x->widened = NULL, x->widened_bytes = 0;
        cuda_count_alloc(x);
        if ((err = cudaMallocAsync(&x->widened, w.widened, x->stream)) != cudaSuccess)
            workspace_oom("widened bf16 attention operands", w.widened, err);
        x->widened_bytes = w.widened;
    }
    if (w.upload_slot > x->ring.slot_bytes) {
        CUDA_CHECK(cudaStreamSynchronize(x->stream)); // no copy still reads the old ring
        if (x->ring_host) CUDA_CHECK(cudaFreeHost(x->ring_host));
        x->ring_host = NULL;
        cuda_count_alloc(x);
        if ((err = cudaMallocHost(&x->ring_host, w.upload)) != cudaSuccess) {
            x->ring_host = NULL;
            workspace_oom("pinned upload ring (host memory)", w.upload, err);
        }
        const upload_events ev = {x, ring_done, ring_wait};
        upload_ring_free(&x->ring);
        upload_ring_init(&x->ring, x->ring_host, w.upload_slot, CUDA_UPLOAD_SLOTS, &ev);
    }
    // RoPE's table for the run (llama), before `reserved`: building it is no growth.
    if (s->rope_theta > 0 && s->T > 0 && s->HS >= 2)
        (void)cuda_rope_table(x, s->T, s->HS, s->rope_theta);
    CUDA_CHECK(cudaStreamSynchronize(x->stream)); // start-up: everything exists before step 1
    x->reserved = 1;
    LOG_DEBUG("CUDA backend workspaces: op %zu, widened %zu, RoPE table %zu, cuBLASLt %zu bytes "
              "on the device; upload ring %d x %zu bytes pinned",
              x->scratch_bytes, x->widened_bytes,
              x->rope_tab ? cuda_ws_rope_table((size_t)x->rope_T, (size_t)x->rope_HS) : 0,
              x->lt_workspace_bytes, CUDA_UPLOAD_SLOTS, x->ring.slot_bytes);
    return TRI_OK;
}

static uint64_t cuda_alloc_count(backend *b) { return cuda_ctx_of(b)->allocs.load(); }

// ---------------------------------------------------------------------------------------
// Creation

static void cuda_destroy(backend *b) {
    if (!b) return;
    cuda_ctx *x = cuda_ctx_of(b);
    if (x) {
        cudaSetDevice(x->device);
        if (x->stream) cudaStreamSynchronize(x->stream);
        cuda_matmul_free(x);
        if (x->scratch) cudaFreeAsync(x->scratch, x->stream);
        if (x->widened) cudaFreeAsync(x->widened, x->stream);
        cuda_rope_free(x);
        if (x->stream) cudaStreamSynchronize(x->stream);
        upload_ring_free(&x->ring);
        if (x->ring_host) cudaFreeHost(x->ring_host);
        for (int k = 0; k < CUDA_UPLOAD_SLOTS; k++)
            if (x->ring_events[k]) cudaEventDestroy(x->ring_events[k]);
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
    /* .peak_flops            = */ 0, // the trainer takes the device's from plan's table
    /* .attn_state            = */ ATTN_STATE_LSE, // flash-style attention: row statistics only
    /* .stream                = */ NULL,           // the context's stream, set below
    /* .bf16_out              = */ 0,              // TRIDENT_CUDA_BF16_PATH, set below
    /* .device_name           = */ NULL,           // the context's, set below
    /* .device_bus_id         = */ NULL,
    /* .has_tf32              = */ 1, // sm_80 and newer (the oldest CUDA_ARCH)
    /* .tf32                  = */ 0,
    /* .attn_rope             = */ 1, // every attention kernel rotates q and k (cuda_attention_fwd)
    /* .alloc                 = */ cuda_alloc,
    /* .free                  = */ cuda_free_block,
    /* .copy_to_device        = */ cuda_copy_to_device,
    /* .copy_to_host          = */ cuda_copy_to_host,
    /* .memset_zero           = */ cuda_memset_zero,
    /* .copy                  = */ cuda_copy,
    /* .synchronize           = */ cuda_synchronize,
    /* .mem_peak_bytes        = */ cuda_mem_peak_bytes,
    /* .reserve               = */ cuda_reserve,
    /* .alloc_count           = */ cuda_alloc_count,
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
    /* .xent_stats16          = */ cuda_xent_stats16,
    /* .xent_rescale          = */ cuda_xent_rescale,
    /* .xent_bwd16            = */ cuda_xent_bwd16,
    // The Llama ops (backend_cuda_llama.cu)
    /* .rmsnorm_fwd           = */ cuda_rmsnorm_fwd,
    /* .rmsnorm_bwd           = */ cuda_rmsnorm_bwd,
    /* .residual_rmsnorm_fwd  = */ cuda_residual_rmsnorm_fwd,
    /* .rope_fwd              = */ cuda_rope_fwd,
    /* .rope_bwd              = */ cuda_rope_bwd,
    /* .swiglu_fwd            = */ cuda_swiglu_fwd,
    /* .swiglu_bwd            = */ cuda_swiglu_bwd,
    /* .mt_sumsq_add          = */ cuda_mt_sumsq_add,
    /* .mt_adamw              = */ cuda_mt_adamw,
    /* .optim_multi           = */ 1, // TRIDENT_CUDA_OPTIM (cuda_optim_init)
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
        snprintf(x->name, sizeof x->name, "%s", prop.name);
        b->device_name = x->name;
        if (cudaDeviceGetPCIBusId(x->bus_id, (int)sizeof x->bus_id, device) != cudaSuccess) {
            (void)cudaGetLastError(); // unknown: the device count alone decides (comm_gpus.h)
            x->bus_id[0] = '\0';
        }
        b->device_bus_id = x->bus_id;
        // Stream-ordered memory stays in the pool between uses (see the top).
        cudaMemPool_t pool;
        CUDA_CHECK_GOTO(cudaDeviceGetDefaultMemPool(&pool, device), rc, fail);
        uint64_t keep = UINT64_MAX;
        CUDA_CHECK_GOTO(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), rc,
                        fail);
        for (int k = 0; k < CUDA_UPLOAD_SLOTS; k++)
            CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&x->ring_events[k], cudaEventDisableTiming),
                            rc, fail);
        cuda_count_alloc(x);
        CUDA_CHECK_GOTO(cudaMallocHost((void **)&x->host_result, 2 * sizeof(double)), rc, fail);
        x->tf32_forced = env_flag(ENV_TRIDENT_CUDA_TF32);
        x->fallback_forced = env_flag(ENV_TEST_CUDA_FALLBACK);
        x->compute = x->tf32_forced ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        TRI_CHECK_GOTO(cuda_matmul_init(x), rc, fail);
        static const char *const ln_kernels[] = {"vec", "v1"};
        const int ln = env_choice(ENV_TRIDENT_CUDA_LN, ln_kernels, 2, 0);
        if (ln < 0) {
            LOG_ERROR("TRIDENT_CUDA_LN=%s: the CUDA LayerNorm kernels are vec or v1",
                      env_get(ENV_TRIDENT_CUDA_LN));
            LOG_HINT("unset it for the default (vec); v1 selects the previous scalar kernels, "
                     "to bisect a failing device run (README \"Environment variables\")");
            rc = TRI_ERR_CONFIG;
            goto fail;
        }
        x->ln_vec = ln == 0;
        b->bf16_out = x->bf16_out;
        TRI_CHECK_GOTO(cuda_attention_init(x, prop.sharedMemPerBlockOptin), rc, fail);
        TRI_CHECK_GOTO(cuda_optim_init(b), rc, fail);
        LOG_DEBUG("CUDA backend on device %d (%s, sm_%d%d, %d SMs, %.1f GiB), matmuls in %s, "
                  "GELU %s",
                  device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                  (double)prop.totalGlobalMem / (1 << 30),
                  x->tf32_forced ? "TF32 (TRIDENT_CUDA_TF32=1)"
                                 : "fp32 (TF32 with train.precision tf32)",
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

// test_gpu_host.c: the host-side logic of the CUDA path, on the CPU (issue 17, points 1 and 5):
//   - which ranks share a GPU (comm_gpus_shared): bus ids per host, the device count rule;
//   - the pinned upload ring's slots and events (upload_ring.h), with fake events;
//   - the CUDA backend's workspaces (cuda_workspace.h): every request an op of the model
//     makes, derived here from the model's dims (not from model_op_shapes), within what the
//     backend reserves, for several layouts; the reservation equal to what `trident plan`
//     states; the sort's bound above CUB's own formula for it (re-derived from CUB's
//     onesweep dispatch: bins, look-back per tile, a second key and value buffer, counters,
//     each rounded to 256 bytes, plus 255);
//   - the planner's GPU table (plan_device_for_gpu) and the peak per precision, and
//     train.precision: tf32 through the config.
#include <math.h>
#include <string.h>

#include "comm/comm_gpus.h"
#include "compute/cuda_workspace.h"
#include "compute/rope_math.h"
#include "compute/upload_ring.h"
#include "config/config_layout.h"
#include "config_harness.h"
#include "plan/plan.h"
#include "testlib.h"

// ---- ranks sharing a GPU ----

static comm_gpu_of_rank gpu(const char *host, const char *bus, int local_size, int devices) {
    comm_gpu_of_rank g;
    memset(&g, 0, sizeof g);
    snprintf(g.host, sizeof g.host, "%s", host);
    snprintf(g.bus_id, sizeof g.bus_id, "%s", bus);
    g.local_size = local_size, g.devices = devices;
    return g;
}

static void check_shared_gpus(void) {
    const char *A = "0000:19:00.0", *B = "0000:3b:00.0";
    comm_gpu_of_rank r[4] = {gpu("n1", A, 2, 8), gpu("n1", B, 2, 8), gpu("n2", A, 2, 8),
                             gpu("n2", B, 2, 8)};
    comm_gpu_sharing s = comm_gpus_shared(r, 4);
    TEST_CHECK(!s.shared && !s.why[0], "gpus_distinct_per_host",
               "two hosts with the same bus ids were taken as shared: %s", s.why);
    r[1] = gpu("n1", A, 2, 8);
    s = comm_gpus_shared(r, 4);
    TEST_CHECK(s.shared && s.rank_a == 0 && s.rank_b == 1 && strstr(s.why, "ranks 0 and 1") &&
                   strstr(s.why, A) && strstr(s.why, "n1"),
               "gpus_same_bus_id_shared", "shared %d ranks %d,%d why '%s'", s.shared, s.rank_a,
               s.rank_b, s.why);
    // Unknown bus ids never match each other; the count alone decides.
    comm_gpu_of_rank u[2] = {gpu("n1", "", 2, 2), gpu("n1", "", 2, 2)};
    s = comm_gpus_shared(u, 2);
    TEST_CHECK(!s.shared, "gpus_unknown_ids_not_shared", "why '%s'", s.why);
    // More ranks on a node than devices: two must meet (device = local_rank % devices).
    comm_gpu_of_rank c[3] = {gpu("n1", "", 3, 2), gpu("n1", "", 3, 2), gpu("n1", "", 3, 2)};
    s = comm_gpus_shared(c, 3);
    TEST_CHECK(s.shared && s.rank_b == -1 && strstr(s.why, "3 ranks on host n1 see 2 GPUs"),
               "gpus_more_ranks_than_devices", "shared %d why '%s'", s.shared, s.why);
    // A device count of 0 (unknown) says nothing.
    c[0].devices = c[1].devices = c[2].devices = 0;
    s = comm_gpus_shared(c, 3);
    TEST_CHECK(!s.shared, "gpus_unknown_count", "why '%s'", s.why);
    // One GPU, one rank: the single-GPU run.
    comm_gpu_of_rank one = gpu("n1", A, 1, 1);
    s = comm_gpus_shared(&one, 1);
    TEST_CHECK(!s.shared, "gpus_one_rank", "why '%s'", s.why);
    // Host names differing only past what gethostname kept are one host (63 characters).
    char longname[80];
    memset(longname, 'h', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    comm_gpu_of_rank l[2] = {gpu(longname, A, 2, 2), gpu(longname, A, 2, 2)};
    s = comm_gpus_shared(l, 2);
    TEST_CHECK(s.shared, "gpus_long_host_names", "not shared");
}

// ---- the upload ring, with fake events ----

typedef struct {
    int done[8];    // whether slot k's last copy completed
    int waited[8];  // waits on slot k
    int queries[8]; // done() calls on slot k
} fake_events;

static int fake_done(void *ctx, int slot) {
    fake_events *f = ctx;
    f->queries[slot]++;
    return f->done[slot];
}
static void fake_wait(void *ctx, int slot) {
    fake_events *f = ctx;
    f->waited[slot]++;
    f->done[slot] = 1; // waiting completes it
}

static void check_upload_ring(void) {
    char host[4 * 64];
    fake_events f;
    memset(&f, 0, sizeof f);
    const upload_events ev = {&f, fake_done, fake_wait};
    upload_ring r;
    upload_ring_init(&r, host, 64, 4, &ev);
    int slot, order_ok = 1, no_wait = 1;
    // A first round: every slot free, taken in order, no event asked.
    for (int k = 0; k < 4; k++) {
        char *p = upload_ring_take(&r, 64, &slot);
        order_ok &= slot == k && p == host + 64 * k;
        upload_ring_issued(&r, slot);
    }
    for (int k = 0; k < 4; k++) no_wait &= f.queries[k] == 0 && f.waited[k] == 0;
    TEST_CHECK(order_ok && no_wait && r.copies == 4 && r.waits == 0, "ring_first_round",
               "order %d, no wait %d, copies %llu waits %llu", order_ok, no_wait,
               (unsigned long long)r.copies, (unsigned long long)r.waits);
    // Slot 0 again: its copy completed (the device kept up): asked, not waited for.
    f.done[0] = 1;
    char *p = upload_ring_take(&r, 10, &slot);
    TEST_CHECK(slot == 0 && p == host && f.queries[0] == 1 && f.waited[0] == 0 && r.waits == 0,
               "ring_reuse_completed_slot", "slot %d queries %d waits %d", slot, f.queries[0],
               f.waited[0]);
    upload_ring_issued(&r, slot);
    // Slot 1 again while its copy is still queued: the host waits for it, once.
    p = upload_ring_take(&r, 64, &slot);
    TEST_CHECK(slot == 1 && f.waited[1] == 1 && r.waits == 1, "ring_waits_for_busy_slot",
               "slot %d waited %d waits %llu", slot, f.waited[1], (unsigned long long)r.waits);
    // A slot taken but never issued (the copy went another way) is free next time round.
    upload_ring_take(&r, 64, &slot); // 2: busy, not done -> waits
    upload_ring_take(&r, 64, &slot); // 3
    upload_ring_issued(&r, slot);
    f.done[0] = 0;
    upload_ring_take(&r, 64, &slot); // 0: issued above, not done -> waits
    upload_ring_take(&r, 64, &slot); // 1: taken without issue -> free
    TEST_CHECK(slot == 1 && f.waited[1] == 1, "ring_unissued_slot_is_free", "slot %d waited %d",
               slot, f.waited[1]);
    // Too large for a slot: no slot, nothing waited for, the caller copies another way.
    const uint64_t copies = r.copies;
    p = upload_ring_take(&r, 65, &slot);
    TEST_CHECK(!p && slot == -1 && r.copies == copies, "ring_oversize_refused", "p %p slot %d",
               (void *)p, slot);
    upload_ring_free(&r);
    // A ring without memory (reserve never ran: sampling, tools) takes nothing.
    upload_ring_init(&r, NULL, 64, 2, &ev);
    TEST_CHECK(!upload_ring_take(&r, 8, &slot) && slot == -1, "ring_without_memory", "took slot %d",
               slot);
    upload_ring_free(&r);
}

// ---- the CUDA backend's workspaces ----

// CUB's temporary storage for DeviceRadixSort::SortPairs of n 32-bit keys and values over
// `passes` 8-bit digit passes, in its onesweep form with tiles of `tile` keys (cub's
// dispatch_radix_sort.cuh, InvokeOnesweep; one portion below 2^28 keys).
static size_t cub_onesweep_bytes(size_t n, int passes, size_t tile) {
    const size_t blocks = (n + tile - 1) / tile;
    const size_t sizes[5] = {passes * 256 * 4, blocks * 256 * 4, passes > 1 ? n * 4 : 0,
                             passes > 1 ? n * 4 : 0, passes * 4};
    size_t total = 0;
    for (int i = 0; i < 5; i++) total += (sizes[i] + 255) / 256 * 256;
    return total + 255;
}

static void check_sort_bound(void) {
    const size_t ns[] = {1, 100, 4096, 6528, 16384, 65536, 1 << 20, 8 << 20};
    const size_t tiles[] = {384 * 8, 384 * 17, 384 * 21, 384 * 30}; // CUB's policies' range
    int ok = 1;
    char bad[160] = "";
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++)
            for (int passes = 1; passes <= 4; passes++) {
                const size_t need = cub_onesweep_bytes(ns[i], passes, tiles[t]);
                if (need <= cuda_ws_sort_bound(ns[i])) continue;
                if (ok)
                    snprintf(bad, sizeof bad, "n %zu tile %zu passes %d: CUB %zu > bound %zu",
                             ns[i], tiles[t], passes, need, cuda_ws_sort_bound(ns[i]));
                ok = 0;
            }
    TEST_CHECK(ok, "workspace_sort_bound_covers_cub", "%s", bad);
}

// The CUDA backend's traits (the planner's GPU entries).
static const backend_traits CUDA_TRAITS = {.attn = ATTN_STATE_LSE, .bf16_out = 1, .optim_table = 1};

// A resolved config of C = d_model, T = seq_len (B 16, 12 layers, GPT-2's vocabulary) with
// these settings, on tp * pp ranks.
static void model_config_of(run_config *c, int C, int T, int tp, int pp, int sp, tri_dtype prec,
                            int heads) {
    config_defaults(c);
    c->model.n_layer = 12, c->model.d_model = C, c->model.n_head = heads;
    c->model.seq_len = T, c->model.vocab_size = 50257;
    c->parallel.tp = tp, c->parallel.pp = pp, c->parallel.dp = 1;
    c->parallel.sequence_parallel = sp;
    c->train.precision = prec;
    c->train.precision_mode = prec == DTYPE_BF16 ? PRECISION_BF16 : PRECISION_FP32;
    c->train.micro_batch = 16, c->train.global_batch = 16 * pp;
    TRI_ASSERT(config_resolve_world(c, tp * pp) == TRI_OK);
}

// Every workspace request the ops make for this rank's model (the calls of model_layer.c and
// model_pass.c, written out from the model's dims), within the reservation.
static int requests_fit(const run_config *c, int tp_rank, int pp_rank, char *why, size_t n) {
    const model_layout ml = config_model_layout(c, tp_rank, pp_rank, 1, CUDA_TRAITS);
    const model_dims d = model_dims_of(&c->model, &ml);
    const backend_shapes sh = model_op_shapes(&c->model, &ml);
    const size_t sort = cuda_ws_sort_bound((size_t)d.N);
    const cuda_workspace w = cuda_workspace_for(&sh, sort);
    const int bf16 = ml.precision == DTYPE_BF16;
    struct {
        const char *what;
        size_t bytes;
    } req[] = {
        // matmul backward with a bias: BGRADB's row, or the column sums (N rows of OC)
        {"qkv bias grad", cuda_ws_bias_grad((size_t)d.C3_local)},
        {"fc bias grad", cuda_ws_bias_grad((size_t)d.C4_local)},
        {"proj bias grad", cuda_ws_bias_grad((size_t)d.C)},
        {"qkv column sums", cuda_ws_column_sums((size_t)d.N, (size_t)d.C3_local)},
        {"fc column sums", cuda_ws_column_sums((size_t)d.N, (size_t)d.C4_local)},
        {"proj column sums", cuda_ws_column_sums((size_t)d.N, (size_t)d.C)},
        // LayerNorm backward over this rank's rows
        {"layernorm", cuda_ws_column_sums((size_t)d.N_local, (size_t)d.C)},
        // the attention files ask for B * NH * T floats
        {"attention", (size_t)d.B * d.NH_local * d.T * sizeof(float)},
        {"sumsq", cuda_ws_sumsq()},
        {"embedding", d.has_embed ? cuda_ws_embedding_bwd((size_t)d.N, sort) : 0},
        // bf16: the bf16-output matmuls' fallback, forward (qkv, fc) and input gradients
        // (fc, qkv: C; fcproj: 4C/tp; attproj: C/tp)
        {"qkv out16", bf16 ? cuda_ws_matmul_out16((size_t)d.N, (size_t)d.C3_local) : 0},
        {"fc out16", bf16 ? cuda_ws_matmul_out16((size_t)d.N, (size_t)d.C4_local) : 0},
        {"C dinp16", bf16 ? cuda_ws_matmul_out16((size_t)d.N, (size_t)d.C) : 0},
        {"fcproj dinp16", bf16 ? cuda_ws_matmul_out16((size_t)d.N, (size_t)d.C4_local) : 0},
        {"attproj dinp16", bf16 ? cuda_ws_matmul_out16((size_t)d.N, (size_t)d.C_local) : 0},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].bytes > w.scratch) {
            snprintf(why, n, "%s needs %zu > reserved %zu (tp %d pp %d)", req[i].what, req[i].bytes,
                     w.scratch, tp_rank, pp_rank);
            return 0;
        }
    // bf16 with a head size the tensor-core attention does not take: the widened qkv.
    const size_t wide = (size_t)d.N * d.C3_local * sizeof(float);
    if (ml.precision == DTYPE_BF16 && !cuda_attention_bf16_native(d.HS) && wide > w.widened) {
        snprintf(why, n, "widened qkv %zu > reserved %zu", wide, w.widened);
        return 0;
    }
    if (w.upload_slot < (size_t)d.N * sizeof(int)) {
        snprintf(why, n, "upload slot %zu < %zu token ids", w.upload_slot,
                 (size_t)d.N * sizeof(int));
        return 0;
    }
    return 1;
}

// The bf16-output fallback's chunks: at least one row, at most the op's rows, each chunk
// within the workspace the op asks for, that workspace bounded however large the model, and
// nondecreasing in rows and columns (reserve sizes it for the widest shape only).
static void check_out16_chunks(void) {
    const size_t rows[] = {0, 1, 7, 512, 8192, 16384, 1u << 20};
    const size_t cols[] = {1, 64, 768, 2304, 3072, 16384, CUDA_OUT16_CHUNK_FLOATS + 3};
    const size_t nr = sizeof rows / sizeof rows[0], nc = sizeof cols / sizeof cols[0];
    int ok = 1;
    char why[160] = "";
    for (size_t i = 0; i < nr && ok; i++)
        for (size_t j = 0; j < nc && ok; j++) {
            const size_t r = rows[i], c = cols[j], k = cuda_out16_chunk_rows(r, c);
            const size_t ws = cuda_ws_matmul_out16(r, c);
            const size_t cap = (c > CUDA_OUT16_CHUNK_FLOATS ? c : CUDA_OUT16_CHUNK_FLOATS) * 4;
            ok = (r == 0 ? k == 0 : k >= 1 && k <= r) && k * c * sizeof(float) <= ws &&
                 ws <= cuda_align256(cap);
            for (size_t i2 = i; i2 < nr && ok; i2++)
                for (size_t j2 = j; j2 < nc && ok; j2++)
                    ok = ws <= cuda_ws_matmul_out16(rows[i2], cols[j2]);
            if (!ok)
                snprintf(why, sizeof why, "rows %zu cols %zu: chunk %zu, workspace %zu", r, c, k,
                         ws);
        }
    TEST_CHECK(ok, "out16_chunks_fit_their_workspace", "%s", why);
}

static void check_workspace_fits_ops(void) {
    // GPT-2 124M (the column sums are the largest request), then narrow models where the
    // embedding's sort (C 64, 2 heads) or the attention's row deltas (C 64, 16 heads, T 2048)
    // are: each term of the reservation is the largest somewhere.
    const struct {
        int C, T, tp, pp, sp, heads;
        tri_dtype prec;
    } layouts[] = {{768, 1024, 1, 1, 0, 12, DTYPE_FP32}, {768, 1024, 2, 1, 1, 12, DTYPE_FP32},
                   {768, 1024, 4, 2, 0, 12, DTYPE_BF16}, {768, 1024, 1, 2, 0, 8, DTYPE_BF16},
                   {64, 256, 1, 1, 0, 2, DTYPE_FP32},    {64, 2048, 1, 2, 0, 16, DTYPE_FP32}};
    int ok = 1;
    char why[200] = "";
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0] && ok; i++) {
        run_config c;
        model_config_of(&c, layouts[i].C, layouts[i].T, layouts[i].tp, layouts[i].pp, layouts[i].sp,
                        layouts[i].prec, layouts[i].heads);
        for (int pr = 0; pr < layouts[i].pp && ok; pr++)
            for (int tr = 0; tr < layouts[i].tp && ok; tr++)
                ok = requests_fit(&c, tr, pr, why, sizeof why);
        config_free(&c);
    }
    // bf16 with head size 40 (not a multiple of 16): the fallback's widened qkv.
    run_config c;
    config_defaults(&c);
    c.model.n_layer = 2, c.model.d_model = 160, c.model.n_head = 4, c.model.seq_len = 64;
    c.model.vocab_size = 256, c.parallel.tp = 1, c.parallel.pp = 1, c.parallel.dp = 1;
    c.train.precision = DTYPE_BF16, c.train.precision_mode = PRECISION_BF16;
    c.train.micro_batch = 4, c.train.global_batch = 4;
    TRI_ASSERT(config_resolve_world(&c, 1) == TRI_OK);
    const model_layout ml = config_model_layout(&c, 0, 0, 1, CUDA_TRAITS);
    const backend_shapes sh = model_op_shapes(&c.model, &ml);
    const cuda_workspace w = cuda_workspace_for(&sh, cuda_ws_sort_bound((size_t)sh.rows));
    if (ok) ok = requests_fit(&c, 0, 0, why, sizeof why) && w.widened > 0;
    if (ok && !w.widened) snprintf(why, sizeof why, "HS 40 under bf16 reserved no widened qkv");
    config_free(&c);
    TEST_CHECK(ok, "workspace_covers_every_op_request", "%s", why);
}

// What `trident plan --device h100` states for each stage is what the trainer reserves
// (trainer.c: model_op_shapes of its layout, then backend.reserve), and the fit counts it.
static void check_plan_states_workspace_of(int bf16, int *ok, char *why, size_t n) {
    run_config c; // narrow: the first stage's embedding sort is its largest fp32 request
    model_config_of(&c, 64, 256, 2, 2, 0, bf16 ? DTYPE_BF16 : DTYPE_FP32, 2);
    plan_device dev;
    TRI_ASSERT(plan_device_lookup("h100", 4, &dev) == 0);
    plan_result p;
    TRI_ASSERT(plan_compute(&p, &c, &dev) == TRI_OK);
    for (int r = 0; r < 2 && *ok; r++) {
        const model_layout ml = config_model_layout(&c, 0, r, p.stages[r].n_slots, CUDA_TRAITS);
        const backend_shapes sh = model_op_shapes(&c.model, &ml);
        const cuda_workspace w = cuda_workspace_for(&sh, cuda_ws_sort_bound((size_t)sh.rows));
        const uint64_t want = cuda_workspace_device_bytes(&w);
        *ok = p.stages[r].backend_device == want && p.stages[r].backend_pinned == w.upload &&
              want >= CUDA_LT_WORKSPACE_BYTES && (r == 0) == (sh.V_local > 0);
        if (!*ok)
            snprintf(why, n, "stage %d: plan %llu / %llu, reserve %llu / %zu", r,
                     (unsigned long long)p.stages[r].backend_device,
                     (unsigned long long)p.stages[r].backend_pinned, (unsigned long long)want,
                     w.upload);
    }
    // In fp32 the first stage's embedding sort is its largest request (in bf16 the matmuls'
    // fallback outgrows it here).
    if (*ok && !bf16 && p.stages[0].backend_device == p.stages[1].backend_device) {
        *ok = 0;
        snprintf(why, n, "both stages state %llu (the first sorts the embedding's tokens)",
                 (unsigned long long)p.stages[0].backend_device);
    }
    plan_free(&p);
    // The CPU device has no such workspaces (the run record's memory is the arenas alone).
    TRI_ASSERT(plan_device_lookup("cpu", 4, &dev) == 0);
    TRI_ASSERT(plan_compute(&p, &c, &dev) == TRI_OK);
    if (*ok && (p.stages[0].backend_device || p.stages[0].backend_pinned)) {
        *ok = 0;
        snprintf(why, n, "the cpu device states %llu backend bytes",
                 (unsigned long long)p.stages[0].backend_device);
    }
    plan_free(&p);
    config_free(&c);
}

static void check_plan_states_workspace(void) {
    int ok = 1;
    char why[200] = "";
    // fp32, then bf16 (whose bf16-output matmuls' fallback workspace is a term too).
    for (int bf16 = 0; bf16 < 2 && ok; bf16++)
        check_plan_states_workspace_of(bf16, &ok, why, sizeof why);
    TEST_CHECK(ok, "workspace_plan_equals_reserve", "%s", why);
}

// RoPE's cos/sin table (a llama on CUDA, whose attention rotates q and k: backend.attn_rope):
// reserved from the run's shapes as the bytes cuda_rope_table allocates for T x HS/2 pairs, in
// what `trident plan --device h100` states for the stage; nothing for GPT-2.
static void check_rope_table_counted(void) {
    int ok = 1;
    char why[200] = "";
    for (int llama = 0; llama < 2 && ok; llama++) {
        char *path = write_yaml(llama ? "model: {arch: llama, n_layer: 2, n_head: 8, n_kv_head: 2, "
                                        "d_model: 512, seq_len: 1024, vocab_size: 256}\n"
                                        "parallel: {tp: 2}\n"
                                        "train: {micro_batch: 2, global_batch: 2}\n"
                                      : "model: {n_layer: 2, n_head: 8, d_model: 512, seq_len: "
                                        "1024, vocab_size: 256}\nparallel: {tp: 2}\n"
                                        "train: {micro_batch: 2, global_batch: 2}\n");
        run_config c;
        config_defaults(&c);
        TRI_ASSERT(config_load(&c, path, 0, NULL) == TRI_OK &&
                   config_resolve_world(&c, 2) == TRI_OK);
        plan_device dev;
        TRI_ASSERT(plan_device_lookup("h100", 2, &dev) == 0);
        plan_result p;
        TRI_ASSERT(plan_compute(&p, &c, &dev) == TRI_OK);
        const model_layout ml = config_model_layout(&c, 0, 0, p.stages[0].n_slots, CUDA_TRAITS);
        const backend_shapes sh = model_op_shapes(&c.model, &ml);
        const cuda_workspace w = cuda_workspace_for(&sh, cuda_ws_sort_bound((size_t)sh.rows));
        const size_t table = rope_table_floats(1024, 64) * sizeof(float); // T 1024, HS 512 / 8
        ok = llama ? sh.rope_theta == 10000.0f && w.rope == cuda_ws_rope_table(1024, 64) &&
                         w.rope >= table && w.rope < table + 256
                   : sh.rope_theta == 0.0f && w.rope == 0;
        ok = ok && p.stages[0].backend_device == cuda_workspace_device_bytes(&w);
        if (!ok)
            snprintf(why, sizeof why, "%s: theta %g, rope table %zu (want %zu), plan %llu",
                     llama ? "llama" : "gpt2", (double)sh.rope_theta, w.rope, llama ? table : 0,
                     (unsigned long long)p.stages[0].backend_device);
        plan_free(&p);
        config_free(&c);
        free(path);
    }
    TEST_CHECK(ok, "workspace_rope_table_counted", "%s", why);
}

// ---- the device table and the precision ----

static void check_gpu_table(void) {
    static const struct {
        const char *driver, *want;
    } cases[] = {{"NVIDIA H200", "h200"},           {"NVIDIA H100 80GB HBM3", "h100"},
                 {"NVIDIA A100-SXM4-80GB", "a100"}, {"NVIDIA H200 NVL", NULL},
                 {"NVIDIA H100 PCIe", NULL},        {"NVIDIA A100 80GB PCIe", NULL},
                 {"Tesla V100-SXM2-16GB", NULL},    {"", NULL}};
    int ok = 1;
    char why[160] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_device d;
        const int found = plan_device_for_gpu(cases[i].driver, &d) == 0;
        if (found == (cases[i].want != NULL) && (!found || !strcmp(d.name, cases[i].want)))
            continue;
        ok = 0;
        snprintf(why, sizeof why, "'%s' -> %s, want %s", cases[i].driver, found ? d.name : "none",
                 cases[i].want ? cases[i].want : "none");
        break;
    }
    TEST_CHECK(ok && plan_device_for_gpu(NULL, NULL) == -1, "gpu_table_matches_driver_names", "%s",
               why);
    plan_device h;
    TRI_ASSERT(plan_device_lookup("h100", 1, &h) == 0);
    const char *what;
    const double tf = plan_device_peak(&h, PRECISION_TF32, &what);
    TEST_CHECK(tf == 494.5e12 && !strcmp(what, "tf32") &&
                   plan_device_peak(&h, PRECISION_BF16, NULL) == 989e12 &&
                   plan_device_peak(&h, PRECISION_FP32, NULL) == 67e12,
               "gpu_peak_per_precision", "tf32 %g (%s)", tf, what);
}

static void check_tf32_config(void) {
    char *path = write_yaml("model: {n_layer: 2, n_head: 2, d_model: 64, seq_len: 32}\n"
                            "train: {precision: tf32, micro_batch: 2, global_batch: 2}\n");
    run_config c;
    config_defaults(&c);
    int saved = capture_begin();
    tri_status rc = config_load(&c, path, 0, NULL);
    capture_end(saved);
    int ok = rc == TRI_OK && c.train.precision_mode == PRECISION_TF32 &&
             c.train.precision == DTYPE_FP32;
    plan_device h;
    TRI_ASSERT(plan_device_lookup("h100", 1, &h) == 0);
    double peak = 0;
    if (ok && config_resolve_world(&c, 1) == TRI_OK) {
        plan_result p;
        TRI_ASSERT(plan_compute(&p, &c, &h) == TRI_OK);
        peak = p.peak_flops;
        plan_free(&p);
    }
    if (rc == TRI_OK) config_free(&c);
    TEST_CHECK(ok && peak == h.peak_tf32, "tf32_config_and_plan_peak",
               "rc %d mode %d dtype %d peak %g", rc, c.train.precision_mode, c.train.precision,
               peak);
    // --set train.precision=bf16 over the file: the storage dtype follows the last value.
    config_defaults(&c);
    char *sets[] = {"train.precision=bf16"};
    saved = capture_begin();
    rc = config_load(&c, path, 1, sets);
    capture_end(saved);
    TEST_CHECK(rc == TRI_OK && c.train.precision == DTYPE_BF16 &&
                   !strcmp(config_precision_name(c.train.precision_mode), "bf16"),
               "tf32_config_set_override", "rc %d dtype %d", rc, c.train.precision);
    if (rc == TRI_OK) config_free(&c);
    free(path);
}

int main(void) {
    log_init();
    snprintf(g_dir, sizeof g_dir, "/tmp/trident_gpu_host_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    check_shared_gpus();
    check_upload_ring();
    check_sort_bound();
    check_out16_chunks();
    check_workspace_fits_ops();
    check_plan_states_workspace();
    check_rope_table_counted();
    check_gpu_table();
    check_tf32_config();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) return 1;
    TEST_EXIT();
}

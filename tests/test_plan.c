// test_plan.c: the planner's numbers through the functions `trident plan` calls
// (plan_compute), against references written from the literature and the comm schemes, not
// from plan.c:
//   - textbook model-state sizes: a 7B model in fp32 with Adam, 16 bytes per parameter
//     (112 GB); mixed-precision Adam's 16 bytes per parameter (13B: 208 GB, and 26 GB per GPU
//     over 8 ZeRO-3 ranks); the ZeRO paper's 7.5B on 64 GPUs (Rajbhandari et al. 2020,
//     figure 1: 120, 31.4, 16.6 and 1.9 GB for stages 0-3); GB = 1e9 bytes, compared at the
//     precision the source states;
//   - the ZeRO formulas per stage and precision, exact up to the shard padding;
//   - pipeline bubbles of 27.3% (pp 4, m 8) and 8.6% (pp 4, m 32);
//   - tp and dp bytes per step from the schemes written out in tests/test_tp.sh and
//     tests/test_dp.sh;
//   - FLOPs per token 6N + 12LTC, and a 70B plan on 512 GPUs that allocates nothing.
// The equality with real runs (every memory field, every comm byte) is tests/test_plan.sh.
#include <math.h>
#include <string.h>

#include "plan/plan.h"
#include "testlib.h"

typedef struct {
    int L, C, H, T, V;
} shape;

// A resolved config of GPT-2 `s` on `world` ranks.
static void make_config(run_config *c, shape s, int tp, int pp, int world, int zero,
                        tri_dtype precision, tri_dtype grads) {
    config_defaults(c);
    c->model.n_layer = s.L, c->model.d_model = s.C, c->model.n_head = s.H;
    c->model.seq_len = s.T, c->model.vocab_size = s.V;
    c->parallel.tp = tp, c->parallel.pp = pp, c->parallel.dp = DP_AUTO, c->parallel.zero = zero;
    c->train.precision = precision, c->train.grad_dtype = grads;
    c->train.micro_batch = 1;
    c->train.global_batch = world / (tp * pp) * pp; // pp micro-batches per replica
    TRI_ASSERT(config_resolve_world(c, world) == TRI_OK);
}

static plan_device device(const char *name, int world) {
    plan_device d;
    TRI_ASSERT(plan_device_lookup(name, world, &d) == 0);
    return d;
}

// The model state of stage 0 (param + grad + master + adam bytes) and its parameters.
static double state_bytes(const run_config *c, int64_t *rank_params) {
    plan_device d = device("h100", c->parallel.tp * c->parallel.pp * c->parallel.dp);
    plan_result p;
    TRI_ASSERT(plan_compute(&p, c, &d) == TRI_OK);
    double b = (double)plan_model_state_bytes(&p.stages[0]);
    if (rank_params) *rank_params = p.stages[0].rank_params;
    plan_free(&p);
    return b;
}

static double rounded(double x, int decimals) {
    double k = pow(10, decimals);
    return round(x * k) / k;
}

static void check_textbook(void) {
    run_config c;
    int64_t P;
    // 7B (6.99 B): fp32 weights, gradients, Adam m and v, 4 bytes each.
    const shape s7 = {32, 4096, 32, 4096, 128256};
    make_config(&c, s7, 1, 1, 1, 0, DTYPE_FP32, DTYPE_FP32);
    double b = state_bytes(&c, &P);
    TEST_CHECK(rounded(b / 1e9, 0) == 112 && b == 16.0 * P, "textbook_7b_fp32_112GB",
               "%.3f GB for %lld parameters", b / 1e9, (long long)P);
    config_free(&c);
    // 13B (13.01 B): mixed precision, bf16 weights and gradients, fp32 master, m, v.
    const shape s13 = {28, 6144, 48, 2048, 50257};
    make_config(&c, s13, 1, 1, 1, 0, DTYPE_BF16, DTYPE_BF16);
    b = state_bytes(&c, &P);
    TEST_CHECK(rounded(b / 1e9, 0) == 208 && b == 16.0 * P, "textbook_13b_mixed_208GB",
               "%.3f GB for %lld parameters", b / 1e9, (long long)P);
    config_free(&c);
    make_config(&c, s13, 1, 1, 8, 3, DTYPE_BF16, DTYPE_BF16);
    b = state_bytes(&c, NULL);
    TEST_CHECK(rounded(b / 1e9, 0) == 26, "textbook_13b_zero3_dp8_26GB", "%.3f GB", b / 1e9);
    config_free(&c);
    // The ZeRO paper's 7.5B (7.50 B) on 64 GPUs, bf16 parameters and gradients, 12 bytes of
    // optimizer state per parameter.
    const shape s75 = {32, 4096, 32, 2048, 256000};
    const double paper[4] = {120, 31.4, 16.6, 1.9};
    for (int zero = 0; zero < 4; zero++) {
        make_config(&c, s75, 1, 1, 64, zero, DTYPE_BF16, DTYPE_BF16);
        b = state_bytes(&c, NULL);
        char name[64];
        snprintf(name, sizeof name, "zero_paper_7.5b_dp64_stage%d_%gGB", zero, paper[zero]);
        TEST_CHECK(rounded(b / 1e9, zero ? 1 : 0) == paper[zero], name, "%.3f GB", b / 1e9);
        config_free(&c);
    }
}

// The ZeRO formulas of each stage and precision (P the rank's parameters, N = dp), exact up
// to the padding of shard boundaries, on a small model with odd sizes and tp x pp.
static void check_zero_formulas(void) {
    const shape s = {4, 96, 4, 40, 250};
    const tri_dtype precisions[3][2] = {
        {DTYPE_FP32, DTYPE_FP32}, {DTYPE_BF16, DTYPE_BF16}, {DTYPE_BF16, DTYPE_FP32}};
    int bad = 0;
    char why[256] = "";
    for (int pr = 0; pr < 3; pr++) {
        for (int zero = 0; zero < 4; zero++) {
            for (int N = 2; N <= 8; N *= 2) {
                run_config c;
                make_config(&c, s, 2, 2, 4 * N, zero, precisions[pr][0], precisions[pr][1]);
                int64_t P;
                double b = state_bytes(&c, &P), n = N;
                double w = c.train.precision == DTYPE_BF16 ? 2 : 4;
                double g = c.train.grad_dtype == DTYPE_BF16 ? 2 : 4;
                double opt = w == 2 ? 12 : 8; // fp32 master (bf16 only) + Adam m, v
                double want[4] = {(w + g + opt) * P, (w + g) * P + opt * P / n,
                                  w * P + (g + opt) * P / n, (w + g + opt) * P / n};
                // Padding: each shard is rounded up to a multiple of N elements, and ZeRO-2/3
                // pad each bucket (a layer, wte, wpe, the final LayerNorm).
                double slack = (w + g + opt) * N * (s.L + 4);
                if (b < want[zero] || b > want[zero] + slack) {
                    bad++;
                    snprintf(why, sizeof why, "%s/%s zero %d dp %d: %.0f bytes, formula %.0f",
                             dtype_name(c.train.precision), dtype_name(c.train.grad_dtype), zero, N,
                             b, want[zero]);
                }
                config_free(&c);
            }
        }
    }
    TEST_CHECK(!bad, "zero_formulas_per_stage_and_precision", "%d off; last: %s", bad, why);
}

static double bubble_of(int pp, int m) {
    run_config c;
    make_config(&c, (shape){8, 64, 4, 32, 256}, 1, pp, pp, 1, DTYPE_FP32, DTYPE_FP32);
    c.train.global_batch = m;
    plan_device d = device("cpu", pp);
    plan_result p;
    TRI_ASSERT(plan_compute(&p, &c, &d) == TRI_OK);
    double b = p.bubble;
    plan_free(&p);
    config_free(&c);
    return b;
}

static void check_bubbles(void) {
    double a = bubble_of(4, 8), b = bubble_of(4, 32);
    TEST_CHECK(rounded(100 * a, 1) == 27.3, "bubble_pp4_m8_27.3pct", "%.4f%%", 100 * a);
    TEST_CHECK(rounded(100 * b, 1) == 8.6, "bubble_pp4_m32_8.6pct", "%.4f%%", 100 * b);
}

// tp bytes per step (tests/test_tp.sh's scheme) and dp bytes (tests/test_dp.sh's).
static void check_comm_schemes(void) {
    const shape s = {2, 32, 2, 32, 250};
    const int B = 2, GB = 8;
    for (int sp = 0; sp < 2; sp++) {
        run_config c;
        make_config(&c, s, 2, 1, 4, 0, DTYPE_FP32, DTYPE_FP32);
        c.parallel.sequence_parallel = sp, c.train.micro_batch = B, c.train.global_batch = GB;
        plan_device d = device("cpu", 4);
        plan_result p;
        TRI_ASSERT(plan_compute(&p, &c, &d) == TRI_OK);
        const uint64_t N = (uint64_t)B * s.T, C = s.C, L = s.L, m = (uint64_t)GB / (B * 2);
        uint64_t want = sp ? m * ((8 * L + 4) * N * C * 4 + 3 * N * 4) + (4 * L + 2) * C * 4
                           : m * ((4 * L + 2) * N * C * 4 + 3 * N * 4);
        uint64_t got = plan_group_bytes(&p.stages[0], COMM_GROUP_TP);
        TEST_CHECK(got == want, sp ? "comm_tp2_sp_scheme" : "comm_tp2_scheme",
                   "%llu bytes, scheme %llu", (unsigned long long)got, (unsigned long long)want);
        plan_free(&p);
        config_free(&c);
    }
    for (int zero = 0; zero < 2; zero++) {
        run_config c;
        make_config(&c, s, 1, 1, 4, zero, DTYPE_FP32, DTYPE_FP32);
        plan_device d = device("cpu", 4);
        plan_result p;
        TRI_ASSERT(plan_compute(&p, &c, &d) == TRI_OK);
        const uint64_t P = (uint64_t)p.stages[0].rank_params, up = (P + 3) / 4 * 4;
        uint64_t want = (zero == 0 ? 4 * P : 2 * 4 * up + 8) + 8; // + the loss sum
        uint64_t got = plan_group_bytes(&p.stages[0], COMM_GROUP_DP);
        TEST_CHECK(got == want, zero ? "comm_dp4_zero1_scheme" : "comm_dp4_zero0_scheme",
                   "%llu bytes, scheme %llu", (unsigned long long)got, (unsigned long long)want);
        plan_free(&p);
        config_free(&c);
    }
}

static void check_flops_and_scale(void) {
    run_config c;
    const shape s = {88, 8192, 64, 4096, 50257};
    make_config(&c, s, 8, 8, 512, 1, DTYPE_BF16, DTYPE_FP32);
    // As configs/plan-70b.yaml: activations are fp32 in this build, so they need recompute
    // and sequence parallelism to fit an 80 GB device.
    c.parallel.recompute = RECOMPUTE_FULL;
    c.parallel.sequence_parallel = 1;
    const double L = s.L, C = s.C, T = s.T, Vp = config_padded_vocab(&c);
    const double N = L * (12 * C * C + 13 * C) + Vp * C + T * C + 2 * C;
    plan_device d = device("h100", 512);
    plan_result p;
    double t0 = time_now_s();
    TRI_ASSERT(plan_compute(&p, &c, &d) == TRI_OK);
    double dt = time_now_s() - t0;
    TEST_CHECK(p.n_params == (int64_t)N, "n_params_70b", "%lld, formula %.0f",
               (long long)p.n_params, N);
    double want = 6 * (L * 12 * C * C + Vp * C) + 12 * L * T * C;
    // 6N counts wpe, biases and LayerNorms too (0.1% of N), which are no matmul.
    const double matmuls = p.flops_per_token - 12 * L * T * C;
    TEST_CHECK(p.flops_per_token == want && fabs(matmuls / (6 * N) - 1) < 1e-3,
               "flops_per_token_6N_plus_attention", "%.6g, want %.6g (6N %.6g)", p.flops_per_token,
               want, 6 * N);
    uint64_t total = 0;
    for (int k = 0; k < MEM_KIND_COUNT; k++) total += p.stages[0].mem[k];
    TEST_CHECK(p.pp == 8 && p.stages[0].mem_total == total && p.fits && p.mfu > 0 && p.mfu < 1 &&
                   dt < 1.0,
               "plan_70b_on_512", "pp %d fits %d mfu %.3f in %.3f s", p.pp, p.fits, p.mfu, dt);
    plan_free(&p);
    config_free(&c);
    plan_device x;
    TEST_CHECK(plan_device_lookup("H200", 8, &x) == 0 && x.mem_bytes == 141e9 &&
                   plan_device_lookup("tpu", 8, &x) == -1 &&
                   plan_device_lookup("cpu", 2, &x) == 0 && x.mem_bytes > 0,
               "device_table", "lookup failed");
}

// Past its replay limit plan_compute replays two smaller micro-batch counts and extrapolates
// the communication (plan.c): the same numbers, field for field, as replaying every call of
// the step, over schedules, pipeline depths, virtual stages, micro-batch counts (each
// residue mod pp), ZeRO stages and gathers, tp with and without sequence parallelism, and
// recompute. Also the memory (the slots from sched_max_in_flight).
static int replay_case(schedule_kind sched, int pp, int v, int m, int tp, int sp, int dp, int zero,
                       int gather, int recompute, char *why, size_t n) {
    run_config c;
    config_defaults(&c);
    c.model.n_layer = 24, c.model.d_model = 16, c.model.n_head = 2;
    c.model.seq_len = 8, c.model.vocab_size = 64, c.model.vocab_pad_to = 16;
    c.parallel.tp = tp, c.parallel.pp = pp, c.parallel.dp = dp, c.parallel.virtual_stages = v;
    c.parallel.schedule = sched, c.parallel.zero = zero, c.parallel.sequence_parallel = sp;
    c.parallel.zero3_gather = (zero3_gather_kind)gather;
    c.parallel.recompute = (recompute_kind)recompute;
    c.parallel.bucket_mb = 0.002; // several buckets per chunk
    c.train.micro_batch = 1, c.train.global_batch = m * dp;
    TRI_ASSERT(config_resolve_world(&c, tp * pp * dp) == TRI_OK);
    plan_device d = device("h100", tp * pp * dp);
    plan_result full, ext;
    plan_set_replay_limit(1 << 30);
    TRI_ASSERT(plan_compute(&full, &c, &d) == TRI_OK);
    plan_set_replay_limit(1);
    TRI_ASSERT(plan_compute(&ext, &c, &d) == TRI_OK);
    plan_set_replay_limit(0);
    int ok = 1;
    for (int r = 0; r < pp && ok; r++) {
        const plan_stage *a = &full.stages[r], *b = &ext.stages[r];
        ok = !memcmp(&a->comm, &b->comm, sizeof a->comm) && a->n_slots == b->n_slots &&
             !memcmp(a->mem, b->mem, sizeof a->mem) && a->t_compute == b->t_compute;
        if (!ok)
            snprintf(why, n,
                     "%s pp %d v %d m %d tp %d sp %d dp %d zero %d gather %d recompute %d: "
                     "stage %d differs (pp bytes %llu vs %llu, dp bytes %llu vs %llu)",
                     config_schedule_name(sched), pp, v, m, tp, sp, dp, zero, gather, recompute, r,
                     (unsigned long long)plan_group_bytes(a, COMM_GROUP_PP),
                     (unsigned long long)plan_group_bytes(b, COMM_GROUP_PP),
                     (unsigned long long)plan_group_bytes(a, COMM_GROUP_DP),
                     (unsigned long long)plan_group_bytes(b, COMM_GROUP_DP));
    }
    plan_free(&full);
    plan_free(&ext);
    config_free(&c);
    return ok;
}

static void check_replay_extrapolation(void) {
    const schedule_kind scheds[] = {SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED};
    const struct {
        int dp, zero, gather;
    } zs[] = {{1, 0, 0}, {2, 0, 0}, {2, 1, 0}, {2, 2, 0}, {2, 3, 0}, {2, 3, 1}};
    int cases = 0, bad = 0;
    char first[400] = "";
    for (int si = 0; si < 3; si++)
        for (int pp = 1; pp <= 4; pp++)
            for (int v = 1; v <= 3; v++) {
                const schedule_kind s = scheds[si];
                if ((s == SCHEDULE_INTERLEAVED) != (v > 1) && !(s == SCHEDULE_GPIPE && v > 1))
                    continue;
                if ((v > 1 && pp == 1) || 24 % (pp * v)) continue;
                // Past m2 = 2 pp + m % pp (plan.c), every residue mod pp, and one far out.
                const int ms[] = {3 * pp, 3 * pp + 1, 4 * pp + pp - 1, 7 * pp + 2, 97};
                for (int mi = 0; mi < 5; mi++) {
                    const int m = ms[mi];
                    if (s == SCHEDULE_INTERLEAVED && m % pp) continue;
                    for (int zi = 0; zi < 6; zi++)
                        for (int tpsp = 0; tpsp < 3; tpsp++)
                            for (int rc = 0; rc < 2; rc++) {
                                char why[400];
                                const int tp = tpsp ? 2 : 1, sp = tpsp == 2;
                                cases++;
                                if (!replay_case(s, pp, v, m, tp, sp, zs[zi].dp, zs[zi].zero,
                                                 zs[zi].gather, rc, why, sizeof why) &&
                                    !bad++)
                                    snprintf(first, sizeof first, "%s", why);
                            }
                }
            }
    TEST_CHECK(!bad && cases > 1000, "plan_replay_extrapolation_equals_full_replay",
               "%d of %d cases differ; first: %s", bad, cases, first);
}

int main(void) {
    check_replay_extrapolation();
    check_textbook();
    check_zero_formulas();
    check_bubbles();
    check_comm_schemes();
    check_flops_and_scale();
    TEST_EXIT();
}

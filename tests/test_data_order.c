// test_data_order: the shuffled and blended order of the training data (io/data.h's
// data_permute, io/data_blend.h's schedule, io/data_order.h's order and cursor).
//
// References written here, not through the code under test: a permutation is checked with a
// bitmap of the positions it hits; the schedule's bounds come straight from the weights
// (floor and ceiling of each share, the share times the steps); the plain order is DESIGN.md's
// formula (step s, position p: sample s G + p); samples are identified by their first token,
// which the test writes as the sample's own position in the concatenated shards.
#include "base/common.h"
#include "io/data.h"
#include "io/data_blend.h"
#include "io/data_order.h"
#include "fuzzlib.h"
#include "testlib.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_state = 0x1234;
static uint64_t rnd(void) { return fuzz_rnd(&rng_state); }
static int rnd_below(int n) { return (int)(rnd() % (uint64_t)n); }

// ---- the permutation ----

static void test_permutation(void) {
    const uint64_t sizes[] = {1,   2,   3,   5,    7,    13,   64,    97,    127,
                              128, 255, 256, 1000, 1023, 4099, 65536, 65537, 1000000};
    const uint64_t seeds[] = {0, 1234, 0x8000000000000005ULL};
    int bijective = 1, deterministic = 1, epochs_differ = 1, seeds_differ = 1, spread = 1;
    char why[256] = "";
    for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++) {
        const uint64_t n = sizes[a];
        unsigned char *hit = xmalloc(n);
        uint64_t *e0 = xmalloc(n * sizeof(uint64_t));
        for (size_t b = 0; b < sizeof seeds / sizeof *seeds; b++) {
            for (uint64_t epoch = 0; epoch < 2; epoch++) {
                memset(hit, 0, n);
                uint64_t same_as_e0 = 0, fixed = 0;
                for (uint64_t i = 0; i < n; i++) {
                    const uint64_t p = data_permute(n, seeds[b], epoch, i);
                    if (p >= n || hit[p]) {
                        if (bijective)
                            snprintf(why, sizeof why,
                                     "n %llu seed %llu epoch %llu: position %llu "
                                     "-> %llu (%s)",
                                     (unsigned long long)n, (unsigned long long)seeds[b],
                                     (unsigned long long)epoch, (unsigned long long)i,
                                     (unsigned long long)p, p >= n ? "out of range" : "hit twice");
                        bijective = 0;
                        break;
                    }
                    hit[p] = 1;
                    if (epoch == 0) e0[i] = p;
                    else same_as_e0 += e0[i] == p;
                    fixed += p == i;
                    if (i % 97 == 0 && data_permute(n, seeds[b], epoch, i) != p) deterministic = 0;
                }
                // Another epoch is another order (for n >= 64, almost nothing in place), and few
                // positions stay where they were (a random permutation keeps about one).
                if (epoch == 1 && n >= 64 && same_as_e0 > n / 8) epochs_differ = 0;
                if (n >= 64 && fixed > n / 8) spread = 0;
            }
            if (b == 1 && n >= 64) {
                uint64_t same = 0;
                for (uint64_t i = 0; i < n; i++) same += data_permute(n, seeds[0], 0, i) == e0[i];
                if (same > n / 8) seeds_differ = 0;
            }
        }
        free(hit);
        free(e0);
    }
    TEST_CHECK(bijective,
               "permutation: a bijection of [0, n) for n in 1..10^6, three seeds, two "
               "epochs",
               "%s", why);
    TEST_CHECK(deterministic, "permutation: a pure function of (n, key, epoch, position)",
               "a second call differed");
    TEST_CHECK(epochs_differ, "permutation: every epoch in another order",
               "epoch 1 kept more "
               "than 1/8 of epoch 0's positions");
    TEST_CHECK(seeds_differ, "permutation: another seed, another order",
               "seed 1234 kept more than 1/8 of seed 0's positions");
    TEST_CHECK(spread, "permutation: moves the samples (few fixed points)",
               "more than 1/8 of the positions stayed in place");
}

// ---- the blend schedule ----

// A schedule of random weights run for `steps`, checked step by step against the bounds:
// per step floor/ceil of the quantised share, and cumulatively within one of it (and of the
// exact share, to within what quantisation allows).
static int check_schedule(int n, const double *w, int G, int steps, char *why, size_t wn) {
    blend_schedule b;
    blend_init(&b, w, n, G);
    double wsum = 0.0;
    for (int i = 0; i < n; i++) wsum += w[i];
    int64_t *cum = xcalloc((size_t)n, sizeof(int64_t));
    int *counts = xcalloc((size_t)n, sizeof(int)), ok = 1;
    for (int t = 1; t <= steps && ok; t++) {
        blend_step(&b, counts);
        int64_t total = 0;
        for (int i = 0; i < n && ok; i++) {
            const double q = (double)b.base[i] + (double)b.frac[i] / (double)BLEND_UNITS;
            const double exact = w[i] / wsum * G;
            total += counts[i];
            cum[i] += counts[i];
            if (counts[i] != (int)floor(q) && counts[i] != (int)ceil(q)) {
                snprintf(why, wn, "step %d source %d: %d samples, share %.6f a step", t, i,
                         counts[i], q);
                ok = 0;
            } else if (fabs((double)cum[i] - q * t) >= 1.0) {
                snprintf(why, wn, "step %d source %d: %lld samples in all, share x steps %.4f", t,
                         i, (long long)cum[i], q * t);
                ok = 0;
            } else if (fabs((double)cum[i] - exact * t) >= 1.0 + t * (double)G / 1e6) {
                snprintf(why, wn, "step %d source %d: %lld samples, exact share x steps %.4f", t, i,
                         (long long)cum[i], exact * t);
                ok = 0;
            }
        }
        if (ok && total != G) {
            snprintf(why, wn, "step %d: %lld samples, not %d", t, (long long)total, G);
            ok = 0;
        }
    }
    if (ok && b.early) {
        snprintf(why, wn, "%lld extras before their window", (long long)b.early);
        ok = 0;
    }
    free(cum);
    free(counts);
    blend_free(&b);
    return ok;
}

static void test_schedule(void) {
    char why[256] = "";
    int ok = 1, cases = 0;
    const int batches[] = {1, 2, 3, 5, 8, 16, 31, 64, 100};
    for (int c = 0; c < 300 && ok; c++, cases++) {
        const int n = 2 + rnd_below(11), G = batches[rnd_below(9)];
        double w[16];
        for (int i = 0; i < n; i++) {
            const int kind = rnd_below(4); // uniform, tiny, heavy, equal
            w[i] = kind == 0   ? 0.01 + (double)(rnd() % 1000)
                   : kind == 1 ? 0.01 + (rnd() % 7) * 0.01
                   : kind == 2 ? 1000.0
                               : 1.0;
        }
        ok = check_schedule(n, w, G, 400 + rnd_below(400), why, sizeof why);
    }
    // A case that the largest-lag rule gets wrong (fractions 9/12, 6/12, 6/12, 11/12, ...).
    const double hard[] = {9, 6, 6, 11, 11, 11, 6};
    if (ok) ok = check_schedule(7, hard, 5, 2000, why, sizeof why);
    const double two[] = {0.6, 0.4};
    if (ok) ok = check_schedule(2, two, 16, 100000, why, sizeof why);
    TEST_CHECK(ok,
               "blend: every step gives each source the floor or ceiling of its share, and "
               "every prefix is within one sample of it (300 random schedules)",
               "case %d: %s", cases, why);

    // The state after t steps, set on a fresh schedule, continues the same steps.
    int resumes = 1;
    for (int c = 0; c < 50 && resumes; c++) {
        const int n = 2 + rnd_below(6), G = batches[rnd_below(9)], t0 = rnd_below(300);
        double w[8];
        for (int i = 0; i < n; i++) w[i] = 0.05 + (double)(rnd() % 100);
        blend_schedule a, b;
        blend_init(&a, w, n, G);
        blend_init(&b, w, n, G);
        int ca[8], cb[8], bad;
        for (int t = 0; t < t0; t++) blend_step(&a, ca);
        resumes = !blend_set_state(&b, a.t, a.extra, &bad, why, sizeof why);
        for (int t = 0; t < 200 && resumes; t++) {
            blend_step(&a, ca);
            blend_step(&b, cb);
            resumes = !memcmp(ca, cb, (size_t)n * sizeof(int));
        }
        blend_free(&a);
        blend_free(&b);
    }
    TEST_CHECK(resumes, "blend: a schedule set to the state of step t continues identically", "%s",
               why);

    // States no schedule reaches are refused.
    const double w3[] = {0.5, 0.3, 0.2};
    blend_schedule b;
    blend_init(&b, w3, 3, 3); // shares 1.5, 0.9, 0.6: extras 0.5, 0.9, 0.6 -> R = 2
    int bad;
    const int64_t good[] = {5, 9, 6}, sum_off[] = {5, 9, 5}, lag_off[] = {7, 7, 6},
                  negative[] = {-1, 10, 11};
    const int accept = !blend_set_state(&b, 10, good, &bad, why, sizeof why);
    const int refuse = blend_set_state(&b, 10, sum_off, &bad, why, sizeof why) &&
                       blend_set_state(&b, 10, lag_off, &bad, why, sizeof why) &&
                       blend_set_state(&b, 10, negative, &bad, why, sizeof why);
    blend_free(&b);
    TEST_CHECK(accept && refuse, "blend: a recorded state is checked (sum of extras, lag, sign)",
               "accept %d refuse %d (%s)", accept, refuse, why);

    // Within a step: every prefix of the batch holds each source within one of its part.
    int even = 1;
    for (int c = 0; c < 200 && even; c++) {
        const int n = 1 + rnd_below(6), G = 1 + rnd_below(64);
        int counts[8] = {0}, left = G;
        for (int i = 0; i < n - 1; i++) {
            counts[i] = rnd_below(left + 1);
            left -= counts[i];
        }
        counts[n - 1] = left;
        int *src = xmalloc((size_t)G * sizeof(int)), *nth = xmalloc((size_t)G * sizeof(int));
        blend_interleave(counts, n, G, src, nth);
        int seen[8] = {0};
        for (int p = 0; p < G && even; p++) {
            even = nth[p] == seen[src[p]]++; // each source's samples in order
            for (int i = 0; i < n && even; i++)
                even = fabs(seen[i] - (double)counts[i] * (p + 1) / G) < 1.0;
        }
        free(src);
        free(nth);
    }
    TEST_CHECK(even,
               "blend: sources spread over the batch (every prefix within one sample, 200 layouts)",
               "a prefix held a source unevenly");
}

// ---- the order over real shards ----

static char g_dir[256];

// Shards whose token at concatenated position x is x: sample k of the stream (T tokens and
// one more) starts with the token k*T + (its shard's offset), which identifies it.
static void write_shards(const char *prefix, int n_shards, int64_t per_shard, uint32_t base) {
    for (int s = 0; s < n_shards; s++) {
        uint32_t *tok = xmalloc((size_t)per_shard * sizeof(uint32_t));
        for (int64_t i = 0; i < per_shard; i++) tok[i] = base + (uint32_t)(s * per_shard + i);
        char path[512];
        snprintf(path, sizeof path, "%s/%s_%03d.bin", g_dir, prefix, s);
        TRI_ASSERT(data_write_shard(path, tok, per_shard, 1) == TRI_OK);
        free(tok);
    }
}

static config_data_sources sources(int n, const char *const *paths, const double *w) {
    config_data_sources s = {xcalloc((size_t)n, sizeof(config_data_source)), n, w != NULL};
    for (int i = 0; i < n; i++) {
        char glob[512];
        snprintf(glob, sizeof glob, "%s/%s_*.bin", g_dir, paths[i]);
        s.items[i].path = xstrdup(glob);
        s.items[i].weight = w ? w[i] : 1.0;
    }
    return s;
}

static void sources_free(config_data_sources *s) {
    for (int i = 0; i < s->n; i++) free(s->items[i].path);
    free(s->items);
}

#define T_TEST 4
#define V_TEST (1 << 24)

// Steps [from, to) of an order as the first token of every sample, read in micro-batches of
// B by dp replicas of G/dp positions each (any layout reads the same positions).
static void read_steps(data_order *o, int from, int to, int dp, int B, uint32_t *out) {
    const int G = o->G;
    int in[64 * T_TEST], tg[64 * T_TEST];
    for (int s = from; s < to; s++)
        for (int r = 0; r < dp; r++)
            for (int m = 0; m < G / dp / B; m++) {
                const int pos = r * (G / dp) + m * B;
                data_order_batch(o, s, pos, B, in, tg);
                for (int b = 0; b < B; b++)
                    out[(size_t)(s - from) * G + pos + b] = (uint32_t)in[b * T_TEST];
            }
}

static void test_order(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_data_order.XXXXXX");
    TRI_ASSERT(mkdtemp(g_dir));
    // a: 3 shards of 41 tokens (10 samples each), b: 1 shard of 29 (7 samples).
    write_shards("a", 3, 41, 0);
    write_shards("b", 1, 29, 1u << 20);
    const char *const ab[] = {"a", "b"}, *const a_only[] = {"a"};
    const int G = 8, steps = 20;
    uint32_t *x = xmalloc((size_t)steps * G * sizeof(uint32_t)),
             *y = xmalloc((size_t)steps * G * sizeof(uint32_t));

    // Plain order, one glob: DESIGN.md's stream, step s position p = sample s G + p.
    config_data_sources one = sources(1, a_only, NULL);
    data_order o;
    TRI_ASSERT(data_order_open(&o, &one, 0, 7, T_TEST, V_TEST, G) == TRI_OK);
    read_steps(&o, 0, steps, 2, 2, x);
    int plain = 1;
    for (int s = 0; s < steps; s++)
        for (int p = 0; p < G; p++) {
            const int64_t k = ((int64_t)s * G + p) % 30, shard = k / 10;
            plain = plain && x[s * G + p] == (uint32_t)(shard * 41 + (k % 10) * T_TEST);
        }
    data_order_close(&o);
    TEST_CHECK(plain,
               "order: data.shuffle false is the plain stream (step s takes samples "
               "[sG, (s+1)G))",
               "a sample differs");

    // Shuffled: each epoch of 30 samples reads every sample once; the epochs differ.
    TRI_ASSERT(data_order_open(&o, &one, 1, 7, T_TEST, V_TEST, G) == TRI_OK);
    read_steps(&o, 0, 15, 1, 8, x); // 120 samples: 4 epochs
    int once = 1, differ = 0;
    for (int e = 0; e < 4; e++) {
        unsigned char seen[30] = {0};
        for (int i = 0; i < 30; i++) {
            const uint32_t v = x[e * 30 + i], shard = v / 41, k = shard * 10 + (v % 41) / T_TEST;
            once = once && k < 30 && !seen[k];
            if (k < 30) seen[k] = 1;
            differ += e > 0 && x[e * 30 + i] != x[i];
        }
    }
    data_order_close(&o);
    TEST_CHECK(once && differ > 30,
               "order: shuffled, every epoch reads each sample once, in a "
               "new order",
               "once %d, %d positions differ from epoch 0", once, differ);

    // A blend read by different layouts (dp 1 in one micro-batch, dp 2 and 4 in small ones)
    // gives the same batches; each step draws 4 or 5 from a (weight 0.6) and 3 or 4 from b.
    const double w[] = {0.6, 0.4};
    config_data_sources blend = sources(2, ab, w);
    int layouts = 1, shares = 1;
    const int lay[][2] = {{1, 8}, {2, 2}, {4, 1}, {2, 4}};
    for (int l = 0; l < 4; l++) {
        TRI_ASSERT(data_order_open(&o, &blend, 1, 99, T_TEST, V_TEST, G) == TRI_OK);
        read_steps(&o, 0, steps, lay[l][0], lay[l][1], l ? y : x);
        data_order_close(&o);
        if (l) layouts = layouts && !memcmp(x, y, (size_t)steps * G * sizeof(uint32_t));
    }
    for (int s = 0; s < steps; s++) {
        int from_b = 0;
        for (int p = 0; p < G; p++) from_b += x[s * G + p] >= (1u << 20);
        shares = shares && (from_b == 3 || from_b == 4);
    }
    TEST_CHECK(layouts && shares,
               "order: a blend reads the same batches on every layout, each "
               "source its share",
               "layouts %d shares %d", layouts, shares);

    // A checkpoint's cursor at step 7, resumed (on another layout), continues the same steps.
    TRI_ASSERT(data_order_open(&o, &blend, 1, 99, T_TEST, V_TEST, G) == TRI_OK);
    read_steps(&o, 0, 7, 1, 8, y);
    data_cursor c;
    data_order_cursor(&o, 7, &c);
    data_order_close(&o);
    TRI_ASSERT(data_order_open(&o, &blend, 1, 99, T_TEST, V_TEST, G) == TRI_OK);
    const tri_status rc = data_order_resume(&o, &c, "test");
    read_steps(&o, 7, steps, 2, 2, y + 7 * G);
    data_order_close(&o);
    TEST_CHECK(rc == TRI_OK && !memcmp(x, y, (size_t)steps * G * sizeof(uint32_t)),
               "order: a resume from the cursor of step 7 continues the same batches",
               "rc %d, the batches differ", rc);

    // What a resume compares: the same order, and each kind of difference named.
    run_config cfg;
    config_defaults(&cfg);
    for (int i = 0; i < cfg.data.train.n; i++) free(cfg.data.train.items[i].path);
    free(cfg.data.train.items);
    cfg.data.train = blend;
    cfg.data.shuffle = 1;
    cfg.run.seed = 99;
    char diff[2048];
    int same = data_order_compare(&c, &cfg, diff, sizeof diff) == 0;
    cfg.data.shuffle = 0;
    int n_shuffle = data_order_compare(&c, &cfg, diff, sizeof diff);
    const int names_shuffle = strstr(diff, "data.shuffle: true in the checkpoint, false") != NULL;
    cfg.data.shuffle = 1;
    cfg.run.seed = 5;
    const int n_seed = data_order_compare(&c, &cfg, diff, sizeof diff);
    const int names_seed = strstr(diff, "run.seed") != NULL;
    cfg.run.seed = 99;
    cfg.data.train.items[1].weight = 0.5;
    const int n_weight = data_order_compare(&c, &cfg, diff, sizeof diff);
    const int names_train = strstr(diff, "data.train:") && strstr(diff, "weight: 0.5");
    cfg.data.train.items[1].weight = 0.4;
    cfg.data.train = one;
    const int n_sources = data_order_compare(&c, &cfg, diff, sizeof diff);
    memset(&cfg.data.train, 0, sizeof cfg.data.train); // borrowed: freed below
    TEST_CHECK(same && n_shuffle == 1 && names_shuffle && n_seed == 1 && names_seed &&
                   n_weight == 1 && names_train && n_sources == 1,
               "order: data_order_compare finds no difference in the same order and names each "
               "one (shuffle, seed, weights, sources)",
               "same %d shuffle %d/%d seed %d/%d weight %d/%d sources %d: %s", same, n_shuffle,
               names_shuffle, n_seed, names_seed, n_weight, names_train, n_sources, diff);
    config_free(&cfg);
    data_cursor_free(&c);

    // A one-item list is the string form's order, whatever its weight.
    const double w1[] = {3.0};
    config_data_sources listed = sources(1, a_only, w1);
    TRI_ASSERT(data_order_open(&o, &one, 1, 7, T_TEST, V_TEST, G) == TRI_OK);
    read_steps(&o, 0, steps, 1, 8, x);
    data_order_close(&o);
    TRI_ASSERT(data_order_open(&o, &listed, 1, 7, T_TEST, V_TEST, G) == TRI_OK);
    read_steps(&o, 0, steps, 1, 8, y);
    data_order_close(&o);
    TEST_CHECK(!memcmp(x, y, (size_t)steps * G * sizeof(uint32_t)),
               "order: a one-source list reads what the single glob reads", "the batches differ");

    // What shuffling costs a read (printed, not asserted: timings are the machine's): 8192
    // samples of 1024 tokens from a 4M-token shard, plain and shuffled.
    {
        const int64_t ntok = 1 << 22;
        uint32_t *tok = xmalloc((size_t)ntok * sizeof(uint32_t));
        for (int64_t i = 0; i < ntok; i++) tok[i] = (uint32_t)(rnd() % 50000);
        char path[512];
        snprintf(path, sizeof path, "%s/big_000.bin", g_dir);
        TRI_ASSERT(data_write_shard(path, tok, ntok, 0) == TRI_OK);
        free(tok);
        const char *const big[] = {"big"};
        config_data_sources bs = sources(1, big, NULL);
        int *in = xmalloc(64 * 1024 * sizeof(int)), *tg = xmalloc(64 * 1024 * sizeof(int));
        double ms[2];
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            TRI_ASSERT(data_order_open(&o, &bs, shuffle, 7, 1024, 65536, 64) == TRI_OK);
            data_order_batch(&o, 0, 0, 64, in, tg); // the pages mapped once
            const double t0 = time_now_s();
            for (int s = 1; s <= 128; s++) data_order_batch(&o, s, 0, 64, in, tg);
            ms[shuffle] = 1e3 * (time_now_s() - t0);
            data_order_close(&o);
        }
        printf("# 8192 samples of 1024 tokens: %.1f ms in plain order, %.1f ms shuffled\n", ms[0],
               ms[1]);
        free(in);
        free(tg);
        sources_free(&bs);
    }

    sources_free(&one);
    sources_free(&blend);
    sources_free(&listed);
    free(x);
    free(y);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

int main(void) {
    log_init();
    test_permutation();
    test_schedule();
    test_order();
    TEST_EXIT();
}

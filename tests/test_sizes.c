// test_sizes.c: sizes that user values imply (issue 15, defect 1). The checked arithmetic of
// base/checked.h at its edges; the parameter table's closed-form sizes (params_size_of)
// against the table params_build makes, over shapes, tp, pp, virtual stages and stages; the
// config's size rules on the reproducers of the issue (each refused with the key and the
// bytes named, where the old code overflowed an int and wrote past a buffer) and on their
// neighbours that must still pass; the nesting limit of YAML input (configs, --set values,
// manifests); the schedule's closed-form slots at an m no table is built for.
#include <limits.h>

#include "base/checked.h"
#include "base/yaml_limit.h"
#include "config_harness.h"
#include "model/model.h"
#include "model/params.h"
#include "parallel/sched.h"
#include "testlib.h"

static void test_checked(void) {
    int64_t r;
    int ok = ck_mul_i64(INT64_MAX / 2, 2, &r) && r == INT64_MAX - 1;
    ok = ok && !ck_mul_i64(INT64_MAX / 2 + 1, 2, &r) && r == INT64_MAX;
    ok = ok && ck_mul_i64(0, INT64_MAX, &r) && r == 0 && !ck_mul_i64(-1, 2, &r);
    ok = ok && ck_add_i64(INT64_MAX - 1, 1, &r) && !ck_add_i64(INT64_MAX, 1, &r);
    ok = ok && sat_mul_u64(UINT64_MAX / 3, 3) == UINT64_MAX - UINT64_MAX % 3 &&
         sat_mul_u64(UINT64_MAX / 3 + 1, 3) == UINT64_MAX &&
         sat_add_u64(UINT64_MAX, 1) == UINT64_MAX &&
         sat_mul3_size(1u << 31, 1u << 31, 4) == SIZE_MAX &&
         sat_mul3_size(1u << 20, 1u << 20, 4) == (size_t)1 << 42;
    TEST_CHECK(ok, "checked arithmetic at its edges",
               "a product or sum wrapped or saturated early");
}

// The V placement of zbv (DESIGN.md "Layer placement"): each rank's chunks hold the layers of
// the virtual stages sched_stage_rank_chunk gives them, every layer on exactly one rank, the
// embedding and the final norm and LM head (GPT-2: wte not copied, no embedding-group sum) on
// rank 0 alone.
static void test_vplace(void) {
    int bad = 0, cases = 0;
    char first[200] = "";
    for (int pp = 2; pp <= 6; pp++)
        for (int lc = 1; lc <= 2; lc++)
            for (int llama = 0; llama <= 1; llama++) {
                const int L = 2 * pp * lc;
                model_config mc = {.n_layer = L,
                                   .n_head = 2,
                                   .d_model = 8,
                                   .seq_len = 4,
                                   .vocab_size = 50,
                                   .vocab_pad_to = 8};
                if (llama) {
                    mc.arch = (char *)"llama", mc.n_kv_head = 1, mc.ffn_hidden = 16;
                    mc.tie_embeddings = 1;
                }
                int *owner = xcalloc((size_t)L, sizeof(int));
                for (int r = 0; r < pp; r++) {
                    const model_shard sh = {1, 0, pp, r, 2, 1};
                    param_table pt;
                    params_build(&pt, &mc, &sh);
                    cases++;
                    for (int c = 0; c < 2; c++) {
                        int rank, chunk;
                        sched_stage_rank_chunk(SCHEDULE_ZBV, pp, 2, model_shard_stage(&sh, c),
                                               &rank, &chunk);
                        const int first_layer = params_chunk_first_layer(&pt, c);
                        if (rank != r || chunk != c ||
                            first_layer != model_shard_stage(&sh, c) * lc)
                            bad++;
                        for (int l = first_layer; l < first_layer + lc; l++) owner[l]++;
                    }
                    const int ends = (pt.wte >= 0) + (pt.lnfw >= 0);
                    if (ends != (r == 0 ? 2 : 0) || pt.wte_is_copy || pt.wte_shared) bad++;
                    if (bad && !first[0])
                        snprintf(first, sizeof first, "pp %d Lc %d llama %d rank %d", pp, lc, llama,
                                 r);
                    params_free(&pt);
                }
                for (int l = 0; l < L; l++) bad += owner[l] != 1;
                free(owner);
            }
    TEST_CHECK(!bad && cases > 20, "zbv's V placement: stages, layers and both ends on rank 0",
               "%d bad of %d: %s", bad, cases, first);
}

// params_size_of against params_build, every stage of every layout of a set of shapes.
static void test_params_size(void) {
    int cases = 0, bad = 0;
    char first[200] = "";
    const int Ls[] = {1, 2, 6, 12}, Cs[] = {4, 12, 24}, Vs[] = {1, 50, 257};
    for (int li = 0; li < 4; li++)
        for (int ci = 0; ci < 3; ci++)
            for (int vi = 0; vi < 3; vi++)
                for (int tp = 1; tp <= 4; tp *= 2)
                    for (int pp = 1; pp <= 4; pp++)
                        for (int v = 1; v <= 3; v++) {
                            const int L = Ls[li], C = Cs[ci];
                            if (L % (pp * v) || (v > 1 && pp == 1) || C % tp) continue;
                            model_config mc = {.n_layer = L,
                                               .n_head = tp,
                                               .d_model = C,
                                               .seq_len = 7,
                                               .vocab_size = Vs[vi],
                                               .vocab_pad_to = 8};
                            // The whole model as exports lay it out (tp 1, the run's padding).
                            param_table full;
                            params_build_full(&full, &mc, tp);
                            params_free(&full);
                            // zbv's V placement too (v 2): rank 0 holds both ends.
                            for (int r = 0; r < pp * (v == 2 ? 2 : 1); r++) {
                                model_shard sh = {tp, tp - 1, pp, r % pp, v, r >= pp};
                                params_size ps;
                                param_table pt;
                                params_build(&pt, &mc, &sh);
                                cases++;
                                if (params_size_of(&mc, &sh, &ps) != 0 ||
                                    ps.entries != pt.n_entries ||
                                    ps.local_numel != (int64_t)pt.local_numel ||
                                    ps.global_numel != pt.global_numel) {
                                    if (!bad++)
                                        snprintf(first, sizeof first,
                                                 "L %d C %d V %d tp %d pp %d v %d rank %d: "
                                                 "entries %lld/%d numel %lld/%zu",
                                                 L, C, Vs[vi], tp, pp, v, r, (long long)ps.entries,
                                                 pt.n_entries, (long long)ps.local_numel,
                                                 pt.local_numel);
                                }
                                params_free(&pt);
                            }
                        }
    TEST_CHECK(!bad && cases > 500, "params_size_of equals the built table", "%d of %d: %s", bad,
               cases, first);
    test_vplace();
    // Past 64 bits: -1, nothing built.
    model_config huge = {.n_layer = INT_MAX,
                         .n_head = 1,
                         .d_model = INT_MAX / 4,
                         .seq_len = 1,
                         .vocab_size = 1,
                         .vocab_pad_to = 1};
    model_shard one = {1, 0, 1, 0, 1, 0};
    params_size ps;
    TEST_CHECK(params_size_of(&huge, &one, &ps) == -1, "params_size_of refuses past INT64_MAX",
               "returned 0 (local %lld)", (long long)ps.local_numel);
}

// A load (and, when it passes, a resolve for `world`) of tests/configs/tiny.yaml's model
// with `sets`: the status of the step that failed, its stderr in g_err.
static tri_status check_tiny(char **sets, int world) {
    run_config cfg;
    tri_status rc = load_text(&cfg,
                              "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 32, "
                              "vocab_size: 256, vocab_pad_to: 64}\n"
                              "train: {micro_batch: 4, global_batch: 8, steps: 6}\n",
                              sets);
    if (rc != TRI_OK) return rc;
    rc = resolve(&cfg, world);
    config_free(&cfg);
    return rc;
}

static void test_rules(void) {
    // The reproducers, each refused with its key and the size named.
    tri_status rc = check_tiny(SETS("model.n_layer=357913942"), 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG &&
                   has("model.n_layer: 357913942 layers of d_model 32 put 4.55e+12 parameters "
                       "on one rank") &&
                   has("18.2 TB at 4 bytes each") && has("16 TiB"),
               "n_layer 357913942: refused with the parameters and bytes", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.d_model=1073741824", "model.n_head=1"), 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("model.d_model: the MLP width 4 * model.d_model") &&
                   has("d_model can be at most 536870911"),
               "d_model 1073741824: refused (4 * d_model passes an int)", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.d_model=536870912"), 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("(4 * 536870912 = 2147483648)"),
               "d_model 536870912: refused", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.d_model=268435456"), 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("model.d_model: one layer of d_model 268435456") &&
                   has("EB at 4 bytes each"),
               "d_model 268435456: a layer past the limit", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("train.micro_batch=134217728", "train.global_batch=134217728"), 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG &&
                   has("train.micro_batch: train.micro_batch * model.seq_len (134217728 * 32 = "
                       "4294967296) rows"),
               "rows per micro-batch past an int", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.n_layer=2000000", "model.d_model=2", "model.n_head=1"), 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("24000004 parameter tensors, more than the 1048576"),
               "a table past CONFIG_RANK_ENTRIES_MAX", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.n_layer=2000000", "model.d_model=2", "model.n_head=1",
                         "parallel.pp=2", "parallel.schedule=gpipe"),
                    2);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("12000002 parameter tensors"),
               "pp halves the table, still past", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.vocab_size=2000000000", "model.d_model=4096", "model.n_head=1",
                         "model.vocab_pad_to=1"),
                    1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("model.vocab_size: a vocabulary of 2000000000"),
               "vocabulary past the limit names vocab_size", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.seq_len=2000000000", "model.d_model=4096", "model.n_head=1",
                         "train.micro_batch=1", "train.global_batch=1"),
                    1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("model.seq_len: position embeddings of 2000000000"),
               "position embeddings past the limit name seq_len", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("train.steps=2147483647", "train.global_batch=2147483647",
                         "model.seq_len=100000", "train.micro_batch=1"),
                    1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("train.steps: train.steps * train.global_batch"),
               "the run's tokens past int64", "rc %d: %s", rc, g_err);

    // With the world: the schedule's pairs and a rank's buffers.
    rc = check_tiny(SETS("train.global_batch=536870912", "train.micro_batch=1"), 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("(micro-batch, chunk) pairs per step, more than the "
                                           "268435456"),
               "pairs past SCHED_MAX_PAIRS", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("parallel.schedule=gpipe", "train.global_batch=1048576",
                         "train.micro_batch=1", "model.d_model=4096", "model.n_head=32"),
                    1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("parallel.schedule: pipeline stage 0 of 1 would hold") &&
                   has("activation_bytes 19.3 TB") && has("gpipe keeps the activations of all"),
               "gpipe's slots past the limit", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("parallel.schedule=gpipe", "train.global_batch=4194304",
                         "train.micro_batch=1", "model.d_model=8", "model.n_head=1"),
                    1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("more than the 1048576 activation slots"),
               "gpipe's slots past MODEL_MAX_SLOTS", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("train.global_batch=16777216", "train.micro_batch=1", "model.d_model=4096",
                         "model.n_head=32"),
                    1);
    TEST_CHECK(rc == TRI_OK, "the same batch under 1f1b holds one slot", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.seq_len=1000000", "system.backend=cpu"), 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("train.micro_batch: pipeline stage 0 of 1") &&
                   has("attention probabilities"),
               "the CPU's attention probabilities past the limit", "rc %d: %s", rc, g_err);
    rc = check_tiny(SETS("model.seq_len=1000000", "system.backend=cuda"), 1);
    TEST_CHECK(rc == TRI_OK, "the same on cuda (log-sum-exp state) passes", "rc %d: %s", rc, g_err);
    // 2.01e12 parameters: 8 TB of fp32 parameters pass the load; 32 TB of model state do not
    // fit one rank, and do over ZeRO-3 on 8 (which gathers the 8 TB, once without overlap).
    char **big = SETS("model.n_layer=100", "model.d_model=40960", "model.n_head=32",
                      "train.global_batch=8", "train.micro_batch=1", "parallel.zero=3",
                      "parallel.overlap=false");
    rc = check_tiny(big, 1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("model.n_layer: pipeline stage 0 of 1 would hold") &&
                   has("adam_bytes 16.1 TB") && has("parallel.zero"),
               "model state past the limit on one rank", "rc %d: %s", rc, g_err);
    rc = check_tiny(big, 8);
    TEST_CHECK(rc == TRI_OK, "the same over ZeRO-3 on 8 ranks", "rc %d: %s", rc, g_err);

    // config_size_problem: the load's rules without printing (plan --search asks it).
    run_config cfg;
    if (load_text(&cfg, "", NULL) == TRI_OK) {
        char why[400];
        int fine = config_size_problem(&cfg, why, sizeof why);
        cfg.model.n_layer = 357913942;
        int bad = config_size_problem(&cfg, why, sizeof why);
        TEST_CHECK(!fine && bad && !strncmp(why, "model.n_layer: 357913942 layers", 31),
                   "config_size_problem", "fine %d bad %d why: %s", fine, bad, why);
        config_free(&cfg);
    }
}

// YAML nested past the limit (base/yaml_limit.h) is refused at once, in the file, in a --set
// value and in what the manifest reader loads; libyaml alone took 25 s for 100,000 levels.
static void test_depth(void) {
    const int n = 200000;
    char *deep = malloc(2 * (size_t)n + 64);
    size_t len = (size_t)sprintf(deep, "model: {n_layer: ");
    for (int i = 0; i < n; i++) deep[len++] = '[';
    for (int i = 0; i < n; i++) deep[len++] = ']';
    strcpy(deep + len, "}\n");
    run_config cfg;
    double t0 = time_now_s();
    tri_status rc = load_text(&cfg, deep, NULL);
    double dt = time_now_s() - t0;
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(":1: YAML nested deeper than 64 levels") && dt < 2,
               "YAML nested 200,000 levels: refused at once", "rc %d in %.2f s: %s", rc, dt, g_err);
    rc = load_text(&cfg, "model: {n_layer: [[[[1]]]]}\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("model.n_layer: expected an integer, got a list"),
               "YAML nested a few levels: the key's message", "stderr: %s", g_err);
    char *set = malloc(2 * 1000 + 32);
    len = (size_t)sprintf(set, "model.n_layer=");
    for (int i = 0; i < 1000; i++) set[len++] = '{';
    for (int i = 0; i < 1000; i++) set[len++] = '}';
    set[len] = '\0';
    rc = load_text(&cfg, "", SETS(set));
    TEST_CHECK(rc == TRI_ERR_CONFIG &&
                   has("model.n_layer: the value is YAML nested deeper than 64 levels"),
               "a --set value nested deeper than the limit", "stderr: %s", g_err);
    // The manifest reader's loader (src/io/checkpoint_read.c uses it).
    char *path = write_yaml(deep);
    FILE *f = fopen(path, "r");
    yaml_parser_t parser;
    yaml_document_t doc;
    t0 = time_now_s();
    int ok = ylimit_load_file(&parser, f, &doc);
    dt = time_now_s() - t0;
    TEST_CHECK(!ok && parser.problem && strstr(parser.problem, "deeper than 64") && dt < 2,
               "ylimit_load_file refuses deep YAML at once", "ok %d problem %s in %.2f s", ok,
               parser.problem ? parser.problem : "-", dt);
    yaml_parser_delete(&parser);
    fclose(f);
    f = fopen(path, "w");
    fputs("a: [1, {b: 2}]\n", f);
    fclose(f);
    f = fopen(path, "r");
    ok = ylimit_load_file(&parser, f, &doc);
    yaml_node_t *root = ok ? yaml_document_get_root_node(&doc) : NULL;
    TEST_CHECK(ok && root && root->type == YAML_MAPPING_NODE, "ylimit_load_file loads shallow YAML",
               "ok %d", ok);
    if (ok) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    free(path);
    free(set);
    free(deep);
}

static void test_sched_closed_form(void) {
    // The slots of a table no one builds: gpipe holds every pair, 1f1b pp - rank.
    const int m = 1 << 24;
    TEST_CHECK(sched_max_in_flight(SCHEDULE_GPIPE, 4, 2, m, 0) == 2LL * m &&
                   sched_max_in_flight(SCHEDULE_1F1B, 4, 1, m, 1) == 3 &&
                   sched_max_in_flight(SCHEDULE_INTERLEAVED, 4, 2, m, 0) == 11,
               "sched_max_in_flight at m = 2^24", "wrong peak");
}

int main(void) {
    if (harness_init("test_sizes")) return 1;
    log_init();
    test_checked();
    test_params_size();
    test_rules();
    test_depth();
    test_sched_closed_form();
    harness_done();
    TEST_EXIT();
}

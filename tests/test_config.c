// test_config.c: config_load, --set, validation messages, config_resolve_world and the
// YAML/JSON printers. Each case writes a YAML file under a fresh temp directory, runs the
// call with stderr captured, and checks the values and the message text.
#include "config/config.h"
#include "config/config_keys_internal.h" // K_COUNT: the keys printed
#include "testlib.h"

#include "config_harness.h"
#include <limits.h>
#include <string.h>

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

static char *json_of(const run_config *cfg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print_json(cfg, f);
    fclose(f);
    return buf;
}

static int streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

// ---------------------------------------------------------------------------------------

// Every key of the table says what a resume with another value does (config.h's resume_class
// and the effect text that config_resume.c prints): a key added without one fails here.
static void test_resume_classes(void) {
    int bad = -1;
    for (int k = 0; k < K_COUNT && bad < 0; k++)
        if (CONFIG_KEYS[k].resume == RESUME_UNSET || !CONFIG_KEYS[k].effect ||
            !CONFIG_KEYS[k].effect[0])
            bad = k;
    char path[64] = "";
    if (bad >= 0) config_key_path(bad, path, sizeof path);
    TEST_CHECK(bad < 0, "config_every_key_has_resume_class",
               "%s has no resume class or effect (add FREE, GUARDED or FIXED to its entry)", path);
}

static void test_defaults(void) {
    run_config cfg;
    config_defaults(&cfg);
    int ok = streq(cfg.run.name, "trident") && streq(cfg.run.out_dir, "runs/trident") &&
             cfg.run.seed == 1234 && streq(cfg.model.arch, "gpt2") && cfg.model.n_layer == 4 &&
             cfg.model.n_head == 4 && cfg.model.d_model == 128 && cfg.model.seq_len == 256 &&
             cfg.model.vocab_size == 256 && cfg.model.vocab_pad_to == 128 && !cfg.model.init_from &&
             cfg.parallel.tp == 1 && cfg.parallel.pp == 1 && cfg.parallel.dp == DP_AUTO &&
             cfg.parallel.virtual_stages == 1 && cfg.parallel.schedule == SCHEDULE_1F1B &&
             cfg.parallel.zero == 1 && !cfg.parallel.sequence_parallel &&
             cfg.parallel.recompute == RECOMPUTE_NONE && cfg.train.micro_batch == 8 &&
             cfg.train.global_batch == 32 && cfg.train.steps == 2000 &&
             cfg.train.precision == DTYPE_FP32 && cfg.train.grad_dtype == DTYPE_FP32 &&
             cfg.train.reduce_dtype == DTYPE_FP32 && cfg.train.grad_clip == 1.0 &&
             cfg.optim.lr == 1e-3 && cfg.optim.min_lr == 1e-4 && cfg.optim.warmup_steps == 100 &&
             cfg.optim.decay == DECAY_COSINE && cfg.optim.beta1 == 0.9 && cfg.optim.beta2 == 0.95 &&
             cfg.optim.eps == 1e-8 && cfg.optim.weight_decay == 0.1 &&
             streq(cfg.data.train.items[0].path, "data/kjv_train_*.bin") &&
             !cfg.data.train.listed && cfg.data.train.n == 1 && cfg.data.shuffle == 1 &&
             streq(cfg.data.val.items[0].path, "data/kjv_val_*.bin") &&
             cfg.data.eval_every == 200 && cfg.data.eval_batches == 20 && !cfg.checkpoint.dir &&
             cfg.checkpoint.every == 500 && cfg.checkpoint.keep == 3 && cfg.checkpoint.async == 1 &&
             streq(cfg.checkpoint.resume, "auto") && cfg.log.every == 10 && !cfg.log.metrics &&
             !cfg.log.tensorboard && cfg.system.backend == BACKEND_AUTO &&
             cfg.system.comm == COMM_AUTO && cfg.system.threads == 0 &&
             cfg.system.comm_timeout_s == 300.0;
    TEST_CHECK(ok, "defaults match DESIGN.md", "a default differs");
    config_free(&cfg);
}

static void test_empty_file(void) {
    run_config cfg, def;
    config_defaults(&def);
    config_resolve_model(&def.model); // the rule keys as config_load resolves them
    tri_status rc = load_text(&cfg, "", NULL);
    char *a = rc == TRI_OK ? json_of(&cfg) : NULL, *b = json_of(&def);
    TEST_CHECK(rc == TRI_OK && streq(a, b) && cfg.source_path && strstr(cfg.source_path, g_dir),
               "empty file is all defaults", "rc %d, stderr: %s", rc, g_err);
    free(a);
    config_free(&cfg);
    rc = load_text(&cfg, "# only a comment\n\nmodel:\n  # n_layer: 2\n", NULL);
    a = rc == TRI_OK ? json_of(&cfg) : NULL;
    TEST_CHECK(rc == TRI_OK && streq(a, b), "comments and an empty section are defaults",
               "rc %d, stderr: %s", rc, g_err);
    free(a);
    free(b);
    config_free(&cfg);
    config_free(&def);
}

static const char *FULL_YAML = "run:\n"
                               "  name: exp1\n"
                               "  out_dir: /tmp/out/exp1\n"
                               "  seed: 18446744073709551615\n"
                               "model:\n"
                               "  arch: gpt2\n"
                               "  n_layer: 12\n"
                               "  n_head: 12\n"
                               "  d_model: 768\n"
                               "  seq_len: 1024\n"
                               "  vocab_size: 50257\n"
                               "  vocab_pad_to: 64\n"
                               "  init_from: models/gpt2_124M.bin\n"
                               "parallel:\n"
                               "  tp: 2\n"
                               "  pp: 2\n"
                               "  dp: 4\n"
                               "  virtual_stages: 3\n"
                               "  schedule: interleaved\n"
                               "  zero: 2\n"
                               "  sequence_parallel: true\n"
                               "  recompute: full\n"
                               "train:\n"
                               "  micro_batch: 4\n"
                               "  global_batch: 128   # 8 micro-batches per replica\n"
                               "  steps: 5000\n"
                               "  precision: bf16\n"
                               "  grad_dtype: bf16\n"
                               "  reduce_dtype: bf16\n"
                               "  grad_clip: 0.5\n"
                               "optim:\n"
                               "  lr: 6.0e-4\n"
                               "  min_lr: 6e-5\n"
                               "  warmup_steps: 700\n"
                               "  decay: linear\n"
                               "  beta1: 0.85\n"
                               "  beta2: 0.999\n"
                               "  eps: 1.0e-6\n"
                               "  weight_decay: 0\n"
                               "data:\n"
                               "  train: \"data/fineweb_train_*.bin\"\n"
                               "  val: data/fineweb_val_000.bin\n"
                               "  eval_every: 0\n"
                               "  eval_batches: 5\n"
                               "checkpoint:\n"
                               "  dir: /tmp/ckpt\n"
                               "  every: 0\n"
                               "  keep: 1\n"
                               "  async: false\n"
                               "  resume: none\n"
                               "log:\n"
                               "  every: 1\n"
                               "  metrics: /tmp/m.jsonl\n"
                               "  tensorboard: /tmp/tb\n"
                               "system:\n"
                               "  backend: cuda\n"
                               "  comm: nccl\n"
                               "  threads: 16\n"
                               "  comm_timeout_s: 60.5\n";

static int full_values_ok(const run_config *c) {
    return streq(c->run.name, "exp1") && streq(c->run.out_dir, "/tmp/out/exp1") &&
           c->run.seed == UINT64_MAX && streq(c->model.arch, "gpt2") && c->model.n_layer == 12 &&
           c->model.n_head == 12 && c->model.d_model == 768 && c->model.seq_len == 1024 &&
           c->model.vocab_size == 50257 && c->model.vocab_pad_to == 64 &&
           streq(c->model.init_from, "models/gpt2_124M.bin") && c->parallel.tp == 2 &&
           c->parallel.pp == 2 && c->parallel.dp == 4 && c->parallel.virtual_stages == 3 &&
           c->parallel.schedule == SCHEDULE_INTERLEAVED && c->parallel.zero == 2 &&
           c->parallel.sequence_parallel == 1 && c->parallel.recompute == RECOMPUTE_FULL &&
           c->train.micro_batch == 4 && c->train.global_batch == 128 && c->train.steps == 5000 &&
           c->train.precision == DTYPE_BF16 && c->train.grad_dtype == DTYPE_BF16 &&
           c->train.reduce_dtype == DTYPE_BF16 && c->train.grad_clip == 0.5 &&
           c->optim.lr == 6.0e-4 && c->optim.min_lr == 6e-5 && c->optim.warmup_steps == 700 &&
           c->optim.decay == DECAY_LINEAR && c->optim.beta1 == 0.85 && c->optim.beta2 == 0.999 &&
           c->optim.eps == 1.0e-6 && c->optim.weight_decay == 0.0 &&
           streq(c->data.train.items[0].path, "data/fineweb_train_*.bin") &&
           streq(c->data.val.items[0].path, "data/fineweb_val_000.bin") &&
           c->data.eval_every == 0 && c->data.eval_batches == 5 &&
           streq(c->checkpoint.dir, "/tmp/ckpt") && c->checkpoint.every == 0 &&
           c->checkpoint.keep == 1 && c->checkpoint.async == 0 &&
           streq(c->checkpoint.resume, "none") && c->log.every == 1 &&
           streq(c->log.metrics, "/tmp/m.jsonl") && streq(c->log.tensorboard, "/tmp/tb") &&
           c->system.backend == BACKEND_CUDA && c->system.comm == COMM_NCCL &&
           c->system.threads == 16 && c->system.comm_timeout_s == 60.5;
}

static void test_full_file(void) {
    run_config cfg;
    tri_status rc = load_text(&cfg, FULL_YAML, NULL);
    TEST_CHECK(rc == TRI_OK && full_values_ok(&cfg), "full file parses every key",
               "rc %d, stderr: %s", rc, g_err);
    TEST_CHECK(rc == TRI_OK && config_padded_vocab(&cfg) == 50304, "padded vocab 50257 -> 50304",
               "got %d", rc == TRI_OK ? config_padded_vocab(&cfg) : -1);
    config_free(&cfg);
}

static void test_design_example(void) {
    // DESIGN.md's block, flow style and comments as written there.
    const char *yaml =
        "run:        {name: kjv-tiny, seed: 1234}\n"
        "model:      {arch: gpt2, n_layer: 4, n_head: 4, d_model: 128, seq_len: 256,\n"
        "             vocab_size: 256, vocab_pad_to: 128, init_from: null}   # llm.c .bin\n"
        "parallel:   {tp: 1, pp: 1, dp: auto, virtual_stages: 1,\n"
        "             schedule: 1f1b,            # gpipe | 1f1b | interleaved\n"
        "             zero: 1,                   # 0 | 1 | 2 | 3\n"
        "             sequence_parallel: false, recompute: none}\n"
        "train:      {micro_batch: 8, global_batch: 32, steps: 2000,\n"
        "             precision: fp32, grad_dtype: fp32, reduce_dtype: fp32, grad_clip: 1.0}\n"
        "optim:      {lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 100, decay: cosine,\n"
        "             beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1}\n"
        "data:       {train: \"data/kjv_train_*.bin\", val: \"data/kjv_val_*.bin\",\n"
        "             eval_every: 200, eval_batches: 20}\n"
        "checkpoint: {dir: null, every: 500, keep: 3, async: true, resume: auto}\n"
        "log:        {every: 10, metrics: null}\n"
        "system:     {backend: auto, comm: auto, threads: 0, comm_timeout_s: 300}\n";
    run_config cfg;
    tri_status rc = load_text(&cfg, yaml, NULL);
    TEST_CHECK(rc == TRI_OK && streq(cfg.run.name, "kjv-tiny") &&
                   streq(cfg.run.out_dir, "runs/kjv-tiny") && cfg.parallel.dp == DP_AUTO &&
                   !cfg.checkpoint.dir && !cfg.log.metrics && cfg.system.comm_timeout_s == 300,
               "DESIGN.md example loads; out_dir follows run.name", "rc %d, stderr: %s", rc, g_err);
    config_free(&cfg);
}

// Prints cfg as YAML, loads that back and compares the two as JSON and field by field.
static int round_trips(const run_config *cfg, char **why) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    config_print_yaml(cfg, f, 0);
    fclose(f);
    run_config back;
    tri_status rc = load_text(&back, text, NULL);
    char *a = json_of(cfg), *b = rc == TRI_OK ? json_of(&back) : NULL;
    int ok = rc == TRI_OK && streq(a, b) && back.optim.lr == cfg->optim.lr &&
             back.optim.min_lr == cfg->optim.min_lr && back.optim.eps == cfg->optim.eps &&
             back.optim.weight_decay == cfg->optim.weight_decay &&
             back.system.comm_timeout_s == cfg->system.comm_timeout_s &&
             back.run.seed == cfg->run.seed && streq(back.run.name, cfg->run.name);
    *why = text;
    if (ok) free(text), *why = NULL;
    free(a);
    free(b);
    if (rc == TRI_OK) config_free(&back);
    return ok;
}

static void test_round_trip(void) {
    run_config cfg;
    char *why = NULL;
    load_text(&cfg, FULL_YAML, NULL);
    TEST_CHECK(round_trips(&cfg, &why), "round trip print_yaml -> load (full file)",
               "printed:\n%s\nstderr: %s", why, g_err);
    free(why);
    why = NULL;
    config_free(&cfg);

    const char *odd =
        "run: {name: \"we\\\"ird\\\\ name\\twith\\nnewline \\u00e9 \\u2028 end\", out_dir: "
        "\"null\", seed: 0}\n"
        "model: {init_from: \"123\"}\n"
        "data: {train: \"yes\", val: \"  spaced: #x  \"}\n"
        "checkpoint: {dir: \"'quoted'\", resume: \"~\"}\n"
        "log: {metrics: \"-dash\"}\n"
        "optim: {lr: 0.1, min_lr: 1e-300, eps: 5e-324, weight_decay: 0.30000000000000004}\n"
        "system: {comm_timeout_s: 1e15}\n";
    tri_status rc = load_text(&cfg, odd, NULL);
    TEST_CHECK(rc == TRI_OK && round_trips(&cfg, &why),
               "round trip with awkward strings and doubles", "rc %d printed:\n%s\nstderr: %s", rc,
               why ? why : "", g_err);
    free(why);
    // Loading over an earlier config (not only over the defaults) replaces what it sets.
    char *path = write_yaml("run: {name: again}\n");
    int saved = capture_begin();
    tri_status rc2 = config_load(&cfg, path, 0, NULL);
    capture_end(saved);
    TEST_CHECK(rc == TRI_OK && rc2 == TRI_OK && streq(cfg.run.name, "again") &&
                   streq(cfg.run.out_dir, "runs/again") && streq(cfg.source_path, path) &&
                   cfg.optim.lr == 0.1,
               "load over an earlier config", "rc %d stderr: %s", rc2, g_err);
    free(path);
    config_free(&cfg);
}

static void test_print_yaml_layout(void) {
    run_config cfg;
    config_defaults(&cfg);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    config_print_yaml(&cfg, f, 4);
    fclose(f);
    // 9 section lines + every key of the table (DESIGN.md's and trident's own), each indented
    // by 4, sections in DESIGN.md order.
    const char *order[] = {"    run:\n",        "    model:\n", "    parallel:\n",
                           "    train:\n",      "    optim:\n", "    data:\n",
                           "    checkpoint:\n", "    log:\n",   "    system:\n"};
    int ok = count_lines(text) == 9 + K_COUNT;
    const char *at = text;
    for (int i = 0; i < 9 && ok; i++) {
        const char *p = strstr(at, order[i]);
        ok = p != NULL;
        at = p ? p : at;
    }
    ok = ok && strstr(text, "      dp: auto\n") && strstr(text, "      init_from: null\n") &&
         strstr(text, "      schedule: 1f1b\n") && strstr(text, "      overlap: true\n") &&
         strstr(text, "      lr: 0.001\n") && strstr(text, "      eps: 1.0e-08\n") &&
         strstr(text, "      comm_timeout_s: 300.0\n") &&
         strstr(text, "      train: \"data/kjv_train_*.bin\"\n");
    TEST_CHECK(ok, "print_yaml: every key, DESIGN.md order, indent", "got:\n%s", text);
    free(text);
    config_free(&cfg);
}

static void test_print_json(void) {
    run_config cfg;
    config_defaults(&cfg);
    free(cfg.run.name);
    cfg.run.name = strdup("a\"b\\c\nd\x01");
    char *j = json_of(&cfg);
    int ok = j[0] == '{' && j[strlen(j) - 1] == '}' && !strchr(j, '\n') &&
             strstr(j, "{\"run\":{\"name\":\"a\\\"b\\\\c\\nd\\u0001\",") &&
             strstr(j, "\"dp\":\"auto\"") && strstr(j, "\"init_from\":null") &&
             strstr(j, "\"sequence_parallel\":false") && strstr(j, "\"lr\":0.001,") &&
             strstr(j, "\"beta1\":0.9,") && strstr(j, "\"schedule\":\"1f1b\"") &&
             strstr(j, "},\"system\":{\"backend\":\"auto\"");
    TEST_CHECK(ok, "print_json: escaping, null, auto, exact floats", "got: %s", j);
    free(j);
    cfg.parallel.tp = 2;
    TEST_CHECK(resolve(&cfg, 4) == TRI_OK && (j = json_of(&cfg)) && strstr(j, "\"dp\":2,"),
               "print_json: dp as a number once resolved", "stderr: %s", g_err);
    free(j);
    config_free(&cfg);
}

// ---------------------------------------------------------------------------------------
// Messages

static void test_unknown_keys(void) {
    run_config cfg;
    char *path = write_yaml("model:\n  n_layer: 2\n  n_haed: 4\n");
    tri_status rc = load_path(&cfg, path, 0, NULL);
    char want[512];
    snprintf(want, sizeof want, "%s:3: model.n_haed: unknown key; did you mean model.n_head?\n",
             path);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(want), "unknown key: line and did-you-mean",
               "stderr: %s", g_err);
    snprintf(want, sizeof want, "1 error in %s; fix it and run again\n", path);
    TEST_CHECK(has(want), "final line counts the errors and names the file", "stderr: %s", g_err);
    free(path);

    rc = load_text(&cfg, "modle:\n  n_layer: 2\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(":1: modle: unknown section; did you mean model?"),
               "unknown section: did-you-mean", "stderr: %s", g_err);
    rc = load_text(&cfg, "train:\n  lr: 0.1\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("train.lr: unknown key; did you mean optim.lr?"),
               "key under the wrong section: points to its section", "stderr: %s", g_err);
    rc = load_text(&cfg, "system:\n  flux_capacitor: 1\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("system.flux_capacitor: unknown key; the keys of "
                                           "system are: backend, comm, threads, comm_timeout_s"),
               "unknown key far from all: lists the keys", "stderr: %s", g_err);
    rc = load_text(&cfg, "model:\n  n_layer: 2\n  n_layer: 3\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG &&
                   has(":3: model.n_layer: duplicate key (first set at line 2)"),
               "duplicate key", "stderr: %s", g_err);
}

static void test_types(void) {
    run_config cfg;
    tri_status rc = load_text(&cfg, "model:\n  n_layer: 1.5\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(":2: model.n_layer: expected an integer, got 1.5"),
               "int key given 1.5", "stderr: %s", g_err);
    rc = load_text(&cfg, "model:\n  n_layer: abc\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("model.n_layer: expected an integer, got abc"),
               "int key given abc", "stderr: %s", g_err);
    rc = load_text(&cfg, "model:\n  n_layer: \"4\"\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("expected an integer, got the string \"4\""),
               "int key given a quoted string", "stderr: %s", g_err);
    rc = load_text(&cfg, "parallel:\n  sequence_parallel: yes\ncheckpoint:\n  async: Off\n", NULL);
    int ok = rc == TRI_OK && cfg.parallel.sequence_parallel == 1 && cfg.checkpoint.async == 0;
    TEST_CHECK(ok, "bool accepts yes/Off", "rc %d stderr: %s", rc, g_err);
    if (rc == TRI_OK) config_free(&cfg);
    rc = load_text(&cfg, "checkpoint:\n  async: maybe\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("checkpoint.async: expected true or false, got maybe"),
               "bool rejects maybe", "stderr: %s", g_err);
    rc = load_text(&cfg, "optim:\n  lr: .nan\n  eps: 1e999\n  beta1: nan\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("optim.lr: expected a number, got .nan") &&
                   has("optim.eps: expected a number, got 1e999 (must be finite)") &&
                   has("optim.beta1: expected a number, got nan (must be finite)"),
               "floats: nan and overflow rejected", "stderr: %s", g_err);
    rc = load_text(&cfg, "model: 5\nparallel: [1, 2]\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(":1: model: must be a mapping of keys") &&
                   has(":2: parallel: must be a mapping of keys") && has("got a list"),
               "section that is not a mapping", "stderr: %s", g_err);
    rc = load_text(&cfg, "- a\n- b\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(":1: the top level must be a mapping"),
               "top level that is not a mapping", "stderr: %s", g_err);
    rc = load_text(&cfg, "model: {n_layer: {a: 1}}\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("model.n_layer: expected an integer, got a mapping"),
               "mapping where a scalar belongs", "stderr: %s", g_err);
    rc = load_text(&cfg, "run:\n  seed: -1\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("run.seed: expected an integer >= 0, got -1"),
               "negative seed", "stderr: %s", g_err);
    rc = load_text(&cfg, "run:\n  seed: 18446744073709551616\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("run.seed: must be in 0..18446744073709551615"),
               "seed beyond uint64", "stderr: %s", g_err);
    rc = load_text(&cfg, "run: {name: null}\ncheckpoint: {resume: ''}\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("run.name: must not be null") &&
                   has("checkpoint.resume: must not be empty"),
               "null and empty strings where a value is needed", "stderr: %s", g_err);
    {
        static char text[PATH_MAX + 64];
        int n = snprintf(text, sizeof text, "log: {tensorboard: ");
        memset(text + n, 'a', PATH_MAX);
        snprintf(text + n + PATH_MAX, sizeof text - n - PATH_MAX, "}\n");
        rc = load_text(&cfg, text, NULL);
        TEST_CHECK(rc == TRI_ERR_CONFIG &&
                       has("log.tensorboard: is 4096 bytes long; a path holds at most 4095"),
                   "a path longer than the OS takes", "stderr: %.300s", g_err);
    }
    rc = load_text(&cfg, "run: {seed: 1}\n---\nrun: {seed: 2}\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(":3: a second YAML document"), "a second YAML document",
               "stderr: %s", g_err);
}

// One rule for tags and quotes across every key type (config_values_internal.h): a written
// tag sets the type, else quotes make a string, else the key's type reads the text.
static void test_tags_and_quotes(void) {
    run_config cfg;
    tri_status rc = load_text(&cfg,
                              "model: {n_layer: !!str 5, n_head: !!int \"2\"}\n"
                              "parallel: {zero: !!float 1, tp: !foo 1}\n"
                              "checkpoint: {async: \"true\"}\n"
                              "run: {name: !!int 5}\n",
                              NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG &&
                   has(":1: model.n_layer: expected an integer, got the string \"5\" (tagged "
                       "!!str)") &&
                   !has("model.n_head") &&
                   has(":2: parallel.zero: expected an integer, got 1 (tagged !!float)") &&
                   has("parallel.tp: expected an integer, got 1 (tagged !foo); the tags a config "
                       "reads are") &&
                   has(":3: checkpoint.async: expected true or false, got the string \"true\"") &&
                   has(":4: run.name: expected a string, got 5 (tagged !!int)") &&
                   has("5 errors in"),
               "tags and quotes: a tag or quotes that do not fit the key are refused", "stderr: %s",
               g_err);
    rc = load_text(&cfg,
                   "model: {n_head: !!int \"2\", init_from: !!str null}\n"
                   "parallel: {dp: \"auto\", schedule: \"1f1b\"}\n"
                   "optim: {lr: !!int 1, min_lr: !!float 0.5}\n"
                   "checkpoint: {async: !!bool false, dir: !!null \"\"}\n"
                   "run: {name: 123}\n",
                   NULL);
    int ok = rc == TRI_OK && cfg.model.n_head == 2 && streq(cfg.model.init_from, "null") &&
             cfg.parallel.dp == DP_AUTO && cfg.parallel.schedule == SCHEDULE_1F1B &&
             cfg.optim.lr == 1.0 && cfg.optim.min_lr == 0.5 && cfg.checkpoint.async == 0 &&
             !cfg.checkpoint.dir && streq(cfg.run.name, "123");
    TEST_CHECK(ok, "tags and quotes: what fits is accepted (dp: \"auto\", schedule: \"1f1b\")",
               "rc %d stderr: %s", rc, g_err);
    if (rc == TRI_OK) config_free(&cfg);
    rc = load_text(&cfg, "", SETS("parallel.dp=\"auto\"", "model.n_layer=!!str 4"));
    TEST_CHECK(rc == TRI_ERR_CONFIG && !has("parallel.dp") &&
                   has("--set model.n_layer=!!str 4: model.n_layer: expected an integer, got the "
                       "string \"4\" (tagged !!str)"),
               "tags and quotes: the same rule for --set", "stderr: %s", g_err);
}

static void test_enums(void) {
    static const struct {
        const char *set, *want;
    } cases[] = {
        {"parallel.schedule=1fb1", "parallel.schedule: expected one of gpipe, 1f1b, interleaved, "
                                   "zb-h1, zbv, got 1fb1; did you mean 1f1b?"},
        {"parallel.schedule=zbh1", "got zbh1; did you mean zb-h1?"},
        {"train.precision=fp8", "train.precision: expected one of fp32, bf16, tf32, got fp8"},
        {"train.grad_dtype=BF16", "did you mean bf16?"},
        {"train.reduce_dtype=half", "train.reduce_dtype: expected one of fp32, bf16"},
        {"optim.decay=cos", "optim.decay: expected one of cosine, linear, constant, got cos; did "
                            "you mean cosine?"},
        {"parallel.recompute=partial", "parallel.recompute: expected one of none, full"},
        {"system.backend=gpu", "system.backend: expected one of auto, cpu, cuda"},
        {"system.comm=gloo", "system.comm: expected one of auto, mpi, nccl, self"},
        {"model.arch=gpt3", "model.arch: expected one of gpt2, llama, got gpt3"},
        {"parallel.dp=two", "parallel.dp: expected auto or an integer >= 1, got two"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_config cfg;
        char name[128];
        snprintf(name, sizeof name, "enum rejects %s", cases[i].set);
        tri_status rc = load_text(&cfg, "", SETS((char *)cases[i].set));
        TEST_CHECK(rc == TRI_ERR_CONFIG && has(cases[i].want), name, "stderr: %s", g_err);
    }
}

static void test_ranges(void) {
    // Each value breaks exactly one single-key rule; the message names the key and the range.
    static const struct {
        const char *set, *want;
    } cases[] = {
        {"model.n_layer=0", "model.n_layer: must be >= 1 (got 0)"},
        {"model.n_head=0", "model.n_head: must be >= 1"},
        {"model.d_model=-1", "model.d_model: must be >= 1"},
        {"model.seq_len=0", "model.seq_len: must be >= 1"},
        {"model.vocab_size=0", "model.vocab_size: must be >= 1"},
        {"model.vocab_size=2147483648", "model.vocab_size: must be >= 1 (got 2147483648)"},
        {"model.vocab_pad_to=0", "model.vocab_pad_to: must be >= 1"},
        {"parallel.tp=0", "parallel.tp: must be >= 1"},
        {"parallel.pp=0", "parallel.pp: must be >= 1"},
        {"parallel.dp=0", "parallel.dp: must be >= 1, or auto (got 0)"},
        {"parallel.virtual_stages=0", "parallel.virtual_stages: must be >= 1"},
        {"parallel.zero=4", "parallel.zero: must be in 0..3 (got 4)"},
        {"parallel.zero=-1", "parallel.zero: must be in 0..3 (got -1)"},
        {"train.micro_batch=0", "train.micro_batch: must be >= 1"},
        {"train.global_batch=0", "train.global_batch: must be >= 1"},
        {"train.steps=0", "train.steps: must be >= 1"},
        {"train.grad_clip=-0.5", "train.grad_clip: must be >= 0 (got -0.5)"},
        {"optim.lr=0", "optim.lr: must be > 0 (got 0.0)"},
        {"optim.min_lr=-1e-5", "optim.min_lr: must be >= 0"},
        {"optim.warmup_steps=-1", "optim.warmup_steps: must be >= 0"},
        {"optim.beta1=1.0", "optim.beta1: must be in [0, 1) (got 1.0)"},
        {"optim.beta2=-0.1", "optim.beta2: must be in [0, 1)"},
        {"optim.eps=0", "optim.eps: must be > 0"},
        {"optim.weight_decay=-0.01", "optim.weight_decay: must be >= 0"},
        {"data.eval_every=-1", "data.eval_every: must be >= 0"},
        {"data.eval_batches=0", "data.eval_batches: must be >= 1"},
        {"checkpoint.every=-5", "checkpoint.every: must be >= 0"},
        {"checkpoint.keep=0", "checkpoint.keep: must be >= 1"},
        {"log.every=0", "log.every: must be >= 1"},
        {"system.threads=-1", "system.threads: must be >= 0"},
        {"system.comm_timeout_s=0", "system.comm_timeout_s: must be > 0"},
        {"system.init_timeout_s=-1", "system.init_timeout_s: must be >= 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_config cfg;
        char name[128];
        snprintf(name, sizeof name, "range %s", cases[i].set);
        tri_status rc = load_text(&cfg, "", SETS((char *)cases[i].set));
        TEST_CHECK(rc == TRI_ERR_CONFIG && has(cases[i].want) && has("1 error in"), name,
                   "stderr: %s", g_err);
    }
}

static void test_rules(void) {
    static const struct {
        const char *name;
        char *sets[4];
        const char *want;
    } cases[] = {
        {"rule d_model % n_head",
         {"model.d_model=130"},
         "model.d_model: model.d_model (130) must be divisible by model.n_head (4)"},
        {"rule n_head % tp",
         {"model.n_head=6", "model.d_model=384", "parallel.tp=4"},
         "parallel.tp: model.n_head (6) must be divisible by parallel.tp (4); choose a tp that "
         "divides 6"},
        {"rule 4*d_model % tp",
         {"model.n_head=16", "model.d_model=2", "parallel.tp=16"},
         "parallel.tp: the MLP width 4 * model.d_model (8) must be divisible by parallel.tp (16)"},
        {"rule n_layer % (pp*virtual_stages)",
         {"parallel.pp=3"},
         "parallel.pp: model.n_layer (4) must be divisible by parallel.pp * "
         "parallel.virtual_stages (3 * 1 = 3)"},
        {"rule interleaved needs virtual_stages >= 2",
         {"parallel.schedule=interleaved"},
         "parallel.schedule: schedule interleaved needs parallel.virtual_stages >= 2 (got 1)"},
        {"rule virtual_stages > 1 needs interleaved",
         {"parallel.virtual_stages=2"},
         "parallel.virtual_stages: 2 virtual stages need parallel.schedule: interleaved or zbv "
         "(got 1f1b)"},
        {"rule sequence_parallel needs seq_len % tp",
         {"parallel.sequence_parallel=true", "parallel.tp=4", "model.seq_len=254"},
         "parallel.sequence_parallel: sequence parallelism splits model.seq_len (254) over "
         "parallel.tp (4)"},
        {"rule global_batch % micro_batch",
         {"train.global_batch=30"},
         "train.global_batch: train.global_batch (30) must be divisible by train.micro_batch (8)"},
        {"rule min_lr <= lr",
         {"optim.min_lr=0.01"},
         "optim.min_lr: optim.min_lr (0.01) must not exceed optim.lr (0.001)"},
        {"rule comm nccl needs a GPU backend",
         {"system.comm=nccl", "system.backend=cpu"},
         "system.comm: comm nccl needs system.backend cuda or auto (got cpu)"},
        {"rule padded vocab fits an int",
         {"model.vocab_size=2147483000", "model.vocab_pad_to=1024"},
         "model.vocab_pad_to: model.vocab_size (2147483000) padded to a multiple of "
         "model.vocab_pad_to * parallel.tp (1024 * 1)"},
        {"rule fixed dp: global_batch % (micro_batch*dp)",
         {"parallel.dp=3"},
         "train.global_batch (32) must be divisible by train.micro_batch * parallel.dp (8 * 3 = "
         "24)"},
        {"rule fixed dp: 1f1b needs micro-batches >= pp",
         {"parallel.dp=2", "parallel.pp=4", "train.global_batch=16"},
         "parallel.schedule: schedule 1f1b needs at least parallel.pp (4) micro-batches per step"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_config cfg;
        char *sets[5] = {0};
        memcpy(sets, cases[i].sets, sizeof cases[i].sets);
        tri_status rc = load_text(&cfg, "", sets);
        TEST_CHECK(rc == TRI_ERR_CONFIG && has(cases[i].want), cases[i].name, "stderr: %s", g_err);
    }
    // The message of a rule sits on the line of its key in the file.
    run_config cfg;
    char *path = write_yaml("model:\n  n_head: 6\n  d_model: 384\nparallel:\n  tp: 4\n");
    tri_status rc = load_path(&cfg, path, 0, NULL);
    char want[512];
    snprintf(want, sizeof want, "%s:5: parallel.tp: model.n_head (6)", path);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(want), "rule message carries the key's line",
               "stderr: %s", g_err);
    free(path);
}

static void test_many_errors(void) {
    const char *yaml = "model:\n"
                       "  n_haed: 4\n"  // unknown key
                       "  n_layer: 0\n" // range
                       "  d_model: x\n" // type
                       "parallel:\n"
                       "  schedule: 2f2b\n" // enum
                       "optim:\n"
                       "  lr: 0.001\n"
                       "  min_lr: 0.1\n" // rule
                       "sytem: {}\n";    // unknown section
    run_config cfg;
    tri_status rc = load_text(&cfg, yaml, SETS("train.steps=-3"));
    TEST_CHECK(rc == TRI_ERR_CONFIG && count_lines(g_err) == 8 && has("7 errors in") &&
                   has(":2: model.n_haed") && has(":3: model.n_layer") &&
                   has(":4: model.d_model") && has(":6: parallel.schedule") &&
                   has(":9: optim.min_lr") && has(":10: sytem") &&
                   has("--set train.steps=-3: train.steps: must be >= 1"),
               "every error reported in one call", "stderr: %s", g_err);
    TEST_CHECK(cfg.run.name == NULL && cfg.source_path == NULL,
               "a failed load leaves no allocations", "name %p", (void *)cfg.run.name);
}

static void test_set(void) {
    run_config cfg;
    tri_status rc = load_text(&cfg, "model:\n  n_layer: 2\n  init_from: a.bin\n",
                              SETS("model.n_layer=8", "optim.lr=3.0e-4", "optim.min_lr=1e-5",
                                   "parallel.sequence_parallel=true", "run.name=\"my run\"",
                                   "model.init_from=null", "checkpoint.dir=~",
                                   "system.comm_timeout_s=5", "parallel.dp=auto",
                                   "data.train=x_*.bin"));
    int ok = rc == TRI_OK && cfg.model.n_layer == 8 && cfg.optim.lr == 3.0e-4 &&
             cfg.optim.min_lr == 1e-5 && cfg.parallel.sequence_parallel == 1 &&
             streq(cfg.run.name, "my run") && streq(cfg.run.out_dir, "runs/my run") &&
             !cfg.model.init_from && !cfg.checkpoint.dir && cfg.system.comm_timeout_s == 5.0 &&
             streq(cfg.data.train.items[0].path, "x_*.bin");
    TEST_CHECK(ok, "--set overrides: ints, floats, bools, strings, null", "rc %d stderr: %s", rc,
               g_err);
    if (rc == TRI_OK) config_free(&cfg);
    rc = load_text(&cfg, "model:\n  n_layer: 0\n", SETS("model.n_layer=3"));
    TEST_CHECK(rc == TRI_OK && cfg.model.n_layer == 3, "--set applies before validation",
               "rc %d stderr: %s", rc, g_err);
    if (rc == TRI_OK) config_free(&cfg);
    rc = load_text(&cfg, "", SETS("model.n_layer=3", "parallel.pp=2"));
    TEST_CHECK(rc == TRI_ERR_CONFIG &&
                   has("--set parallel.pp=2: parallel.pp: model.n_layer (3) must be divisible"),
               "--set location in messages", "stderr: %s", g_err);
    rc = load_text(&cfg, "", SETS("model.n_haed=3", "modle.n_layer=3", "lr=0.1", "noequals"));
    TEST_CHECK(rc == TRI_ERR_CONFIG &&
                   has("--set model.n_haed=3: model.n_haed: unknown key; did you mean "
                       "model.n_head?") &&
                   has("--set modle.n_layer=3: modle: unknown section; did you mean model?") &&
                   has("--set lr=0.1: lr: expected section.key; did you mean optim.lr?") &&
                   has("--set noequals: expected --set section.key=value") && has("4 errors in"),
               "--set unknown paths with suggestions", "stderr: %s", g_err);
    rc = load_text(&cfg, "",
                   SETS("run.name=null", "optim.lr=\"0.1\"", "run.name=[1", "model.n_layer=1.5"));
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("--set run.name=null: run.name: must not be null") &&
                   has("optim.lr: expected a number, got the string \"0.1\"") &&
                   has("--set run.name=[1: value is not valid YAML") &&
                   has("--set model.n_layer=1.5: model.n_layer: expected an integer, got 1.5"),
               "--set bad values", "stderr: %s", g_err);
}

static void test_files(void) {
    run_config cfg;
    char *path = write_yaml("model:\n  n_layer: 2\n  n_head 4\n  d_model: 8\n");
    tri_status rc = load_path(&cfg, path, 0, NULL);
    char want[512];
    snprintf(want, sizeof want, "%s:4: YAML syntax error: could not find expected ':'", path);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has(want), "YAML syntax error with its line", "stderr: %s",
               g_err);
    free(path);
    rc = load_text(&cfg, "model: {n_layer: 2\n", NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("YAML syntax error"), "unclosed flow mapping",
               "stderr: %s", g_err);
    rc = load_path(&cfg, "/nonexistent/dir/run.yaml", 0, NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG &&
                   has("error: cannot open config /nonexistent/dir/run.yaml: No such file or "
                       "directory\nHINT: "),
               "missing file: message and HINT", "stderr: %s", g_err);
    rc = load_path(&cfg, g_dir, 0, NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("Is a directory") && has("HINT:"),
               "a directory is not a config", "stderr: %s", g_err);
    path = write_yaml("run: {name: \"\xff\xfe\"}\n");
    rc = load_path(&cfg, path, 0, NULL);
    TEST_CHECK(rc == TRI_ERR_CONFIG && has("YAML syntax error"), "invalid UTF-8", "stderr: %s",
               g_err);
    free(path);
}

// ---------------------------------------------------------------------------------------
// World size

static void test_world(void) {
    run_config cfg;
    if (load_ok(&cfg, SETS("parallel.tp=2", "parallel.pp=2")) == TRI_OK) {
        tri_status rc = resolve(&cfg, 8);
        TEST_CHECK(rc == TRI_OK && cfg.parallel.dp == 2 && config_micro_batches(&cfg) == 2 &&
                       config_padded_vocab(&cfg) == 256,
                   "world 8, tp 2, pp 2: dp auto -> 2", "rc %d dp %d stderr: %s", rc,
                   cfg.parallel.dp, g_err);
        config_free(&cfg);
    }
    if (load_ok(&cfg, SETS("parallel.tp=4")) == TRI_OK) {
        tri_status rc = resolve(&cfg, 6);
        TEST_CHECK(rc == TRI_ERR_CONFIG && cfg.parallel.dp == DP_AUTO &&
                       has("parallel.dp: dp is auto, but the world of 6 ranks is not divisible "
                           "by parallel.tp * parallel.pp (4 * 1 = 4)") &&
                       has("1 error in"),
                   "world not a multiple of tp*pp", "stderr: %s", g_err);
        config_free(&cfg);
    }
    if (load_ok(&cfg, SETS("parallel.dp=2")) == TRI_OK) {
        tri_status rc = resolve(&cfg, 4);
        TEST_CHECK(rc == TRI_ERR_CONFIG &&
                       has("parallel.tp * parallel.pp * parallel.dp (1 * 1 * 2 = 2) must equal "
                           "the world size (4)"),
                   "fixed dp: world != tp*pp*dp", "stderr: %s", g_err);
        config_free(&cfg);
    }
    if (load_ok(&cfg, NULL) == TRI_OK) {
        tri_status rc = resolve(&cfg, 3);
        TEST_CHECK(rc == TRI_ERR_CONFIG &&
                       has("train.global_batch: train.global_batch (32) must be divisible by "
                           "train.micro_batch * parallel.dp (8 * 3 = 24)"),
                   "world: global_batch % (micro_batch*dp)", "stderr: %s", g_err);
        config_free(&cfg);
    }
    if (load_ok(&cfg, SETS("parallel.pp=4")) == TRI_OK) {
        tri_status rc = resolve(&cfg, 8);
        TEST_CHECK(rc == TRI_ERR_CONFIG &&
                       has("parallel.schedule: schedule 1f1b needs at least parallel.pp (4) "
                           "micro-batches per step, but train.global_batch / (train.micro_batch "
                           "* parallel.dp) = 32 / (8 * 2) = 2; raise global_batch to 64"),
                   "world: 1f1b with fewer micro-batches than pp", "stderr: %s", g_err);
        config_free(&cfg);
    }
    if (load_ok(&cfg, SETS("parallel.pp=4", "parallel.schedule=gpipe")) == TRI_OK) {
        tri_status rc = resolve(&cfg, 8);
        TEST_CHECK(rc == TRI_OK && config_micro_batches(&cfg) == 2,
                   "world: gpipe accepts fewer micro-batches than pp", "stderr: %s", g_err);
        config_free(&cfg);
    }
    if (load_ok(&cfg, SETS("parallel.pp=4", "parallel.virtual_stages=2", "model.n_layer=8",
                           "parallel.schedule=interleaved", "train.global_batch=48")) == TRI_OK) {
        tri_status rc = resolve(&cfg, 4);
        TEST_CHECK(rc == TRI_ERR_CONFIG &&
                       has("schedule interleaved needs the micro-batches per step "
                           "(train.global_batch / (train.micro_batch * parallel.dp) = 6) to be a "
                           "multiple of parallel.pp (4)"),
                   "world: interleaved micro-batches % pp", "stderr: %s", g_err);
        config_free(&cfg);
    }
    if (load_ok(&cfg, SETS("system.comm=self")) == TRI_OK) {
        tri_status rc = resolve(&cfg, 2);
        int ok = rc == TRI_ERR_CONFIG && has("system.comm: comm self runs a single process");
        ok = ok && resolve(&cfg, 1) == TRI_OK && cfg.parallel.dp == 1;
        TEST_CHECK(ok, "world: comm self needs a world of one", "stderr: %s", g_err);
        config_free(&cfg);
    }
    if (load_ok(&cfg, NULL) == TRI_OK) {
        TEST_CHECK(resolve(&cfg, 0) == TRI_ERR_CONFIG && has("world size must be >= 1"),
                   "world: 0 ranks", "stderr: %s", g_err);
        config_free(&cfg);
    }
}

int main(void) {
    if (harness_init("test_config")) return 1;
    test_defaults();
    test_resume_classes();
    test_empty_file();
    test_full_file();
    test_design_example();
    test_round_trip();
    test_print_yaml_layout();
    test_print_json();
    test_unknown_keys();
    test_types();
    test_tags_and_quotes();
    test_enums();
    test_ranges();
    test_rules();
    test_many_errors();
    test_set();
    test_files();
    test_world();
    harness_done();
    printf("%d passed, %d failed\n", test_passes_, test_failures_);
    TEST_EXIT();
}

// test_llmc.c: llm.c model files (io/llmc.h): headers checked with 64-bit arithmetic (the
// crafted header whose size wrapped to zero), each rank's shard read out of a file on every
// read path (whole rows, row segments, rows wider than the staging) and equal to slicing the
// whole model, bf16 files, non-finite values refused with the tensor and element named, the
// piecewise writer equal to the one-shot one, `sample` refusing a model past this machine's
// memory, and the rule for writing model.bin.
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/sample.h"
#include "base/bf16.h"
#include "io/llmc.h"
#include "testlib.h"

static char g_dir[256];
static char g_err[16384];

// A path in the test's directory (kept for the test's life: one slot per call site).
static const char *path_in(const char *name) {
    static char paths[16][512];
    static int used;
    if (used == 16) {
        fprintf(stderr, "test_llmc: more than 16 paths; enlarge path_in's table\n");
        exit(1);
    }
    char *p = paths[used++];
    snprintf(p, sizeof paths[0], "%s/%s", g_dir, name);
    return p;
}
static char g_err_path[512];

// Runs `call` with stderr captured into g_err.
#define CAPTURE(call)                                                                              \
    do {                                                                                           \
        fflush(stderr);                                                                            \
        int saved_ = dup(2);                                                                       \
        int fd_ = open(g_err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);                            \
        dup2(fd_, 2);                                                                              \
        close(fd_);                                                                                \
        call;                                                                                      \
        fflush(stderr);                                                                            \
        dup2(saved_, 2);                                                                           \
        close(saved_);                                                                             \
        FILE *f_ = fopen(g_err_path, "r");                                                         \
        size_t n_ = f_ ? fread(g_err, 1, sizeof g_err - 1, f_) : 0;                                \
        g_err[n_] = '\0';                                                                          \
        if (f_) fclose(f_);                                                                        \
    } while (0)

static int has(const char *s) { return strstr(g_err, s) != NULL; }

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static uint64_t g_rng = 12345;
static float next_value(void) {
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(g_rng >> 40) / (double)(1ULL << 24) - 0.5);
}

static model_config tiny_model(void) {
    // Sizes that tp 2 and 4 divide (n_head, 4C, the padded vocabulary); V not a multiple of
    // the padding, so that padded rows exist and differ between the file and a tp > 1 table.
    return (model_config){.arch = "gpt2",
                          .n_layer = 4,
                          .n_head = 4,
                          .d_model = 32,
                          .seq_len = 12,
                          .vocab_size = 50,
                          .vocab_pad_to = 16};
}

// The whole model (tp = 1, the file's padding) with random values, padded rows zero.
static float *random_model(const param_table *full) {
    float *g = malloc(full->local_numel * sizeof(float));
    for (int i = 0; i < full->n_entries; i++) {
        const param_entry *e = &full->entries[i];
        for (int64_t k = 0; k < e->local_numel; k++)
            g[e->offset + (size_t)k] = k / e->global_cols < e->valid_rows ? next_value() : 0.0f;
    }
    return g;
}

static void test_headers(void) {
    // The reproducer: maxT 1024, V = Vp 3843757, L 349525, NH 1, C 2^21 make exactly 2^64
    // values, which wrapped to 0 in size_t: a 1024-byte file passed the size check, and
    // `export` aborted (exit 134) allocating the model. Now L and C are past their bounds,
    // and every size is computed with checked 64-bit arithmetic.
    int32_t h[256] = {LLMC_MAGIC, LLMC_VERSION_FP32, 1024, 3843757, 349525, 1, 1 << 21, 3843757};
    const char *p = path_in("wrap.bin");
    write_bytes(p, h, sizeof h);
    llmc_file f;
    tri_status rc;
    CAPTURE(rc = llmc_open(&f, p));
    TEST_CHECK(rc == TRI_ERR_CKPT && has(p) && has("an llm.c model has 1 to"),
               "llmc_overflow_header_refused", "rc=%d: %s", (int)rc, g_err);

    // Each dim out of its bound, named by its word.
    static const char *names[] = {"maxT",       "V (vocab",   "L (n_layer",
                                  "NH (n_head", "C (d_model", "Vp (padded"};
    int ok = 1;
    for (int w = 2; w < 8; w++) {
        for (int bad = 0; bad < 3; bad++) {
            int32_t b[256] = {LLMC_MAGIC, LLMC_VERSION_FP32, 8, 10, 1, 2, 8, 16};
            b[w] = bad == 0 ? 0 : bad == 1 ? -5 : INT32_MAX;
            write_bytes(p, b, sizeof b);
            CAPTURE(rc = llmc_open(&f, p));
            if (rc != TRI_ERR_CKPT || !has(names[w - 2]) || !has(p)) {
                ok = 0;
                printf("  word %d value %d: rc=%d %s\n", w, b[w], (int)rc, g_err);
            }
        }
    }
    TEST_CHECK(ok, "llmc_header_dims_bounded", "a dim out of bounds was not refused by name");

    // C not a multiple of NH; Vp < V; a bad version; a short file.
    int32_t c1[256] = {LLMC_MAGIC, LLMC_VERSION_FP32, 8, 10, 1, 3, 8, 16};
    write_bytes(p, c1, sizeof c1);
    CAPTURE(rc = llmc_open(&f, p));
    TEST_CHECK(rc == TRI_ERR_CKPT && has("not a multiple of NH"), "llmc_header_heads_divide",
               "rc=%d %s", (int)rc, g_err);
    int32_t c2[256] = {LLMC_MAGIC, LLMC_VERSION_FP32, 8, 20, 1, 2, 8, 16};
    write_bytes(p, c2, sizeof c2);
    CAPTURE(rc = llmc_open(&f, p));
    TEST_CHECK(rc == TRI_ERR_CKPT && has("Vp is less than V"), "llmc_header_vp_at_least_v",
               "rc=%d %s", (int)rc, g_err);
    int32_t c3[256] = {LLMC_MAGIC, 4, 8, 10, 1, 2, 8, 16};
    write_bytes(p, c3, sizeof c3);
    CAPTURE(rc = llmc_open(&f, p));
    TEST_CHECK(rc == TRI_ERR_CKPT && has("version 4"), "llmc_header_version", "rc=%d %s", (int)rc,
               g_err);
    write_bytes(p, c3, 100);
    CAPTURE(rc = llmc_open(&f, p));
    TEST_CHECK(rc == TRI_ERR_CKPT && has("shorter than the 1024-byte"), "llmc_short_file",
               "rc=%d %s", (int)rc, g_err);
    CAPTURE(rc = llmc_open(&f, g_dir));
    TEST_CHECK(rc == TRI_ERR_CKPT && has("not a regular file"), "llmc_directory_refused",
               "rc=%d %s", (int)rc, g_err);
    const char *fifo = path_in("fifo.bin");
    mkfifo(fifo, 0644);
    CAPTURE(rc = llmc_open(&f, fifo)); // must not block
    TEST_CHECK(rc == TRI_ERR_CKPT && has("not a regular file"), "llmc_fifo_refused", "rc=%d %s",
               (int)rc, g_err);
}

// A model file of `mc` and its values; truncated or extended by `delta` bytes.
static float *write_model(const char *path, const model_config *mc, param_table *full) {
    params_build_full(full, mc, 1);
    float *g = random_model(full);
    TEST_CHECK(llmc_write(path, full, g, mc->seq_len, mc->vocab_size, mc->n_head) == TRI_OK,
               "llmc_write", "%s", path);
    return g;
}

static void test_sizes(void) {
    model_config mc = tiny_model();
    param_table full;
    const char *p = path_in("model.bin");
    float *g = write_model(p, &mc, &full);
    struct stat st;
    stat(p, &st);
    const long long good = st.st_size;
    TEST_CHECK(good == 1024 + 4 * (long long)full.local_numel, "llmc_written_size", "%lld", good);
    llmc_file f;
    tri_status rc;
    int ok = 1;
    for (int delta = -2; delta <= 2; delta += 1) {
        if (!delta) continue;
        truncate(p, good + delta);
        CAPTURE(rc = llmc_open(&f, p));
        ok = ok && rc == TRI_ERR_CKPT && has("implies") && has(p);
    }
    TEST_CHECK(ok, "llmc_size_must_be_exact", "%s", g_err);
    free(g);
    params_free(&full);
}

// Every rank of tp x pp reads its shard and gets the whole model's values (zero padding).
static int check_shards(const char *path, const model_config *mc, const float *g,
                        const param_table *full, int tp, int pp, size_t io_bytes, int bf16) {
    llmc_file f;
    if (llmc_open(&f, path) != TRI_OK) return 0;
    f.io_bytes = io_bytes;
    int ok = 1;
    model_config run = *mc;
    for (int pr = 0; pr < pp; pr++)
        for (int tr = 0; tr < tp; tr++) {
            const model_shard sh = {
                .tp = tp, .tp_rank = tr, .pp = pp, .pp_rank = pr, .virtual_stages = 1};
            param_table pt;
            params_build(&pt, &run, &sh);
            float *local = malloc(pt.local_numel * sizeof(float) + 1);
            ok = ok && llmc_read_params(&f, &pt, local) == TRI_OK;
            for (int i = 0; ok && i < pt.n_entries; i++) {
                const param_entry *e = &pt.entries[i];
                const param_entry *fe = &full->entries[params_find(full, e->name)];
                for (int64_t r = 0; ok && r < e->local_rows; r++)
                    for (int64_t c = 0; ok && c < e->local_cols; c++) {
                        const int64_t gi = params_global_index(&pt, e, r, c);
                        float want = gi / e->global_cols < fe->global_rows &&
                                             gi / e->global_cols < e->valid_rows
                                         ? g[fe->offset + (size_t)gi]
                                         : 0.0f;
                        if (bf16) want = bf16_to_f32(bf16_from_f32(want));
                        const float got = local[e->offset + (size_t)(r * e->local_cols + c)];
                        if (memcmp(&got, &want, sizeof got)) {
                            printf("  tp %d/%d pp %d/%d io %zu: %s (%lld, %lld) = %g, want %g\n",
                                   tr, tp, pr, pp, io_bytes, e->name, (long long)r, (long long)c,
                                   got, want);
                            ok = 0;
                        }
                    }
            }
            free(local);
            params_free(&pt);
        }
    llmc_close(&f);
    return ok;
}

// The fp32 llm.c file src as a bf16 one (version 5), each value rounded to nearest even.
static void to_bf16_file(const char *src, const char *dst, size_t numel) {
    int32_t h[256];
    float *v = malloc(numel * sizeof(float));
    uint16_t *b = malloc(numel * sizeof(uint16_t));
    FILE *f = fopen(src, "rb");
    if (fread(h, 4, 256, f) != 256 || fread(v, 4, numel, f) != numel) printf("short read\n");
    fclose(f);
    h[1] = LLMC_VERSION_BF16;
    for (size_t i = 0; i < numel; i++) b[i] = bf16_from_f32(v[i]);
    f = fopen(dst, "wb");
    fwrite(h, 4, 256, f);
    fwrite(b, 2, numel, f);
    fclose(f);
    free(v);
    free(b);
}

static void test_shards(void) {
    model_config mc = tiny_model();
    param_table full;
    const char *p = path_in("model.bin");
    float *g = write_model(p, &mc, &full);
    // io_bytes: the default, one that takes several pieces of whole rows and spans of
    // several partial rows (256 bytes: 2 rows of 32), and one narrower than a row (64 bytes:
    // fcprojw's rows of 128 values and the embeddings' of 32 are read in segments).
    const size_t ios[] = {LLMC_IO_BYTES, 256, 64};
    for (size_t k = 0; k < sizeof ios / sizeof ios[0]; k++) {
        char name[96];
        const int layouts[][2] = {{1, 1}, {2, 1}, {4, 1}, {1, 2}, {2, 2}, {4, 4}};
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
            snprintf(name, sizeof name, "llmc_shards_tp%d_pp%d_io%zu", layouts[l][0], layouts[l][1],
                     ios[k]);
            TEST_CHECK(check_shards(p, &mc, g, &full, layouts[l][0], layouts[l][1], ios[k], 0),
                       name, "a shard differs from the whole model's values");
        }
    }
    // The same model as a bf16 file (version 5): the values rounded to bf16.
    const char *pb = path_in("model16.bin");
    to_bf16_file(p, pb, full.local_numel);
    TEST_CHECK(check_shards(pb, &mc, g, &full, 2, 2, 64, 1) &&
                   check_shards(pb, &mc, g, &full, 1, 1, LLMC_IO_BYTES, 1),
               "llmc_bf16_shards", "a bf16 shard differs");

    // Non-finite values, refused by the rank whose shard holds them, naming the tensor and the
    // element: fcw row 5 is tp rank 0's of 2 (rows [0, 64)), and a NaN in a padded
    // vocabulary row is no value of the model (never read).
    const int fcw = params_find(&full, "h1.fcw"), wte = params_find(&full, "wte");
    const int64_t at = 5 * 32 + 3;
    g[full.entries[fcw].offset + at] = NAN;
    g[full.entries[wte].offset + (size_t)(60 * 32)] = NAN; // row 60 >= V = 50: padding
    llmc_write(p, &full, g, mc.seq_len, mc.vocab_size, mc.n_head);
    llmc_file lf;
    llmc_open(&lf, p);
    const model_shard s0 = {.tp = 2, .tp_rank = 0, .pp = 1, .pp_rank = 0, .virtual_stages = 1};
    const model_shard s1 = {.tp = 2, .tp_rank = 1, .pp = 1, .pp_rank = 0, .virtual_stages = 1};
    param_table p0, p1;
    params_build(&p0, &mc, &s0);
    params_build(&p1, &mc, &s1);
    float *local = malloc(p0.local_numel * sizeof(float));
    tri_status rc0, rc1;
    CAPTURE(rc0 = llmc_read_params(&lf, &p0, local));
    TEST_CHECK(rc0 == TRI_ERR_CKPT && has("h1.fcw") && has("nan") && has("row 5, column 3") &&
                   has(p),
               "llmc_nan_refused_named", "rc=%d: %s", (int)rc0, g_err);
    CAPTURE(rc1 = llmc_read_params(&lf, &p1, local));
    TEST_CHECK(rc1 == TRI_OK, "llmc_nan_only_where_held", "rc=%d: %s", (int)rc1, g_err);
    llmc_close(&lf);
    // -inf in a bf16 file, through the narrowest staging.
    g[full.entries[fcw].offset + at] = -INFINITY;
    llmc_write(p, &full, g, mc.seq_len, mc.vocab_size, mc.n_head);
    to_bf16_file(p, pb, full.local_numel);
    llmc_open(&lf, pb);
    lf.io_bytes = 64;
    CAPTURE(rc0 = llmc_read_params(&lf, &p0, local));
    TEST_CHECK(rc0 == TRI_ERR_CKPT && has("h1.fcw") && has("-inf") && has("row 5, column 3"),
               "llmc_bf16_inf_refused_named", "rc=%d: %s", (int)rc0, g_err);
    llmc_close(&lf);
    free(local);
    free(g);
    params_free(&p0);
    params_free(&p1);
    params_free(&full);
}

static int same_file(const char *a, const char *b) {
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y;
    while (same) {
        int c = fgetc(x), d = fgetc(y);
        same = c == d;
        if (c == EOF) break;
    }
    if (x) fclose(x);
    if (y) fclose(y);
    return same;
}

static void test_writer(void) {
    model_config mc = tiny_model();
    param_table full;
    const char *one = path_in("one.bin"), *pieces = path_in("pieces.bin");
    float *g = write_model(one, &mc, &full);
    // Entries in reverse, each in pieces of 7 values: the same bytes.
    llmc_writer w;
    int ok = llmc_writer_open(&w, pieces, &full, mc.seq_len, mc.vocab_size, mc.n_head) == TRI_OK;
    for (int i = full.n_entries - 1; ok && i >= 0; i--) {
        const param_entry *e = &full.entries[i];
        for (size_t k = 0; ok && k < (size_t)e->local_numel; k += 7) {
            size_t n = (size_t)e->local_numel - k < 7 ? (size_t)e->local_numel - k : 7;
            ok = llmc_writer_put(&w, e, k, g + e->offset + k, n) == TRI_OK;
        }
    }
    ok = ok && access(pieces, F_OK) != 0; // nothing under PATH before the commit
    ok = ok && llmc_writer_close(&w, 1) == TRI_OK;
    TEST_CHECK(ok && same_file(one, pieces), "llmc_writer_pieces_equal_whole",
               "the piecewise file differs");
    // An abandoned write leaves neither PATH nor PATH.tmp.
    const char *gone = path_in("gone.bin");
    llmc_writer_open(&w, gone, &full, mc.seq_len, mc.vocab_size, mc.n_head);
    llmc_writer_put(&w, &full.entries[0], 0, g, 10);
    llmc_writer_close(&w, 0);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", gone);
    TEST_CHECK(access(gone, F_OK) != 0 && access(tmp, F_OK) != 0, "llmc_writer_abort_clean",
               "a file was left");
    // A directory that does not exist: named, TRI_ERR_CKPT.
    tri_status rc;
    CAPTURE(rc = llmc_writer_open(&w, "/nonexistent-dir/m.bin", &full, mc.seq_len, mc.vocab_size,
                                  mc.n_head));
    TEST_CHECK(rc == TRI_ERR_CKPT && has("/nonexistent-dir/m.bin.tmp"), "llmc_writer_open_fails",
               "rc=%d %s", (int)rc, g_err);
    free(g);
    params_free(&full);
}

// A small file can describe a model no machine samples: seq_len 2^20 asks attention for
// 2^40 floats. `sample` refuses it by its planned buffers instead of allocating them.
static void test_sample_refuses_huge(void) {
    const int T = 1 << 20;
    int32_t h[256] = {LLMC_MAGIC, LLMC_VERSION_FP32, T, 1, 1, 1, 1, 1};
    const size_t numel = 1 + (size_t)T + 2 + 25;
    float *v = calloc(numel, sizeof(float));
    const char *p = path_in("long.bin");
    FILE *f = fopen(p, "wb");
    fwrite(h, 4, 256, f);
    fwrite(v, 4, numel, f);
    fclose(f);
    free(v);
    sample_options o = {.run_or_file = p, .tokens = 1, .seed = 1, .threads = 1};
    tri_status rc;
    CAPTURE(rc = sample_run(&o));
    TEST_CHECK(rc == TRI_ERR_CKPT && has(p) && has("sampling this model") && has("seq_len 1048576"),
               "sample_refuses_model_past_memory", "rc=%d: %s", (int)rc, g_err);
}

static void test_save_rule(void) {
    run_config cfg;
    memset(&cfg, 0, sizeof cfg);
    param_table small = {.global_numel = 124000000}, big = {.global_numel = 3000000000LL};
    TEST_CHECK(llmc_save_wanted(&small, &cfg) && llmc_save_wanted(&big, &cfg),
               "llmc_save_without_checkpoint_always", "no checkpoint.dir: model.bin is the output");
    cfg.checkpoint.dir = "ck";
    TEST_CHECK(llmc_save_wanted(&small, &cfg) && !llmc_save_wanted(&big, &cfg),
               "llmc_save_large_model_left_to_checkpoint",
               "a 12 GB model with a checkpoint.dir: the final checkpoint is the output");
}

int main(void) {
    log_init();
    snprintf(g_dir, sizeof g_dir, "/tmp/trident_test_llmc_%d", (int)getpid());
    mkdir(g_dir, 0755);
    snprintf(g_err_path, sizeof g_err_path, "%s/stderr.txt", g_dir);
    test_headers();
    test_sizes();
    test_shards();
    test_writer();
    test_sample_refuses_huge();
    test_save_rule();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", g_dir);
    TEST_EXIT();
}

// test_data: token shards and DESIGN.md's token stream order.
//
// Shards are written into a fresh mkdtemp directory. Expected samples are computed here
// from the token arrays the test wrote (per-shard sample lists, concatenated), not through
// the loader's own indexing. Bad files are checked for TRI_ERR_DATA and for a message on
// stderr that names the file and the problem.
#include "base/common.h"
#include "io/data.h"
#include "testlib.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static char *path_in_dir(const char *name) {
    static char buf[8][512];
    static int next = 0;
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

// Writes a raw file (header words + payload bytes), for the bad-file cases.
static void write_raw(const char *path, const int32_t *header, int header_ints, const void *payload,
                      size_t payload_bytes) {
    FILE *f = fopen(path, "wb");
    TRI_ASSERT(f);
    if (header_ints)
        TRI_ASSERT(fwrite(header, sizeof(int32_t), (size_t)header_ints, f) == (size_t)header_ints);
    if (payload_bytes) TRI_ASSERT(fwrite(payload, 1, payload_bytes, f) == payload_bytes);
    TRI_ASSERT(fclose(f) == 0);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

// stderr captured while data_open runs.
static char g_err[8192];

static tri_status open_capture(data_stream *ds, const char *pattern, int T, int vocab,
                               int64_t min_samples) {
    char cap_path[600];
    snprintf(cap_path, sizeof cap_path, "%s/stderr.txt", g_dir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(cap_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    TRI_ASSERT(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    tri_status rc = data_open(ds, pattern, T, vocab, min_samples, "data.train");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(cap_path, "rb");
    size_t n = fread(g_err, 1, sizeof g_err - 1, f);
    g_err[n] = '\0';
    fclose(f);
    unlink(cap_path);
    return rc;
}

static int has(const char *s) { return strstr(g_err, s) != NULL; }

// A bad-file case: data_open must fail with TRI_ERR_DATA, leave ds empty, and say
// `needle1` and `needle2` (and an "error:" and a "HINT:" line) on stderr.
static void check_bad(const char *name, const char *pattern, int T, int vocab, int64_t min_samples,
                      const char *needle1, const char *needle2) {
    data_stream ds;
    tri_status rc = open_capture(&ds, pattern, T, vocab, min_samples);
    int ok = rc == TRI_ERR_DATA && ds.shards == NULL && ds.n_shards == 0 && has("error: ") &&
             has("HINT: ") && has(needle1) && (!needle2 || has(needle2));
    TEST_CHECK(ok, name, "rc=%d, stderr:\n%s", (int)rc, g_err);
    if (rc == TRI_OK) data_close(&ds);
}

// Tokens of test shard s: distinct across shards so a sample from the wrong place shows.
static uint32_t *make_tokens(int64_t ntok, uint32_t base, uint32_t modulo) {
    uint32_t *tok = xmalloc((size_t)(ntok ? ntok : 1) * sizeof(uint32_t));
    for (int64_t i = 0; i < ntok; i++) tok[i] = (base + (uint32_t)i * 7u) % modulo;
    return tok;
}

static int sample_equals(const data_stream *ds, int64_t index, const uint32_t *window, int T) {
    int *in = xmalloc((size_t)T * sizeof(int)), *tg = xmalloc((size_t)T * sizeof(int));
    data_sample(ds, index, in, tg);
    int ok = 1;
    for (int t = 0; t < T; t++) ok = ok && in[t] == (int)window[t] && tg[t] == (int)window[t + 1];
    free(in);
    free(tg);
    return ok;
}

static void test_round_trip(void) {
    const int T = 4;
    // uint16: 9 tokens -> (9-1)/4 = 2 samples.
    uint32_t small[9] = {0, 1, 2, 65535, 4, 5, 6, 7, 8};
    char *p16 = path_in_dir("rt16_000.bin");
    TEST_CHECK(data_write_shard(p16, small, 9, 0) == TRI_OK, "write_u16", "write failed");
    int32_t header[3];
    FILE *f = fopen(p16, "rb");
    TRI_ASSERT(f && fread(header, sizeof(int32_t), 3, f) == 3);
    fclose(f);
    TEST_CHECK(header[0] == 20240520 && header[1] == 1 && header[2] == 9 &&
                   file_size(p16) == 1024 + 9 * 2,
               "write_u16_header", "header %d %d %d size %ld", header[0], header[1], header[2],
               file_size(p16));
    TEST_CHECK(access(path_in_dir("rt16_000.bin.tmp"), F_OK) != 0, "write_leaves_no_tmp",
               "rt16_000.bin.tmp still exists");

    data_stream ds;
    tri_status rc = data_open(&ds, p16, T, 65536, 1, "data.train");
    int ok = rc == TRI_OK && ds.n_shards == 1 && ds.shards[0].token_bytes == 2 &&
             ds.shards[0].ntok == 9 && ds.n_samples == 2 && sample_equals(&ds, 0, small, T) &&
             sample_equals(&ds, 1, small + 4, T);
    TEST_CHECK(ok, "round_trip_u16", "rc=%d", (int)rc);
    if (rc == TRI_OK) data_close(&ds);

    // uint32: a token above 65535 forces version 7.
    uint32_t big[9] = {70000, 1, 100000, 3, 4, 5, 6, 7, 199999};
    char *p32 = path_in_dir("rt32_000.bin");
    TEST_CHECK(data_write_shard(p32, big, 9, 0) == TRI_OK, "write_u32", "write failed");
    f = fopen(p32, "rb");
    TRI_ASSERT(f && fread(header, sizeof(int32_t), 3, f) == 3);
    fclose(f);
    rc = data_open(&ds, p32, T, 200000, 1, "data.train");
    ok = header[0] == 20240801 && header[1] == 7 && file_size(p32) == 1024 + 9 * 4 &&
         rc == TRI_OK && ds.shards[0].token_bytes == 4 && sample_equals(&ds, 0, big, T) &&
         sample_equals(&ds, 1, big + 4, T);
    TEST_CHECK(ok, "round_trip_u32", "rc=%d header %d %d", (int)rc, header[0], header[1]);
    if (rc == TRI_OK) data_close(&ds);

    // force_u32 with small tokens.
    char *pf = path_in_dir("rtf_000.bin");
    TRI_ASSERT(data_write_shard(pf, small, 9, 1) == TRI_OK);
    rc = data_open(&ds, pf, T, 65536, 1, "data.train");
    ok = rc == TRI_OK && ds.shards[0].token_bytes == 4 && file_size(pf) == 1024 + 9 * 4 &&
         sample_equals(&ds, 1, small + 4, T);
    TEST_CHECK(ok, "round_trip_force_u32", "rc=%d", (int)rc);
    if (rc == TRI_OK) data_close(&ds);

    // An unwritable destination is TRI_ERR_DATA naming the path.
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no_such_dir/x.bin", g_dir);
    fflush(stderr);
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    close(devnull);
    rc = data_write_shard(missing, small, 9, 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    TEST_CHECK(rc == TRI_ERR_DATA, "write_error_is_data_error", "rc=%d", (int)rc);
}

// Three shards of different sizes (plus one too short for a sample), written out of name
// order; the stream must follow sorted names.
static void test_stream_order(void) {
    const int T = 8, V = 50257;
    const char *names[4] = {"stream_c.bin", "stream_a.bin", "stream_b0.bin", "stream_b.bin"};
    // Sorted: stream_a (ntok 41: exactly 5 samples, T*5+1), stream_b (ntok 40: 4 samples, the
    // last token unused), stream_b0 (ntok 8: too short, 0 samples), stream_c (ntok 30: 3).
    const int64_t ntoks[4] = {30, 41, 8, 40};
    uint32_t *tok[4];
    for (int i = 0; i < 4; i++) {
        tok[i] = make_tokens(ntoks[i], 1000u * (uint32_t)(i + 1), (uint32_t)V);
        TRI_ASSERT(data_write_shard(path_in_dir(names[i]), tok[i], ntoks[i], 0) == TRI_OK);
    }
    // The expected stream: samples of stream_a, then stream_b, then stream_c.
    const int sorted[3] = {1, 3, 0};
    const uint32_t *expected[64];
    int n_expected = 0;
    for (int s = 0; s < 3; s++) {
        const uint32_t *t = tok[sorted[s]];
        for (int64_t start = 0; start + T + 1 <= ntoks[sorted[s]]; start += T)
            expected[n_expected++] = t + start;
    }
    TRI_ASSERT(n_expected == 12);

    data_stream ds;
    tri_status rc = open_capture(&ds, path_in_dir("stream_*.bin"), T, V, 12);
    TEST_CHECK(rc == TRI_OK && ds.n_shards == 4 && ds.n_samples == 12, "stream_open",
               "rc=%d n_shards=%d n_samples=%lld", (int)rc, ds.n_shards, (long long)ds.n_samples);
    if (rc != TRI_OK) goto done;
    int names_ok = strstr(ds.shards[0].path, "stream_a.bin") &&
                   strstr(ds.shards[1].path, "stream_b.bin") &&
                   strstr(ds.shards[2].path, "stream_b0.bin") &&
                   strstr(ds.shards[3].path, "stream_c.bin");
    int firsts_ok = ds.shards[0].first_sample == 0 && ds.shards[1].first_sample == 5 &&
                    ds.shards[2].first_sample == 9 && ds.shards[3].first_sample == 9 &&
                    ds.shards[0].n_samples == 5 && ds.shards[1].n_samples == 4 &&
                    ds.shards[2].n_samples == 0 && ds.shards[3].n_samples == 3;
    TEST_CHECK(names_ok && firsts_ok, "stream_sorted_shards_and_first_sample",
               "shard order or first_sample/n_samples wrong");
    TEST_CHECK(ds.shards[2].n_samples == 0 && has("warning: ") && has("stream_b0.bin"),
               "short_shard_skipped_with_warning", "stderr:\n%s", g_err);

    int order_ok = 1;
    for (int i = 0; i < 12; i++) order_ok = order_ok && sample_equals(&ds, i, expected[i], T);
    TEST_CHECK(order_ok, "stream_order_across_shards", "a sample differs from the expected stream");

    int wrap_ok = 1;
    for (int64_t i = 12; i < 40; i++)
        wrap_ok = wrap_ok && sample_equals(&ds, i, expected[i % 12], T);
    wrap_ok = wrap_ok && sample_equals(&ds, 12LL * 1000000007LL + 7, expected[7], T);
    TEST_CHECK(wrap_ok, "stream_wraps_after_last_shard", "index >= n_samples is not index %% 12");

    // Within a shard, sample k+1 starts on sample k's last target token.
    int in0[8], tg0[8], in1[8], tg1[8], overlap_ok = 1;
    for (int i = 0; i < 11; i++) {
        if (i == 4 || i == 8) continue; // the next sample is in the next shard
        data_sample(&ds, i, in0, tg0);
        data_sample(&ds, i + 1, in1, tg1);
        overlap_ok = overlap_ok && in1[0] == tg0[T - 1] && in0[1] == tg0[0];
    }
    TEST_CHECK(overlap_ok, "stream_one_token_overlap", "targets[T-1] of k != inputs[0] of k+1");

    // data_batch: B consecutive samples, across a shard boundary and the wrap.
    int in[5 * 8], tg[5 * 8], batch_ok = 1;
    data_batch(&ds, 10, 5, in, tg); // samples 10, 11, 0, 1, 2
    for (int b = 0; b < 5; b++)
        for (int t = 0; t < T; t++)
            batch_ok = batch_ok && in[b * T + t] == (int)expected[(10 + b) % 12][t] &&
                       tg[b * T + t] == (int)expected[(10 + b) % 12][t + 1];
    data_batch(&ds, 3, 3, in, tg); // samples 3, 4 | 5 (shard boundary)
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < T; t++)
            batch_ok = batch_ok && in[b * T + t] == (int)expected[3 + b][t] &&
                       tg[b * T + t] == (int)expected[3 + b][t + 1];
    TEST_CHECK(batch_ok, "data_batch_consecutive_samples", "batch rows differ from the stream");
    data_close(&ds);
    TEST_CHECK(ds.shards == NULL && ds.n_shards == 0, "data_close_resets", "stream not reset");
done:
    for (int i = 0; i < 4; i++) {
        unlink(path_in_dir(names[i]));
        free(tok[i]);
    }
}

static void test_micro_batch_start(void) {
    // step * global_batch + dp_rank * (global_batch / dp) + micro * micro_batch
    int ok = data_micro_batch_start(0, 32, 1, 0, 0, 8) == 0 &&
             data_micro_batch_start(0, 32, 1, 0, 3, 8) == 24 &&
             data_micro_batch_start(5, 32, 1, 0, 2, 8) == 176 &&
             data_micro_batch_start(2, 32, 2, 1, 1, 8) == 64 + 16 + 8 &&
             data_micro_batch_start(7, 32, 4, 3, 0, 8) == 224 + 24 &&
             data_micro_batch_start(3, 48, 4, 2, 2, 4) == 144 + 24 + 8 &&
             data_micro_batch_start(1000000, 512, 8, 7, 3, 16) == 512000000LL + 448 + 48;
    TEST_CHECK(ok, "micro_batch_start_values", "a start index differs from the formula");

    // For each dp, every (rank, micro, row) of a step covers the step's global_batch samples
    // exactly once, and the same set for dp = 1, 2, 4.
    const int global_batch = 32, micro_batch = 4;
    const int64_t step = 3;
    int cover_ok = 1;
    for (int dp = 1; dp <= 4; dp *= 2) {
        int seen[32] = {0};
        int micros = global_batch / (micro_batch * dp);
        for (int r = 0; r < dp; r++)
            for (int m = 0; m < micros; m++)
                for (int b = 0; b < micro_batch; b++) {
                    int64_t idx =
                        data_micro_batch_start(step, global_batch, dp, r, m, micro_batch) + b;
                    int64_t local = idx - step * global_batch;
                    if (local < 0 || local >= global_batch) cover_ok = 0;
                    else seen[local]++;
                }
        for (int i = 0; i < global_batch; i++) cover_ok = cover_ok && seen[i] == 1;
    }
    TEST_CHECK(cover_ok, "micro_batch_layouts_cover_step", "dp=1/2/4 do not cover the step once");

    // The replica's block is contiguous and split into micro-batches in order.
    int order_ok = 1;
    for (int m = 0; m + 1 < 4; m++)
        order_ok = order_ok && data_micro_batch_start(1, 32, 2, 1, m + 1, 4) ==
                                   data_micro_batch_start(1, 32, 2, 1, m, 4) + 4;
    order_ok = order_ok && data_micro_batch_start(1, 32, 2, 1, 0, 4) ==
                               data_micro_batch_start(1, 32, 2, 0, 3, 4) + 4;
    TEST_CHECK(order_ok, "micro_batches_in_order", "micro-batches are not consecutive");
}

static void test_bad_files(void) {
    const int T = 4;
    uint16_t payload[64];
    for (int i = 0; i < 64; i++) payload[i] = (uint16_t)i;
    int32_t header[256] = {0};

    header[0] = 12345, header[1] = 1, header[2] = 16;
    write_raw(path_in_dir("bad_magic.bin"), header, 256, payload, 32);
    check_bad("bad_magic", path_in_dir("bad_magic.bin"), T, 256, 1, "bad_magic.bin", "magic 12345");
    unlink(path_in_dir("bad_magic.bin"));

    header[0] = 20240520, header[1] = 7; // the uint16 magic with the uint32 version
    write_raw(path_in_dir("bad_version.bin"), header, 256, payload, 32);
    check_bad("bad_version", path_in_dir("bad_version.bin"), T, 256, 1, "bad_version.bin",
              "version 7");
    unlink(path_in_dir("bad_version.bin"));

    header[0] = 20240520, header[1] = 1, header[2] = 16;
    write_raw(path_in_dir("bad_short.bin"), header, 256, payload, 30); // one token missing
    check_bad("bad_size_too_small", path_in_dir("bad_short.bin"), T, 256, 1, "bad_short.bin",
              "too small");
    TEST_CHECK(has("1054") && has("1056") && has("truncated"), "bad_size_too_small_says_sizes",
               "stderr:\n%s", g_err);
    unlink(path_in_dir("bad_short.bin"));

    write_raw(path_in_dir("bad_long.bin"), header, 256, payload, 34); // one token extra
    check_bad("bad_size_too_large", path_in_dir("bad_long.bin"), T, 256, 1, "bad_long.bin",
              "too large");
    unlink(path_in_dir("bad_long.bin"));

    write_raw(path_in_dir("bad_header.bin"), header, 10, NULL, 0); // 40 bytes
    check_bad("bad_shorter_than_header", path_in_dir("bad_header.bin"), T, 256, 1, "bad_header.bin",
              "too small");
    unlink(path_in_dir("bad_header.bin"));

    write_raw(path_in_dir("bad_empty.bin"), NULL, 0, NULL, 0);
    check_bad("bad_empty_file", path_in_dir("bad_empty.bin"), T, 256, 1, "bad_empty.bin",
              "too small");
    unlink(path_in_dir("bad_empty.bin"));

    header[2] = -5;
    write_raw(path_in_dir("bad_count.bin"), header, 256, NULL, 0);
    check_bad("bad_negative_count", path_in_dir("bad_count.bin"), T, 256, 1, "bad_count.bin",
              "negative");
    unlink(path_in_dir("bad_count.bin"));

    // Token 37 of 64 is 300 with model.vocab_size 256; the good first shard is opened first.
    uint32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (uint32_t)(i * 3 % 256);
    TRI_ASSERT(data_write_shard(path_in_dir("vocab_000.bin"), toks, 64, 0) == TRI_OK);
    toks[37] = 300;
    TRI_ASSERT(data_write_shard(path_in_dir("vocab_001.bin"), toks, 64, 0) == TRI_OK);
    check_bad("bad_token_ge_vocab", path_in_dir("vocab_*.bin"), T, 256, 1, "vocab_001.bin",
              "token 37");
    TEST_CHECK(has("is 300") && has("model.vocab_size = 256") && !has("vocab_000.bin"),
               "bad_token_message", "stderr:\n%s", g_err);
    toks[37] = 37 * 3;
    TRI_ASSERT(data_write_shard(path_in_dir("vocab_001.bin"), toks, 64, 1) == TRI_OK);
    toks[63] = 256; // the last token, in a uint32 shard, exactly vocab_size
    TRI_ASSERT(data_write_shard(path_in_dir("vocab_002.bin"), toks, 64, 1) == TRI_OK);
    check_bad("bad_token_ge_vocab_u32", path_in_dir("vocab_*.bin"), T, 256, 1, "vocab_002.bin",
              "token 63");
    unlink(path_in_dir("vocab_000.bin"));
    unlink(path_in_dir("vocab_001.bin"));
    unlink(path_in_dir("vocab_002.bin"));

    check_bad("bad_no_match", path_in_dir("nothing_*.bin"), T, 256, 1, "nothing_*.bin",
              "data.train");
    TEST_CHECK(has("make data"), "bad_no_match_hint", "stderr:\n%s", g_err);

    // 2 shards of 13 tokens at T = 4: 3 + 3 = 6 samples; 7 are needed.
    for (int i = 0; i < 13; i++) toks[i] = (uint32_t)i;
    TRI_ASSERT(data_write_shard(path_in_dir("few_000.bin"), toks, 13, 0) == TRI_OK);
    TRI_ASSERT(data_write_shard(path_in_dir("few_001.bin"), toks, 13, 0) == TRI_OK);
    data_stream ds;
    tri_status rc = open_capture(&ds, path_in_dir("few_*.bin"), T, 256, 6);
    TEST_CHECK(rc == TRI_OK && ds.n_samples == 6, "min_samples_exactly_met", "rc=%d", (int)rc);
    if (rc == TRI_OK) data_close(&ds);
    check_bad("bad_fewer_than_min_samples", path_in_dir("few_*.bin"), T, 256, 7, "few_*.bin",
              "fewer tokens than one batch");
    TEST_CHECK(has("26 tokens") && has("7 sample(s)"), "bad_fewer_message", "stderr:\n%s", g_err);
    unlink(path_in_dir("few_000.bin"));
    unlink(path_in_dir("few_001.bin"));

    // Only shards too short for one sample: no samples at all, even with min_samples 0.
    TRI_ASSERT(data_write_shard(path_in_dir("tiny_000.bin"), toks, 4, 0) == TRI_OK);
    check_bad("bad_no_samples_at_all", path_in_dir("tiny_*.bin"), T, 256, 0, "tiny_*.bin",
              "fewer tokens than one batch");
    unlink(path_in_dir("tiny_000.bin"));

    // An unreadable file: mode 000 for a normal user; root reads anything, so there a
    // dangling symlink (open fails too) stands in.
    const char *unreadable = path_in_dir("locked_000.bin");
    if (geteuid() != 0) {
        TRI_ASSERT(data_write_shard(unreadable, toks, 13, 0) == TRI_OK);
        TRI_ASSERT(chmod(unreadable, 0) == 0);
    } else {
        TRI_ASSERT(symlink(path_in_dir("no_such_target.bin"), unreadable) == 0);
    }
    check_bad("bad_unreadable", path_in_dir("locked_*.bin"), T, 256, 1, "locked_000.bin",
              "cannot open");
    unlink(unreadable);

    TRI_ASSERT(mkdir(path_in_dir("dir_000.bin"), 0700) == 0);
    check_bad("bad_directory", path_in_dir("dir_*.bin"), T, 256, 1, "dir_000.bin",
              "not a regular file");
    rmdir(path_in_dir("dir_000.bin"));
}

// The vocab scan of a 4 MB shard (2M uint16 tokens) must take milliseconds, not seconds.
static void test_open_speed(void) {
    const int64_t ntok = 2 * 1024 * 1024;
    uint32_t *tok = make_tokens(ntok, 0, 50257);
    char *p = path_in_dir("speed_000.bin");
    TRI_ASSERT(data_write_shard(p, tok, ntok, 0) == TRI_OK);
    free(tok);
    data_stream ds;
    double t0 = time_now_s();
    tri_status rc = data_open(&ds, p, 1024, 50257, 1, "data.train");
    double ms = 1e3 * (time_now_s() - t0);
    printf("# data_open of a %lld-token uint16 shard: %.2f ms\n", (long long)ntok, ms);
    // Generous bound: a few ms natively; it also has to hold under valgrind.
    TEST_CHECK(rc == TRI_OK && ds.n_samples == (ntok - 1) / 1024 && ms < 2000.0,
               "open_4mb_shard_fast", "rc=%d %.1f ms", (int)rc, ms);
    if (rc == TRI_OK) data_close(&ds);
    unlink(p);
}

// Every data_open above, failed ones included, must have unmapped its files again.
static void test_no_mappings_left(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return; // not Linux: nothing to check
    char line[1024];
    int left = 0;
    while (fgets(line, sizeof line, f)) left += strstr(line, g_dir) != NULL;
    fclose(f);
    TEST_CHECK(left == 0, "no_shard_mappings_left", "%d mappings of test shards remain", left);
}

int main(void) {
    log_init();
    snprintf(g_dir, sizeof g_dir, "/tmp/trident_test_data_XXXXXX");
    TRI_ASSERT(mkdtemp(g_dir));
    test_round_trip();
    test_stream_order();
    test_micro_batch_start();
    test_bad_files();
    test_open_speed();
    test_no_mappings_left();
    unlink(path_in_dir("rt16_000.bin"));
    unlink(path_in_dir("rt32_000.bin"));
    unlink(path_in_dir("rtf_000.bin"));
    rmdir(g_dir);
    TEST_EXIT();
}

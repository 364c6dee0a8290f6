// data.c: llm.c token shards (mmap, validate, write) and DESIGN.md's token stream order.
//
// A shard is 256 int32 header words ([0] magic, [1] version, [2] ntok) then ntok tokens,
// uint16 for 20240520/1 and uint32 for 20240801/7. Every shard is mapped read-only for
// the life of the stream; a sample is copied out of the map on demand.
#include "io/data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_HEADER_INTS 256
#define DATA_HEADER_BYTES (DATA_HEADER_INTS * (int64_t)sizeof(int32_t))
#define DATA_MAGIC_U16 20240520
#define DATA_VERSION_U16 1
#define DATA_MAGIC_U32 20240801
#define DATA_VERSION_U32 7

// Prints "error: <message>" and "HINT: <hint>" to stderr; returns TRI_ERR_DATA.
__attribute__((format(printf, 2, 3))) static tri_status data_fail(const char *hint, const char *fmt,
                                                                  ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    LOG_ERROR("%s", msg);
    if (hint) fprintf(stderr, "HINT: %s\n", hint);
    fflush(stderr);
    return TRI_ERR_DATA;
}

static int data_compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Index of the first token >= vocab_size, or -1. Two passes: a branch-free max (which the
// compiler vectorizes, a few ms for a 4 MB shard) and, only when it fails, a search.
static int64_t data_find_bad_token(const void *tokens, int token_bytes, int64_t ntok,
                                   int vocab_size) {
    if (token_bytes == 2) {
        const uint16_t *tok = tokens;
        uint16_t max = 0;
        for (int64_t i = 0; i < ntok; i++) max = tok[i] > max ? tok[i] : max;
        if ((int64_t)max < vocab_size) return -1;
        for (int64_t i = 0; i < ntok; i++)
            if ((int64_t)tok[i] >= vocab_size) return i;
    } else {
        const uint32_t *tok = tokens;
        uint32_t max = 0;
        for (int64_t i = 0; i < ntok; i++) max = tok[i] > max ? tok[i] : max;
        if ((int64_t)max < vocab_size) return -1;
        for (int64_t i = 0; i < ntok; i++)
            if ((int64_t)tok[i] >= vocab_size) return i;
    }
    return -1;
}

static uint32_t data_token(const data_shard *sh, int64_t i) {
    const char *base = (const char *)sh->map + DATA_HEADER_BYTES;
    return sh->token_bytes == 2 ? ((const uint16_t *)base)[i] : ((const uint32_t *)base)[i];
}

// Opens, maps and checks one shard (sh->path already set). On error nothing stays open.
static tri_status data_open_shard(data_shard *sh, int T, int vocab_size, const char *what) {
    const char *path = sh->path;
    // O_NONBLOCK: a FIFO the glob matched must not block the open (it is refused below as
    // not a regular file); it does not change how a regular file is mapped.
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int err = errno;
        return data_fail("check that the file exists and that this user can read it",
                         "%s: cannot open '%s': %s", what, path, strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return data_fail("check the file system", "%s: cannot stat '%s': %s", what, path,
                         strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return data_fail("the glob must match only token shard files",
                         "%s: '%s' is not a regular file", what, path);
    }
    int64_t size = (int64_t)st.st_size;
    if (size < DATA_HEADER_BYTES) {
        close(fd);
        return data_fail("the file is truncated (an incomplete download or copy) or is not an "
                         "llm.c token shard",
                         "%s: '%s': file size too small: %lld bytes, less than the %lld-byte "
                         "shard header",
                         what, path, (long long)size, (long long)DATA_HEADER_BYTES);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_err = errno;
    close(fd); // the mapping keeps the file alive
    if (map == MAP_FAILED)
        return data_fail("check the file system and the process's memory limits",
                         "%s: cannot map '%s' (%lld bytes): %s", what, path, (long long)size,
                         strerror(map_err));
    sh->map = map;
    sh->map_bytes = (size_t)size;

    const int32_t *header = map;
    if (header[0] == DATA_MAGIC_U16 && header[1] == DATA_VERSION_U16) {
        sh->token_bytes = 2;
    } else if (header[0] == DATA_MAGIC_U32 && header[1] == DATA_VERSION_U32) {
        sh->token_bytes = 4;
    } else {
        return data_fail("the file is not an llm.c token shard; build shards with "
                         "scripts/make_byte_shards or llm.c's data scripts",
                         "%s: '%s': bad magic/version in the shard header: found magic %d "
                         "version %d, expected magic %d version %d (uint16 tokens) or magic %d "
                         "version %d (uint32 tokens)",
                         what, path, header[0], header[1], DATA_MAGIC_U16, DATA_VERSION_U16,
                         DATA_MAGIC_U32, DATA_VERSION_U32);
    }
    if (header[2] < 0)
        return data_fail("the shard header is corrupt; rebuild the file",
                         "%s: '%s': header token count %d is negative", what, path, header[2]);
    sh->ntok = header[2];
    int64_t expected = DATA_HEADER_BYTES + sh->ntok * sh->token_bytes;
    if (size != expected) {
        const char *hint = size < expected
                               ? "the file is truncated: an incomplete download or copy; "
                                 "fetch or rebuild it"
                               : "the file has trailing bytes or a wrong token count in its "
                                 "header (an incomplete or corrupted write); rebuild it";
        return data_fail(hint,
                         "%s: '%s': file size too %s: %lld bytes, expected 1024 + %lld tokens "
                         "* %d bytes = %lld bytes",
                         what, path, size < expected ? "small" : "large", (long long)size,
                         (long long)sh->ntok, sh->token_bytes, (long long)expected);
    }
    const void *tokens = (const char *)map + DATA_HEADER_BYTES;
    int64_t bad = data_find_bad_token(tokens, sh->token_bytes, sh->ntok, vocab_size);
    if (bad >= 0) {
        return data_fail("the tokenizer that built the shards and model.vocab_size must agree "
                         "(byte-level shards need model.vocab_size >= 256, GPT-2's tokenizer "
                         "50257)",
                         "%s: '%s': token %lld (0-based) is %u, not below model.vocab_size = %d",
                         what, path, (long long)bad, data_token(sh, bad), vocab_size);
    }
    sh->n_samples = sh->ntok >= 1 ? (sh->ntok - 1) / T : 0;
    if (sh->n_samples == 0)
        LOG_WARN("%s: '%s' has %lld tokens, fewer than T + 1 = %d: it yields no samples and is "
                 "skipped",
                 what, path, (long long)sh->ntok, T + 1);
    return TRI_OK;
}

tri_status data_open(data_stream *ds, const char *pattern, int T, int vocab_size,
                     int64_t min_samples, const char *what) {
    TRI_ASSERT(ds && pattern && what && T > 0 && vocab_size > 0);
    memset(ds, 0, sizeof *ds);
    ds->T = T;

    glob_t g;
    memset(&g, 0, sizeof g);
    int grc = glob(pattern, 0, NULL, &g);
    if (grc != 0) {
        globfree(&g);
        char hint[512];
        snprintf(hint, sizeof hint,
                 "run `make data` to build the embedded corpus, or check %s (a glob such as "
                 "\"data/kjv_train_*.bin\", relative to the working directory)",
                 what);
        if (grc == GLOB_NOMATCH) return data_fail(hint, "%s: no file matches '%s'", what, pattern);
        return data_fail(hint, "%s: cannot expand '%s' (%s)", what, pattern,
                         grc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
    }
    // glob sorts already; sorting here keeps the stream order independent of its flags.
    qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), data_compare_names);

    ds->n_shards = (int)g.gl_pathc;
    ds->shards = xcalloc(g.gl_pathc, sizeof(data_shard));
    for (size_t i = 0; i < g.gl_pathc; i++) ds->shards[i].path = xstrdup(g.gl_pathv[i]);
    globfree(&g);

    tri_status rc = TRI_OK;
    int64_t total_tokens = 0;
    for (int i = 0; i < ds->n_shards; i++) {
        TRI_CHECK_GOTO(data_open_shard(&ds->shards[i], T, vocab_size, what), rc, fail);
        ds->shards[i].first_sample = ds->n_samples;
        ds->n_samples += ds->shards[i].n_samples;
        total_tokens += ds->shards[i].ntok;
    }
    ds->n_tokens = total_tokens;
    int64_t needed = min_samples > 1 ? min_samples : 1;
    if (ds->n_samples < needed) {
        char hint[512];
        snprintf(hint, sizeof hint,
                 "point %s at more data, or lower model.seq_len or train.global_batch", what);
        rc = data_fail(hint,
                       "%s: '%s' holds %lld tokens in %d shard(s), %lld sample(s) of T = %d: "
                       "fewer tokens than one batch, which needs %lld sample(s) (%lld * %d + 1 "
                       "= %lld tokens in a single shard)",
                       what, pattern, (long long)total_tokens, ds->n_shards,
                       (long long)ds->n_samples, T, (long long)needed, (long long)needed, T,
                       (long long)(needed * T + 1));
        goto fail;
    }
    LOG_DEBUG("%s: %d shard(s) for '%s', %lld tokens, %lld samples of T = %d", what, ds->n_shards,
              pattern, (long long)total_tokens, (long long)ds->n_samples, T);
    return TRI_OK;
fail:
    data_close(ds);
    return rc;
}

void data_sample(const data_stream *ds, int64_t index, int *inputs, int *targets) {
    TRI_ASSERT(ds->n_samples > 0 && index >= 0);
    int64_t idx = index % ds->n_samples;
    // The last shard whose first_sample <= idx: it holds idx (shards with no samples share
    // first_sample with the next shard, so the last of such a run is the one with samples).
    int lo = 0, hi = ds->n_shards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (ds->shards[mid].first_sample <= idx) lo = mid;
        else hi = mid - 1;
    }
    const data_shard *sh = &ds->shards[lo];
    int64_t k = idx - sh->first_sample;
    TRI_ASSERT(k >= 0 && k < sh->n_samples);
    int T = ds->T;
    int64_t start = k * T; // tokens [start, start + T + 1)
    const char *base = (const char *)sh->map + DATA_HEADER_BYTES;
    if (sh->token_bytes == 2) {
        const uint16_t *tok = (const uint16_t *)base + start;
        for (int t = 0; t < T; t++) {
            inputs[t] = tok[t];
            targets[t] = tok[t + 1];
        }
    } else {
        const uint32_t *tok = (const uint32_t *)base + start;
        for (int t = 0; t < T; t++) {
            inputs[t] = (int)tok[t];
            targets[t] = (int)tok[t + 1];
        }
    }
}

void data_batch(const data_stream *ds, int64_t first, int B, int *inputs, int *targets) {
    for (int b = 0; b < B; b++)
        data_sample(ds, first + b, inputs + (size_t)b * ds->T, targets + (size_t)b * ds->T);
}

int64_t data_micro_batch_start(int64_t step, int global_batch, int dp, int dp_rank, int micro,
                               int micro_batch) {
    TRI_ASSERT(step >= 0 && dp > 0 && global_batch % dp == 0);
    TRI_ASSERT(dp_rank >= 0 && dp_rank < dp && micro >= 0 && micro_batch > 0);
    TRI_ASSERT((int64_t)(micro + 1) * micro_batch <= global_batch / dp);
    return step * global_batch + (int64_t)dp_rank * (global_batch / dp) +
           (int64_t)micro * micro_batch;
}

// splitmix64's finaliser: a bijective mix of 64 bits with full avalanche.
static uint64_t data_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

#define DATA_FEISTEL_ROUNDS 6

uint64_t data_permute(uint64_t n, uint64_t key, uint64_t epoch, uint64_t i) {
    TRI_ASSERT(i < n);
    if (n <= 1) return 0;
    int bits = 64 - __builtin_clzll(n - 1); // 2^bits >= n
    bits += bits & 1;                       // two halves of h bits
    const int h = bits / 2;
    const uint64_t mask = (UINT64_C(1) << h) - 1;
    uint64_t round_key[DATA_FEISTEL_ROUNDS];
    const uint64_t k0 = data_mix64(key ^ data_mix64(epoch + 0x9e3779b97f4a7c15ULL));
    for (int r = 0; r < DATA_FEISTEL_ROUNDS; r++)
        round_key[r] = data_mix64(k0 + (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ULL);
    uint64_t x = i;
    do { // a Feistel network is a bijection of [0, 2^bits) whatever its round function
        uint64_t left = x >> h, right = x & mask;
        for (int r = 0; r < DATA_FEISTEL_ROUNDS; r++) {
            uint64_t next = left ^ (data_mix64(right ^ round_key[r]) & mask);
            left = right;
            right = next;
        }
        x = left << h | right;
    } while (x >= n);
    return x;
}

void data_close(data_stream *ds) {
    if (!ds) return;
    for (int i = 0; i < ds->n_shards; i++) {
        data_shard *sh = &ds->shards[i];
        if (sh->map) munmap(sh->map, sh->map_bytes);
        free(sh->path);
    }
    free(ds->shards);
    memset(ds, 0, sizeof *ds);
}

tri_status data_write_shard(const char *path, const uint32_t *tokens, int64_t ntok, int force_u32) {
    TRI_ASSERT(path && ntok >= 0 && (tokens || ntok == 0));
    if (ntok > INT32_MAX)
        return data_fail("split the tokens over several shards",
                         "'%s': %lld tokens do not fit the shard header's int32 count", path,
                         (long long)ntok);
    int wide = force_u32;
    for (int64_t i = 0; i < ntok && !wide; i++) wide = tokens[i] > UINT16_MAX;

    int32_t header[DATA_HEADER_INTS] = {0};
    header[0] = wide ? DATA_MAGIC_U32 : DATA_MAGIC_U16;
    header[1] = wide ? DATA_VERSION_U32 : DATA_VERSION_U16;
    header[2] = (int32_t)ntok;

    // Written under path.tmp and renamed, so a crash never leaves half a shard under `path`.
    size_t tmp_len = strlen(path) + 5;
    char *tmp = xmalloc(tmp_len);
    snprintf(tmp, tmp_len, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int err = errno;
        tri_status rc = data_fail("check that the directory exists and is writable",
                                  "cannot create '%s': %s", tmp, strerror(err));
        free(tmp);
        return rc;
    }
    errno = 0;
    int ok = fwrite(header, sizeof header, 1, f) == 1;
    if (wide) {
        if (ntok > 0) ok = ok && fwrite(tokens, sizeof(uint32_t), (size_t)ntok, f) == (size_t)ntok;
    } else {
        enum { CHUNK = 65536 };
        uint16_t *buf = xmalloc(CHUNK * sizeof(uint16_t));
        for (int64_t i = 0; i < ntok && ok; i += CHUNK) {
            size_t n = (size_t)(ntok - i < CHUNK ? ntok - i : CHUNK);
            for (size_t j = 0; j < n; j++) buf[j] = (uint16_t)tokens[i + (int64_t)j];
            ok = fwrite(buf, sizeof(uint16_t), n, f) == n;
        }
        free(buf);
    }
    int err = ok ? 0 : (errno ? errno : EIO);
    if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) err = errno ? errno : EIO;
    if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
    if (!err && rename(tmp, path) != 0) err = errno;
    ok = err == 0;
    if (!ok) {
        unlink(tmp);
        tri_status rc = data_fail("check free disk space and that the directory is writable",
                                  "cannot write token shard '%s': %s", path, strerror(err));
        free(tmp);
        return rc;
    }
    free(tmp);
    return TRI_OK;
}

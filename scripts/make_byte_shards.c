// make_byte_shards: a text file as byte-level llm.c token shards (token = byte, vocab 256).
//
//   make_byte_shards TEXT_FILE OUT_PREFIX VAL_FRACTION
//
// Writes OUT_PREFIX_train_000.bin with the first (1 - VAL_FRACTION) of the bytes and
// OUT_PREFIX_val_000.bin with the rest, split just after a newline so that no line is cut
// between the two. Exit status: 0, 2 for usage errors, 3 for I/O errors (DESIGN.md's codes).
#include "base/common.h"
#include "io/data.h"

#include <errno.h>
#include <string.h>

static void usage(void) {
    fprintf(stderr, "usage: make_byte_shards TEXT_FILE OUT_PREFIX VAL_FRACTION\n"
                    "  e.g. make_byte_shards data/kjv.txt data/kjv 0.05\n");
}

// Reads the whole file into a fresh buffer. NULL (after a message) on error.
static unsigned char *read_file(const char *path, int64_t *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot open '%s': %s\nHINT: check the path of TEXT_FILE\n", path,
                strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = xmalloc(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            unsigned char *grown = realloc(buf, cap);
            if (!grown) {
                fprintf(stderr, "error: out of memory reading '%s'\n", path);
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        fprintf(stderr, "error: cannot read '%s'\n", path);
        free(buf);
        return NULL;
    }
    *n_out = (int64_t)n;
    return buf;
}

int main(int argc, char **argv) {
    log_init();
    if (argc != 4) {
        usage();
        return TRI_ERR_CONFIG;
    }
    const char *text_path = argv[1], *prefix = argv[2];
    char *end = NULL;
    double val_fraction = strtod(argv[3], &end);
    if (end == argv[3] || *end != '\0' || !(val_fraction > 0.0 && val_fraction < 1.0)) {
        fprintf(stderr, "error: VAL_FRACTION '%s' is not a number in (0, 1)\n", argv[3]);
        usage();
        return TRI_ERR_CONFIG;
    }

    int64_t n = 0;
    unsigned char *text = read_file(text_path, &n);
    if (!text) return TRI_ERR_DATA;
    if (n < 2) {
        fprintf(stderr, "error: '%s' has %lld bytes, too few to split into train and val\n",
                text_path, (long long)n);
        free(text);
        return TRI_ERR_DATA;
    }

    // Split just after the first newline at or past the nominal point; without one, go back
    // to the last newline before it; without any newline, split at the nominal point.
    int64_t nominal = (int64_t)((double)n * (1.0 - val_fraction));
    if (nominal < 1) nominal = 1;
    if (nominal > n - 1) nominal = n - 1;
    int64_t split = -1;
    for (int64_t i = nominal - 1; i < n - 1 && split < 0; i++)
        if (text[i] == '\n') split = i + 1;
    for (int64_t i = nominal - 2; i >= 0 && split < 0; i--)
        if (text[i] == '\n') split = i + 1;
    if (split < 0) split = nominal;

    uint32_t *tokens = xmalloc((size_t)n * sizeof(uint32_t));
    for (int64_t i = 0; i < n; i++) tokens[i] = text[i];
    free(text);

    size_t path_len = strlen(prefix) + 32;
    char *train_path = xmalloc(path_len), *val_path = xmalloc(path_len);
    snprintf(train_path, path_len, "%s_train_000.bin", prefix);
    snprintf(val_path, path_len, "%s_val_000.bin", prefix);
    tri_status rc = data_write_shard(train_path, tokens, split, 0);
    if (rc == TRI_OK) rc = data_write_shard(val_path, tokens + split, n - split, 0);
    if (rc == TRI_OK)
        printf("%s: %lld bytes -> %s: %lld tokens, %s: %lld tokens (byte-level, vocab 256)\n",
               text_path, (long long)n, train_path, (long long)split, val_path,
               (long long)(n - split));
    free(tokens);
    free(train_path);
    free(val_path);
    return rc;
}

// tokenize.c: `trident tokenize`. The inputs are cut into units (a JSON line; a plain-text
// file, or a piece of one between cut points that do not change its encoding), read in
// rounds of a few MB: the units of a round are encoded on all threads (each thread with its
// own encoder and cache), then appended in input order to the train or val shards.
//
// A document is one JSON line's "text" (blank lines are not documents) or one whole
// plain-text file (an empty file is none); the end-of-text token comes before each, as in
// llm.c's data scripts. The val split is the last --val-fraction of the input bytes: it
// starts at the first document, or cut point of a plain-text file, at or after that mark.
#include "app/tokenize.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <omp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/data.h"
#include "io/json.h"
#include "io/tokenizer.h"

enum { CHUNK_BYTES = 256 << 10, JSONL_MAX_DEPTH = 64 };

typedef struct {
    const char *path;
    int jsonl; // a .jsonl or .ndjson file: one JSON object per line
    const uint8_t *data;
    size_t size;
    int64_t base; // offset of its first byte in all inputs together
} input_file;

typedef struct {
    int file;
    size_t start, end; // bytes of the file
    int64_t line;      // JSON lines: the line's number (1-based)
    int doc_start;     // the end-of-text token goes before it
    int val;
} unit;

typedef struct {
    int first, n; // units
    tok_ids out;
    int err_unit; // -1, or the unit whose problem err describes
    char err[320];
} task;

typedef struct {
    const tokenize_options *opt;
    const tokenizer *tk;
    uint32_t eot;
    input_file *files;
    int n_files;
    int64_t total_bytes, val_mark; // val starts at the first unit at or after val_mark
    int cut_safe;
    // the unit cursor
    int cur_file;
    size_t cur_pos;
    int64_t cur_line;
    int val_started;
} tokenize_state;

typedef struct {
    const char *split; // "train" or "val"
    tok_ids buf;
    int shards, width;
    int64_t tokens;
    char first[4096], last[4096];
} shard_out;

static int is_jsonl_name(const char *path) {
    size_t n = strlen(path);
    return (n > 6 && !strcmp(path + n - 6, ".jsonl")) ||
           (n > 7 && !strcmp(path + n - 7, ".ndjson"));
}

static tri_status open_inputs(tokenize_state *st) {
    const tokenize_options *opt = st->opt;
    st->files = xcalloc((size_t)opt->n_inputs, sizeof(input_file));
    for (int i = 0; i < opt->n_inputs; i++) {
        input_file *f = &st->files[st->n_files++];
        f->path = opt->inputs[i];
        f->jsonl = is_jsonl_name(f->path);
        f->base = st->total_bytes;
        int fd = open(f->path, O_RDONLY | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            int err = fd < 0 ? errno : EISDIR;
            if (fd >= 0) close(fd);
            LOG_ERROR("tokenize: cannot read input '%s': %s", f->path,
                      err == EISDIR ? "not a regular file" : strerror(err));
            LOG_HINT("inputs are text files (one document each) or .jsonl files (one JSON "
                     "object with a \"text\" string per line)");
            return TRI_ERR_DATA;
        }
        f->size = (size_t)sb.st_size;
        if (f->size > 0) {
            void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (map == MAP_FAILED) {
                int err = errno;
                close(fd);
                LOG_ERROR("tokenize: cannot map input '%s' (%zu bytes): %s", f->path, f->size,
                          strerror(err));
                LOG_HINT("check the file system and the process's memory limits");
                return TRI_ERR_DATA;
            }
            madvise(map, f->size, MADV_SEQUENTIAL);
            f->data = map;
        }
        close(fd);
        st->total_bytes += (int64_t)f->size;
    }
    return TRI_OK;
}

static int ascii_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int ascii_letter(uint8_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

// The first cut point at or after `from` in f: after "X\n" (X ASCII, not whitespace) and
// before an ASCII letter, where the pre-tokenizers' matches never cross (tokenizer.h,
// tokenizer_cut_safe). 0 when there is none.
static size_t find_cut(const input_file *f, size_t from) {
    const uint8_t *s = f->data;
    size_t p = from < 2 ? 2 : from;
    while (p < f->size) {
        const uint8_t *nl = memchr(s + p - 1, '\n', f->size - (p - 1));
        if (!nl) return 0;
        p = (size_t)(nl - s) + 1;
        if (p < f->size && s[p - 2] < 0x80 && !ascii_space(s[p - 2]) && ascii_letter(s[p]))
            return p;
        p++;
    }
    return 0;
}

// The next unit of the inputs, or 0 at their end.
static int next_unit(tokenize_state *st, unit *u) {
    while (st->cur_file < st->n_files) {
        const input_file *f = &st->files[st->cur_file];
        if (st->cur_pos >= f->size) {
            st->cur_file++, st->cur_pos = 0, st->cur_line = 0;
            continue;
        }
        memset(u, 0, sizeof *u);
        u->file = st->cur_file;
        u->start = st->cur_pos;
        const int val_check = st->opt->val_fraction > 0 && !st->val_started;
        if (f->jsonl) {
            const uint8_t *nl = memchr(f->data + u->start, '\n', f->size - u->start);
            u->end = nl ? (size_t)(nl - f->data) : f->size;
            u->line = ++st->cur_line;
            st->cur_pos = u->end + 1;
            size_t k = u->start;
            while (k < u->end && ascii_space(f->data[k])) k++;
            if (k == u->end) continue; // a blank line
            u->doc_start = 1;
            if (val_check && f->base + (int64_t)u->start >= st->val_mark) st->val_started = 1;
        } else {
            u->doc_start = u->start == 0;
            u->end = f->size;
            if (st->cut_safe && u->start + CHUNK_BYTES < f->size) {
                size_t c = find_cut(f, u->start + CHUNK_BYTES);
                if (c) u->end = c;
            }
            int64_t mark = st->val_mark - f->base; // where val starts, in this file
            if (val_check && mark <= (int64_t)u->start) {
                st->val_started = 1;
            } else if (val_check && mark < (int64_t)u->end) {
                // Cut at the mark: where the encoding does not change if possible, else
                // after a newline (the tokens at that one place may differ from the whole
                // file's).
                size_t c = st->cut_safe ? find_cut(f, (size_t)mark) : 0;
                if (!c) {
                    const uint8_t *nl = memchr(f->data + mark, '\n', f->size - (size_t)mark);
                    c = nl && nl + 1 < f->data + f->size ? (size_t)(nl - f->data) + 1 : 0;
                }
                if (c && c < u->end) u->end = c;
            }
            st->cur_pos = u->end;
        }
        u->val = st->val_started;
        return 1;
    }
    return 0;
}

// Encodes one task's units into t->out (the end-of-text token before each document).
static void encode_task(const tokenize_state *st, task *t, const unit *units, tok_encoder *enc,
                        json_doc *doc) {
    t->out.n = 0;
    t->err_unit = -1;
    for (int k = t->first; k < t->first + t->n; k++) {
        const unit *u = &units[k];
        const input_file *f = &st->files[u->file];
        const char *text = (const char *)f->data + u->start;
        size_t n = u->end - u->start;
        if (f->jsonl) {
            char err[200];
            const json_value *root = json_parse(doc, text, n, JSONL_MAX_DEPTH, err, sizeof err);
            const json_value *tv = json_get(root, "text");
            if (!root || !tv || tv->type != JSON_STRING) {
                t->err_unit = k;
                if (!root)
                    snprintf(t->err, sizeof t->err, "%s:%lld: not a JSON object: %s", f->path,
                             (long long)u->line, err);
                else
                    snprintf(t->err, sizeof t->err,
                             "%s:%lld: the line is %s without a \"text\" string (found %s)",
                             f->path, (long long)u->line, json_type_name(root), json_type_name(tv));
                return;
            }
            text = tv->u.str.s, n = tv->u.str.len;
        } else {
            size_t bad;
            if (!json_utf8_valid((const uint8_t *)text, n, &bad)) {
                t->err_unit = k;
                snprintf(t->err, sizeof t->err, "%s: invalid UTF-8 at byte %zu (0x%02X)", f->path,
                         u->start + bad, (uint8_t)text[bad]);
                return;
            }
        }
        if (u->doc_start) tok_ids_push(&t->out, st->eot);
        tok_encode(enc, text, n, &t->out);
    }
}

static tri_status shard_flush(const tokenize_state *st, shard_out *w) {
    if (w->buf.n == 0) return TRI_OK;
    char path[4096];
    snprintf(path, sizeof path, "%s_%s_%0*d.bin", st->opt->out, w->split, w->width, w->shards);
    const int wide = tokenizer_n_ids(st->tk) > 65536;
    if (data_write_shard(path, w->buf.ids, (int64_t)w->buf.n, wide) != TRI_OK)
        return TRI_ERR_CKPT; // an output file (data_write_shard named it)
    if (w->shards == 0) snprintf(w->first, sizeof w->first, "%s", path);
    snprintf(w->last, sizeof w->last, "%s", path);
    w->shards++;
    w->tokens += (int64_t)w->buf.n;
    w->buf.n = 0;
    return TRI_OK;
}

static tri_status shard_add(const tokenize_state *st, shard_out *w, const tok_ids *ids) {
    for (size_t i = 0; i < ids->n;) {
        size_t room = (size_t)st->opt->shard_tokens - w->buf.n;
        size_t take = ids->n - i < room ? ids->n - i : room;
        if (w->buf.n + take > w->buf.cap) { // grows to at most one shard
            w->buf.cap = w->buf.n + take > 2 * w->buf.cap ? w->buf.n + take : 2 * w->buf.cap;
            if (w->buf.cap > (size_t)st->opt->shard_tokens)
                w->buf.cap = (size_t)st->opt->shard_tokens;
            uint32_t *grown = realloc(w->buf.ids, w->buf.cap * sizeof(uint32_t));
            if (!grown) {
                LOG_ERROR("tokenize: out of host memory for a shard of %zu tokens", w->buf.cap);
                LOG_HINT("pass a smaller --shard-tokens");
                return TRI_ERR_INTERNAL;
            }
            w->buf.ids = grown;
        }
        memcpy(w->buf.ids + w->buf.n, ids->ids + i, take * sizeof(uint32_t));
        w->buf.n += take, i += take;
        if (w->buf.n == (size_t)st->opt->shard_tokens) TRI_CHECK(shard_flush(st, w));
    }
    return TRI_OK;
}

// Shards already there would join the new ones under the glob the config reads.
static tri_status check_outputs(const tokenize_options *opt) {
    static const char *const splits[] = {"train", "val"};
    for (int i = 0; i < 2; i++) {
        char pattern[4200];
        snprintf(pattern, sizeof pattern, "%s_%s_*.bin", opt->out, splits[i]);
        glob_t g;
        int grc = glob(pattern, 0, NULL, &g);
        if (grc == 0 && g.gl_pathc > 0) {
            LOG_ERROR("tokenize: '%s' already exists: new shards would mix with it under the "
                      "glob %s",
                      g.gl_pathv[0], pattern);
            LOG_HINT("remove %s_train_*.bin and %s_val_*.bin first, or choose another --out",
                     opt->out, opt->out);
            globfree(&g);
            return TRI_ERR_CONFIG;
        }
        globfree(&g);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", opt->out);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (make_dirs(dir) != 0) {
            LOG_ERROR("tokenize: cannot create the output directory '%s': %s", dir,
                      strerror(errno));
            LOG_HINT("--out PREFIX names the shards' directory and file prefix, e.g. "
                     "data/mytext");
            return TRI_ERR_CKPT;
        }
    }
    return TRI_OK;
}

static int digits(int64_t x) {
    int d = 1;
    while (x >= 10) x /= 10, d++;
    return d;
}

static void print_summary(const tokenize_state *st, const shard_out *train, const shard_out *val,
                          int64_t docs, double seconds, int threads) {
    const tokenize_options *opt = st->opt;
    int64_t tokens = train->tokens + val->tokens;
    double s = seconds > 1e-9 ? seconds : 1e-9;
    printf("tokenize: %d file(s), %.1f MB, %lld documents -> %lld tokens in %.2f s on %d "
           "thread(s): %.0f documents/s, %.2f M tokens/s\n",
           st->n_files, (double)st->total_bytes / 1e6, (long long)docs, (long long)tokens, seconds,
           threads, (double)docs / s, (double)tokens / s / 1e6);
    const shard_out *outs[2] = {train, val};
    for (int i = 0; i < 2; i++) {
        const shard_out *w = outs[i];
        if (!w->shards) continue;
        printf("%-5s %lld tokens in %d shard(s): %s%s%s\n", w->split, (long long)w->tokens,
               w->shards, w->first, w->shards > 1 ? " .. " : "", w->shards > 1 ? w->last : "");
    }
    if (opt->val_fraction > 0 && !val->shards)
        LOG_WARN("tokenize: no val shard: the input has no document or cut point in its last "
                 "%.3g; add documents, or pass --val-fraction 0 and set data.eval_every: 0",
                 opt->val_fraction);
    printf("# the config keys for these shards (uint%d tokens):\n",
           tokenizer_n_ids(st->tk) > 65536 ? 32 : 16);
    printf("model:\n  vocab_size: %u\ndata:\n  train: \"%s_train_*.bin\"\n",
           tokenizer_n_ids(st->tk), opt->out);
    if (val->shards) printf("  val: \"%s_val_*.bin\"\n", opt->out);
    printf("  tokenizer: \"%s\"\n", opt->tokenizer);
}

// After an error: the shards this run wrote go, so that a rerun does not find them (and
// no half-made data set looks like a whole one).
static void remove_shards(const tokenize_state *st, const shard_out *train, const shard_out *val) {
    const shard_out *outs[2] = {train, val};
    int removed = 0;
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < outs[i]->shards; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s_%s_%0*d.bin", st->opt->out, outs[i]->split,
                     outs[i]->width, k);
            removed += unlink(path) == 0;
        }
    }
    if (removed) LOG_WARN("tokenize: removed the %d shard(s) written before the error", removed);
}

static tri_status tokenize_inputs(tokenize_state *st, int threads) {
    const tokenize_options *opt = st->opt;
    // A shard-name width that sorts every shard this input can make: each token but the
    // end-of-text ones covers at least one input byte.
    int64_t max_shards = (st->total_bytes + st->n_files + 1) / opt->shard_tokens + 1;
    int width = digits(max_shards - 1) > 3 ? digits(max_shards - 1) : 3;
    shard_out train = {.split = "train", .width = width}, val = {.split = "val", .width = width};
    const size_t round_bytes = (size_t)(threads > 2 ? threads : 2) * (4u << 20);
    tok_encoder **enc = xcalloc((size_t)threads, sizeof *enc);
    json_doc **docs = xcalloc((size_t)threads, sizeof *docs);
    for (int i = 0; i < threads; i++) enc[i] = tok_encoder_new(st->tk), docs[i] = json_doc_new();
    unit *units = NULL;
    task *tasks = NULL;
    int units_cap = 0, tasks_cap = 0; // xgrow zeroes new tasks: their `out` starts empty
    int64_t n_docs = 0;
    double t0 = time_now_s(), last_report = t0;
    tri_status rc = TRI_OK;
    for (int more = 1; more && rc == TRI_OK;) {
        int n_units = 0, n_tasks = 0;
        size_t bytes = 0, task_bytes = 0;
        unit u;
        while (bytes < round_bytes && (more = next_unit(st, &u))) {
            units = xgrow(units, n_units, &units_cap, sizeof *units);
            units[n_units] = u;
            size_t ub = u.end - u.start;
            if (n_tasks == 0 || task_bytes >= CHUNK_BYTES || units[n_units - 1].val != u.val) {
                tasks = xgrow(tasks, n_tasks, &tasks_cap, sizeof *tasks);
                tasks[n_tasks].first = n_units, tasks[n_tasks].n = 0;
                n_tasks++;
                task_bytes = 0;
            }
            tasks[n_tasks - 1].n++;
            task_bytes += ub, bytes += ub;
            n_docs += u.doc_start;
            n_units++;
        }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int t = 0; t < n_tasks; t++) {
            int me = omp_get_thread_num();
            encode_task(st, &tasks[t], units, enc[me], docs[me]);
        }
        for (int t = 0; t < n_tasks && rc == TRI_OK; t++) {
            if (tasks[t].err_unit >= 0) {
                LOG_ERROR("tokenize: %s", tasks[t].err);
                LOG_HINT(st->files[units[tasks[t].err_unit].file].jsonl
                             ? "each line of a .jsonl input is a JSON object with a \"text\" "
                               "string (blank lines are skipped)"
                             : "inputs must be UTF-8 text (convert with iconv, or name JSON "
                               "lines files *.jsonl)");
                rc = TRI_ERR_DATA;
                break;
            }
            rc = shard_add(st, units[tasks[t].first].val ? &val : &train, &tasks[t].out);
        }
        if (rc == TRI_OK && time_now_s() - last_report > 10) {
            last_report = time_now_s();
            const input_file *f = &st->files[st->cur_file < st->n_files ? st->cur_file : 0];
            LOG_INFO("tokenize: %.0f%% of the input, %lld tokens so far",
                     100.0 * (double)(f->base + (int64_t)st->cur_pos) /
                         (double)(st->total_bytes ? st->total_bytes : 1),
                     (long long)(train.tokens + val.tokens + train.buf.n + val.buf.n));
        }
    }
    if (rc == TRI_OK) rc = shard_flush(st, &train);
    if (rc == TRI_OK) rc = shard_flush(st, &val);
    if (rc == TRI_OK && train.tokens + val.tokens == 0) {
        LOG_ERROR("tokenize: the input%s (%s%s) hold%s no document: empty files and blank "
                  "lines only",
                  st->n_files > 1 ? "s" : "", st->files[0].path, st->n_files > 1 ? ", ..." : "",
                  st->n_files > 1 ? "" : "s");
        LOG_HINT("check the INPUT paths");
        rc = TRI_ERR_DATA;
    }
    if (rc == TRI_OK) print_summary(st, &train, &val, n_docs, time_now_s() - t0, threads);
    else remove_shards(st, &train, &val);
    for (int i = 0; i < tasks_cap; i++) tok_ids_free(&tasks[i].out);
    for (int i = 0; i < threads; i++) tok_encoder_free(enc[i]), json_doc_free(docs[i]);
    free(enc);
    free(docs);
    free(units);
    free(tasks);
    tok_ids_free(&train.buf);
    tok_ids_free(&val.buf);
    return rc;
}

tri_status tokenize_run(const tokenize_options *opt) {
    tokenizer *tk = NULL;
    TRI_CHECK(tokenizer_load(opt->tokenizer, &tk));
    tokenize_state st = {.opt = opt, .tk = tk, .cut_safe = tokenizer_cut_safe(tk)};
    int64_t eot = opt->eot ? tokenizer_token_id(tk, opt->eot) : tokenizer_default_eot(tk);
    tri_status rc = TRI_OK;
    if (eot < 0) {
        if (opt->eot)
            LOG_ERROR("tokenize: --eot '%s' is not a token of %s", opt->eot, opt->tokenizer);
        else
            LOG_ERROR("tokenize: %s has none of the usual end-of-text tokens (<|endoftext|>, "
                      "<|begin_of_text|>, <|end_of_text|>, </s>, <s>)",
                      opt->tokenizer);
        LOG_HINT("name the token that separates documents with --eot TOKEN (one of "
                 "added_tokens' \"content\")");
        rc = TRI_ERR_CONFIG;
    }
    st.eot = (uint32_t)eot;
    if (rc == TRI_OK) rc = check_outputs(opt);
    if (rc == TRI_OK) rc = open_inputs(&st);
    if (rc == TRI_OK) {
        st.val_mark = opt->val_fraction > 0
                          ? (int64_t)((1.0 - opt->val_fraction) * (double)st.total_bytes)
                          : INT64_MAX;
        int threads = opt->threads > 0 ? opt->threads : omp_get_num_procs();
        rc = tokenize_inputs(&st, threads);
    }
    for (int i = 0; i < st.n_files; i++)
        if (st.files[i].data) munmap((void *)st.files[i].data, st.files[i].size);
    free(st.files);
    tokenizer_free(tk);
    return rc;
}

typedef struct {
    cli_list inputs;
    tokenize_options t;
} tokenize_args;
#define TA(field) offsetof(tokenize_args, field)
static const tokenize_args TOKENIZE_DEFAULTS = {
    .t = {.val_fraction = 0.05, .shard_tokens = 100000000}};
static const cli_option TOKENIZE_OPTIONS[] = {
    {"--tokenizer", "FILE", CLI_STR, TA(t.tokenizer), .required = 1,
     .help = "a Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2's, Llama 3's)"},
    {"--out", "PREFIX", CLI_STR, TA(t.out), .required = 1,
     .help = "writes PREFIX_train_000.bin ... and PREFIX_val_000.bin ... (llm.c shards)"},
    {"--val-fraction", "F", CLI_NUM, TA(t.val_fraction), .lo = 0, .hi = 1, .hi_open = 1,
     .help = "the last F of the input bytes go to the val shards"},
    {"--shard-tokens", "N", CLI_I64, TA(t.shard_tokens), .lo = 1, .hi = INT32_MAX,
     .help = "tokens per shard"},
    {"--threads", "N", CLI_INT, TA(t.threads), .lo = 0, .hi = 4096,
     .help = "encoding threads; 0: every core"},
    {"--eot", "TOKEN", CLI_STR, TA(t.eot), .help = "the token put before each document",
     .def = "the first of <|endoftext|>, <|begin_of_text|>, <|end_of_text|>, </s>, <s> it has"},
};
const cli_command TOKENIZE_CLI = {
    .name = "tokenize",
    .args = "INPUT...",
    .args_help = "a text file (one document) or a .jsonl/.ndjson file (one document a line: an "
                 "object with a \"text\" string)",
    .min_args = 1,
    .max_args = -1,
    .args_last = 1,
    .args_offset = TA(inputs),
    .summary = "text or JSON lines into llm.c token shards, with a Hugging Face tokenizer",
    .options = TOKENIZE_OPTIONS,
    .n_options = CLI_N(TOKENIZE_OPTIONS),
    .defaults = &TOKENIZE_DEFAULTS,
    .opts_size = sizeof(tokenize_args),
};

int tokenize_main(int argc, char **argv) {
    tokenize_args ta;
    int rc = cli_parse_command(&TOKENIZE_CLI, argc, argv, &ta);
    if (rc < 0) {
        ta.t.inputs = ta.inputs.items;
        ta.t.n_inputs = ta.inputs.n;
        rc = tokenize_run(&ta.t);
    }
    cli_free(&TOKENIZE_CLI, &ta);
    return rc;
}

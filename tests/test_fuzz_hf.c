// test_fuzz_hf.c: seeded fuzzers of the Hugging Face readers (issue 18): the safetensors
// header and data (io/safetensors.c, through model.init_from's import of a whole GPT-2), the
// sharded model's model.safetensors.index.json (io/safetensors_dir.c), and config.json
// (io/hf_config.c, GPT2LMHeadModel and LlamaForCausalLM); and (hf_export) every safetensors and
// index case again through export_open and export_read_entry, what `trident sample DIR` and
// `trident export DIR` read the directory with, and (hf_config_export) every config.json case
// again through export_open: a refused value named in one message, no stray config lines. Each case writes a valid model
// directory, damages it in one of the ways below (or not), and knows from the damage what
// trident must do: succeed, or exit 4 (a damaged file; 2 for a config.json value trident
// refuses) with the file and the tensor or key named. `any` damages (random bytes) have no
// verdict but the bounds: exit 0, 2 or 4 with the file named, no signal, no hang.
//
//   build/tests/test_fuzz_hf [--cases N] [--seed S]
//
// make test runs 300 cases per family; a failing case prints its seed and number. The runs go
// through one worker process (a case that kills it is a crash, one past the time bound a
// hang; the next case starts a new worker), as tests/test_fuzz_files.c does.
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/bf16.h"
#include "io/export.h"
#include "io/hf_import.h"
#include "io/model_init.h"
#include "fuzzlib.h"
#include "testlib.h"

#define CASE_TIMEOUT_S 20
#define ANY (-1) // no verdict: 0, 2 or 4 with the file named

static char g_dir[256];
static uint64_t g_seed = 20241801, g_rng;
static uint64_t rnd(void) { return fuzz_rnd(&g_rng); }
static int64_t rnd_in(int64_t lo, int64_t hi) {
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

// The tiny model a model case holds: GPT-2, or (llama) a Llama with 4 heads sharing 2 kv
// heads, SwiGLU width 12 and an untied or (tied) a tied head: its q|k|v and gate|up entries
// are several HF tensors each.
static model_config tiny(int llama, int tied) {
    model_config mc = {.arch = "gpt2",
                       .n_layer = 1,
                       .n_head = 2,
                       .d_model = 8,
                       .seq_len = 8,
                       .vocab_size = 20,
                       .vocab_pad_to = 8,
                       .n_kv_head = 2,
                       .ffn_hidden = 32,
                       .ffn_multiple_of = 256,
                       .tie_embeddings = 1,
                       .rope_theta = 10000,
                       .norm_eps = 1e-5};
    if (llama) mc.arch = "llama", mc.n_head = 4, mc.ffn_hidden = 12, mc.tie_embeddings = tied;
    return mc;
}
static hf_config tiny_hf(int llama, int tied) {
    const model_config mc = tiny(llama, tied);
    return (hf_config){.llama = llama,
                       .n_layer = mc.n_layer,
                       .n_head = mc.n_head,
                       .n_kv_head = mc.n_kv_head,
                       .d_model = mc.d_model,
                       .max_pos = mc.seq_len,
                       .vocab_size = mc.vocab_size,
                       .ffn_hidden = mc.ffn_hidden,
                       .tie = mc.tie_embeddings};
}
static void tiny_config_json(int llama, int tied, char *out, size_t n) {
    if (!llama)
        snprintf(out, n,
                 "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 8, "
                 "\"n_positions\": 8, \"vocab_size\": 20}");
    else
        snprintf(out, n,
                 "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"num_attention_heads\": "
                 "4, \"num_key_value_heads\": 2, \"hidden_size\": 8, \"intermediate_size\": 12, "
                 "\"max_position_embeddings\": 8, \"vocab_size\": 20, \"tie_word_embeddings\": "
                 "%s}",
                 tied ? "true" : "false");
}

// ---- the worker ----
enum { FAM_ST = 0, FAM_INDEX, FAM_CONFIG };
typedef struct {
    int family, llama, tied;
    int via_export; // export_open's reading of the whole model instead of model.init_from's
    char dir[400];
} job;

// What sample and export read: config.json's model, then every entry, one at a time.
static int run_export(const job *j) {
    export_source s;
    tri_status rc = export_open(&s, j->dir);
    if (rc != TRI_OK) return (int)rc;
    float *buf = malloc((size_t)s.full.local_numel * sizeof(float) + 1);
    for (int i = 0; rc == TRI_OK && i < s.full.n_entries; i++) rc = export_read_entry(&s, i, buf);
    free(buf);
    export_close(&s);
    return (int)rc;
}

static int run_job(const job *j) {
    if (j->via_export) return run_export(j);
    run_config cfg;
    config_defaults(&cfg);
    if (j->family == FAM_CONFIG) { // config.json read and applied over a run's config
        char yaml[600];
        snprintf(yaml, sizeof yaml, "%s/run.yaml", j->dir);
        tri_status rc = hf_config_load(&cfg, yaml, 0, NULL);
        if (rc == TRI_OK) config_free(&cfg);
        return (int)rc;
    }
    cfg.model = tiny(j->llama, j->tied);
    cfg.model.init_from = (char *)j->dir;
    param_table pt;
    params_build_full(&pt, &cfg.model, 1);
    float *host = malloc(pt.local_numel * sizeof(float) + 1);
    model_init mi;
    tri_status rc = model_init_open(&mi, &cfg, &pt);
    for (int i = 0; rc == TRI_OK && i < pt.n_entries; i++)
        rc = model_init_entry(&mi, i, host + pt.entries[i].offset);
    model_init_close(&mi);
    free(host);
    params_free(&pt);
    return (int)rc;
}

typedef struct {
    int exit_code, sig, hung;
    char out[16384];
} child_result;
static pid_t g_worker = -1;
static int g_to = -1, g_from = -1;

static void worker_start(void) {
    int down[2], up[2];
    if (pipe(down) || pipe(up)) abort();
    fflush(stdout);
    g_worker = fork();
    if (g_worker == 0) {
        close(down[1]), close(up[0]);
        char out[512];
        snprintf(out, sizeof out, "%s/child.out", g_dir);
        job j;
        while (read(down[0], &j, sizeof j) == (ssize_t)sizeof j) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, 1), dup2(fd, 2), close(fd);
            int rc = run_job(&j);
            fflush(stdout), fflush(stderr);
            if (write(up[1], &rc, sizeof rc) != (ssize_t)sizeof rc) break;
        }
        _exit(0);
    }
    close(down[0]), close(up[1]);
    g_to = down[1], g_from = up[0];
}

static child_result run_case(const job *j) {
    child_result r = {0};
    if (g_worker < 0) worker_start();
    int rc = 0, status = 0;
    if (write(g_to, j, sizeof *j) != (ssize_t)sizeof *j) abort();
    struct pollfd p = {.fd = g_from, .events = POLLIN};
    const int ready = poll(&p, 1, CASE_TIMEOUT_S * 1000);
    if (ready == 0 || read(g_from, &rc, sizeof rc) != (ssize_t)sizeof rc) {
        if (ready == 0) kill(g_worker, SIGKILL), r.hung = 1;
        waitpid(g_worker, &status, 0);
        r.exit_code = -1;
        r.sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGABRT;
        close(g_to), close(g_from);
        g_worker = -1;
    } else {
        r.exit_code = rc;
    }
    char out[512];
    snprintf(out, sizeof out, "%s/child.out", g_dir);
    FILE *f = fopen(out, "r");
    size_t n = f ? fread(r.out, 1, sizeof r.out - 1, f) : 0;
    r.out[n] = 0;
    if (f) fclose(f);
    return r;
}

typedef fuzz_family family;

static void score(family *fam, int c, const char *what, const child_result *r, int want,
                  const char *file, const char *named) {
    fam->cases++;
    const char *why = NULL;
    const int code = r->exit_code;
    if (r->hung) fam->hangs++, why = "ran past the time bound";
    else if (r->sig) fam->crashes++, why = strsignal(r->sig);
    else if (want == ANY && code != 0 && code != 2 && code != 4)
        fam->wrong_failures++, why = "exit code outside 0, 2, 4";
    else if (want == 0 && code != 0) fam->wrong_failures++, why = "refused a valid directory";
    else if (want > 0 && code == 0) fam->wrong_successes++, why = "accepted a bad file";
    else if (want > 0 && code != want) fam->wrong_failures++, why = "wrong exit code";
    else if (code != 0 && !strstr(r->out, file)) fam->wrong_failures++, why = "file not named";
    else if (want > 0 && named && !strstr(r->out, named))
        fam->wrong_failures++, why = "tensor or key not named";
    else if (code != 0) fam->clean_errors++;
    else fam->successes++;
    if (!why) return;
    printf("FAIL %s_case_%d: %s (%s; exit %d, signal %d, expected %d naming %s; seed %llu)\n%s\n",
           fam->name, c, why, what, code, r->sig, want, named ? named : file,
           (unsigned long long)g_seed, r->out);
}

static void report(const family *f) { fuzz_report(f, "fuzz_"); }

static void write_text(const char *dir, const char *name, const char *text, size_t n) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    fuzz_write_text(p, text, n);
}

// ---- a safetensors file as a list of tensor descriptions ----
typedef struct {
    char name[96], dtype[8];
    int ndim;
    int64_t shape[2], begin, end;
} desc;

typedef struct {
    desc t[64];
    int n;
    unsigned char *data;
    size_t data_n;
} st_model_desc;

// The HF tensors of entries [first, first + count) of the tiny model (HF names and layouts:
// one per row block of an entry), each F32, BF16 or F16, random values.
static void make_tensors(st_model_desc *m, int first, int count, int llama, int tied) {
    model_config mc = tiny(llama, tied);
    param_table pt;
    params_build_full(&pt, &mc, 1);
    const hf_config h = tiny_hf(llama, tied);
    m->n = 0, m->data_n = 0;
    m->data = malloc(64 << 10);
    for (int i = first, row = 0; i < pt.n_entries && i < first + count; row = 0, i++)
        for (hf_src s; row < pt.entries[i].global_rows; row += (int)s.count) {
            const param_entry *e = &pt.entries[i];
            hf_map_row(&h, e, row, &s);
            if (s.zero) break; // padded vocabulary rows
            desc *d = &m->t[m->n++];
            snprintf(d->name, sizeof d->name, "%s", s.name);
            const int64_t rows = s.hf_rows > 0 ? s.hf_rows : e->global_rows;
            d->ndim = e->ndim;
            d->shape[0] = s.transpose ? e->global_cols : rows;
            d->shape[1] = s.transpose ? rows : e->global_cols;
            const int kind = (int)(rnd() % 3), size = kind ? 2 : 4;
            snprintf(d->dtype, sizeof d->dtype, "%s",
                     kind == 0   ? "F32"
                     : kind == 1 ? "BF16"
                                 : "F16");
            const int64_t numel = d->shape[0] * (d->ndim == 2 ? d->shape[1] : 1);
            d->begin = (int64_t)m->data_n, d->end = d->begin + numel * size;
            for (int64_t k = 0; k < numel; k++) {
                const float v = (float)rnd_in(-1000, 1000) / 1024.0f; // exact in F16 and BF16
                uint16_t hv;
                if (kind == 0) memcpy(m->data + m->data_n, &v, 4);
                else {
                    if (kind == 1) hv = bf16_from_f32(v);
                    else { // F16 of a multiple of 2^-10 in (-1, 1)
                        const int q = (int)lrintf(v * 1024.0f), a = q < 0 ? -q : q;
                        int ex = 0;
                        while (a && (a >> ex) > 1) ex++;
                        hv = (uint16_t)(q < 0 ? 0x8000 : 0);
                        if (a) hv |= (uint16_t)(((ex + 5) << 10) | ((a << (10 - ex)) & 0x3ff));
                    }
                    memcpy(m->data + m->data_n, &hv, 2);
                }
                m->data_n += (size_t)size;
            }
        }
    params_free(&pt);
}

// The file: 8-byte length, the JSON header (padded to 8 with spaces), the data.
static size_t serialize(const st_model_desc *m, const char *meta, int dup, unsigned char *out,
                        size_t *hlen_out) {
    char *h = (char *)out + 8;
    size_t n = (size_t)sprintf(h, "{\"__metadata__\":%s", meta);
    for (int i = 0; i < m->n + (dup >= 0); i++) {
        const desc *d = &m->t[i < m->n ? i : dup];
        char shape[64];
        if (d->ndim == 2)
            sprintf(shape, "%lld,%lld", (long long)d->shape[0], (long long)d->shape[1]);
        else sprintf(shape, "%lld", (long long)d->shape[0]);
        n += (size_t)sprintf(
            h + n, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%lld,%lld]}",
            d->name, d->dtype, shape, (long long)d->begin, (long long)d->end);
    }
    h[n++] = '}';
    while (n % 8) h[n++] = ' ';
    const uint64_t len = n;
    memcpy(out, &len, 8);
    memcpy(out + 8 + n, m->data, m->data_n);
    *hlen_out = n;
    return 8 + n + m->data_n;
}

static void put_config(const char *dir, int llama, int tied) {
    char text[512];
    tiny_config_json(llama, tied, text, sizeof text);
    write_text(dir, "config.json", text, strlen(text));
}

static void flip(unsigned char *b, size_t lo, size_t hi) {
    for (int k = (int)rnd_in(1, 3); k > 0 && hi > lo; k--)
        b[lo + rnd() % (hi - lo)] = (unsigned char)rnd();
}

// The case just scored, again through export_open (family ex): the same verdict.
static void again_via_export(job *j, family *ex, int c, const char *what, int want,
                             const char *file, const char *named) {
    j->via_export = 1;
    child_result r = run_case(j);
    score(ex, c, what, &r, want, file, named);
}

// A config case again through export_open (family hf_config_export): `trident sample DIR` or
// `export DIR` on a directory that holds config.json alone. A value trident refuses (`refused`)
// exits 2 naming DIR/config.json, in its own words only: no "N errors in /dev/null" nor "--set"
// line of the empty YAML export_open once loaded the keys with; anything else exits 2 or 4
// (the damaged config.json, or the weights that are not there) naming the directory.
static void config_via_export(job *j, family *fam, int c, const char *what, int refused,
                              const char *path) {
    j->via_export = 1;
    const child_result r = run_case(j);
    const int code = r.exit_code;
    const char *why = NULL;
    fam->cases++;
    if (r.hung) fam->hangs++, why = "ran past the time bound";
    else if (r.sig) fam->crashes++, why = strsignal(r.sig);
    else if (code == 0) fam->wrong_successes++, why = "accepted a directory without weights";
    else if (refused ? code != 2 : code != 2 && code != 4)
        fam->wrong_failures++, why = "wrong exit code";
    else if (!strstr(r.out, refused ? path : j->dir)) fam->wrong_failures++, why = "file not named";
    else if (strstr(r.out, "/dev/null") || strstr(r.out, "--set "))
        fam->wrong_failures++, why = "a line about a YAML or --set the user never gave";
    else fam->clean_errors++;
    if (why)
        printf("FAIL %s_case_%d: %s (%s; exit %d, signal %d; seed %llu)\n%s\n", fam->name, c, why,
               what, code, r.sig, (unsigned long long)g_seed, r.out);
}

static void fuzz_safetensors(int cases, family *fam, family *ex) {
    unsigned char *file = malloc(256 << 10);
    for (int c = 0; c < cases; c++) {
        g_rng = g_seed * 1000003ULL + (uint64_t)c;
        job j = {.family = FAM_ST};
        j.llama = (int)(rnd() % 2), j.tied = (int)(rnd() % 2);
        snprintf(j.dir, sizeof j.dir, "%s/st_%d", g_dir, c);
        mkdir(j.dir, 0755);
        put_config(j.dir, j.llama, j.tied);
        st_model_desc m;
        make_tensors(&m, 0, 1000, j.llama, j.tied);
        int want = 4, dup = -1, t = (int)(rnd() % (uint64_t)m.n);
        const char *meta = "{\"format\":\"pt\"}", *what;
        char named[128] = "";
        snprintf(named, sizeof named, "%s", m.t[t].name);
        const int kind = (int)(rnd() % 15);
        switch (kind) {
        case 0: want = 0, what = "valid"; break;
        case 1: {
            static const char *bad[] = {"F64", "I8", "BOOL", "f32", ""};
            snprintf(m.t[t].dtype, sizeof m.t[t].dtype, "%s", bad[rnd() % 5]);
            what = "unknown dtype";
            break;
        }
        case 2: m.t[t].shape[0] += rnd_in(1, 3), what = "shape not its byte size"; break;
        case 3: // same size, another shape: not the config's
            if (m.t[t].ndim == 2 && m.t[t].shape[0] != m.t[t].shape[1]) {
                int64_t x = m.t[t].shape[0];
                m.t[t].shape[0] = m.t[t].shape[1], m.t[t].shape[1] = x;
            } else {
                m.t[t].ndim = 2, m.t[t].shape[1] = 1;
            }
            what = "shape not the config's";
            break;
        case 4: m.t[t].begin += 1 << 20, m.t[t].end += 1 << 20, what = "data past the end"; break;
        case 5: { // overlap with another tensor
            int o = (t + 1) % m.n;
            const int64_t size = m.t[t].end - m.t[t].begin;
            m.t[t].begin = m.t[o].begin, m.t[t].end = m.t[o].begin + size;
            if (m.t[t].end > (int64_t)m.data_n)
                m.t[t].begin -= m.t[t].end - (int64_t)m.data_n, m.t[t].end = (int64_t)m.data_n;
            named[0] = 0;
            snprintf(named, sizeof named, "overlap");
            what = "overlapping data";
            break;
        }
        case 6: dup = t, what = "a name twice"; break;
        case 7:
            m.t[t].name[0] = 'X', what = "a tensor renamed (missing)";
            snprintf(named, sizeof named, "no tensor");
            break;
        case 8: { // a non-finite value
            const float v = rnd() % 2 ? NAN : INFINITY;
            const uint16_t hv = !strcmp(m.t[t].dtype, "F16") ? 0x7c00 : bf16_from_f32(v);
            const int64_t size = !strcmp(m.t[t].dtype, "F32") ? 4 : 2;
            const int64_t at = m.t[t].begin +
                               size * rnd_in(0, (m.t[t].end - m.t[t].begin) / size - 1);
            if (size == 4) memcpy(m.data + at, &v, 4);
            else memcpy(m.data + at, &hv, 2);
            what = "a non-finite value";
            break;
        }
        case 12:
            meta = rnd() % 2 ? "[]" : "7", what = "__metadata__ not an object";
            named[0] = 0;
            break;
        default:
            what = "file-level";
            named[0] = 0;
            break;
        }
        size_t hlen, n = serialize(&m, meta, dup, file, &hlen);
        if (kind == 9) { // the length field
            const uint64_t v[] = {(uint64_t)1 << 40, (uint64_t)n, 0,
                                  hlen - (uint64_t)rnd_in(8, (int64_t)hlen - 1)};
            memcpy(file, &v[rnd() % 4], 8);
            what = "header length";
        } else if (kind == 10) { // truncated
            const size_t at = (size_t)rnd_in(0, (int64_t)n - 1);
            n = at;
            what = "truncated";
        } else if (kind == 11) {
            for (int k = 0; k < 16; k++) file[n++] = (unsigned char)rnd();
            want = 0, what = "trailing bytes";
        } else if (kind == 13) {
            flip(file, 8, 8 + hlen), want = ANY, what = "random header bytes";
        } else if (kind == 14) {
            flip(file, 8 + hlen, n), want = ANY, what = "random data bytes";
        }
        write_text(j.dir, "model.safetensors", (char *)file, n);
        free(m.data);
        child_result r = run_case(&j);
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors", j.dir);
        score(fam, c, what, &r, want, kind == 7 ? j.dir : path, named[0] ? named : NULL);
        again_via_export(&j, ex, c, what, want, kind == 7 ? j.dir : path, named[0] ? named : NULL);
    }
    free(file);
}

static void fuzz_index(int cases, family *fam, family *ex) {
    unsigned char *file = malloc(256 << 10);
    char *index = malloc(64 << 10);
    for (int c = 0; c < cases; c++) {
        g_rng = g_seed * 2000003ULL + (uint64_t)c;
        job j = {.family = FAM_INDEX};
        snprintf(j.dir, sizeof j.dir, "%s/ix_%d", g_dir, c);
        mkdir(j.dir, 0755);
        put_config(j.dir, 0, 1);
        st_model_desc a, b;
        make_tensors(&a, 0, 8, 0, 1);
        make_tensors(&b, 8, 1000, 0, 1);
        static const char *const shard[] = {"model-00001-of-00002.safetensors",
                                            "model-00002-of-00002.safetensors"};
        size_t hlen, n = serialize(&a, "{}", -1, file, &hlen);
        write_text(j.dir, shard[0], (char *)file, n);
        n = serialize(&b, "{}", -1, file, &hlen);
        write_text(j.dir, shard[1], (char *)file, n);
        const int total = a.n + b.n, t = (int)(rnd() % (uint64_t)total);
        const int kind = (int)(rnd() % 11);
        const char *what = "valid", *named = NULL;
        int want = 4;
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", j.dir);
        const char *file_named = path;
        size_t len = (size_t)sprintf(index, "{\"metadata\":{\"total_size\":1},%s{",
                                     kind == 1 ? "\"weights\":" : "\"weight_map\":");
        for (int i = 0; i < total; i++) {
            const desc *d = i < a.n ? &a.t[i] : &b.t[i - a.n];
            const char *f = shard[i >= a.n];
            char val[128];
            snprintf(val, sizeof val, "\"%s\"", f);
            if (i == t && kind == 2)
                snprintf(val, sizeof val, "\"%s\"", rnd() % 2 ? "../x.safetensors" : "");
            if (i == t && kind == 3)
                snprintf(val, sizeof val, "\"model-00009-of-00002.safetensors\"");
            if (i == t && kind == 5) snprintf(val, sizeof val, "\"%s\"", shard[i < a.n]);
            if (i == t && kind == 6) snprintf(val, sizeof val, "%d", 7);
            if (i == t && kind == 4) continue;
            len += (size_t)sprintf(index + len, "%s\"%s\":%s",
                                   len && index[len - 1] != '{' ? "," : "", d->name, val);
            if (i == t && kind == 8)
                len += (size_t)sprintf(index + len, ",\"%s\":%s", d->name, val);
        }
        len += (size_t)sprintf(index + len, "}}\n");
        const desc *dt = t < a.n ? &a.t[t] : &b.t[t - a.n];
        switch (kind) {
        case 0: want = 0; break;
        case 1: what = "no weight_map"; break;
        case 2:
            what = "not a plain file name";
            named = dt->name;
            break;
        case 3:
            what = "a missing shard", named = "model-00009-of-00002.safetensors";
            file_named = j.dir;
            break;
        case 4:
            what = "a tensor left out";
            named = dt->name, file_named = j.dir;
            break;
        case 5:
            what = "a tensor in the other shard";
            named = dt->name;
            file_named = j.dir;
            break;
        case 6:
            what = "a value not a string";
            named = dt->name;
            break;
        case 7: { // truncated: valid only while the closing brace stays
            const size_t at = (size_t)rnd_in(0, (int64_t)len - 1);
            want = at >= len - 1 ? 0 : 4, len = at, what = "truncated";
            break;
        }
        case 8:
            what = "a name twice";
            named = dt->name;
            break;
        case 9:
            flip((unsigned char *)index, 0, len), want = ANY, what = "random bytes";
            file_named = j.dir;
            break;
        default: { // a shard deleted
            char p[600];
            snprintf(p, sizeof p, "%s/%s", j.dir, shard[1]);
            unlink(p);
            what = "a shard deleted", named = shard[1], file_named = j.dir;
            break;
        }
        }
        write_text(j.dir, "model.safetensors.index.json", index, len);
        free(a.data), free(b.data);
        child_result r = run_case(&j);
        score(fam, c, what, &r, want, file_named, named);
        again_via_export(&j, ex, c, what, want, file_named, named);
    }
    free(file), free(index);
}

// config.json as keys with raw JSON values.
typedef struct {
    const char *key;
    char val[64];
} kv;

static void fuzz_config(int cases, family *fam, family *ex) {
    char text[4096];
    for (int c = 0; c < cases; c++) {
        g_rng = g_seed * 3000003ULL + (uint64_t)c;
        job j = {.family = FAM_CONFIG};
        snprintf(j.dir, sizeof j.dir, "%s/cf_%d", g_dir, c);
        mkdir(j.dir, 0755);
        // the run's config: no model shape (config.json's), a seq_len both models have
        char yaml[700];
        const int yn = snprintf(yaml, sizeof yaml,
                                "model:\n  init_from: %s\n  seq_len: 16\n  vocab_pad_to: 8\n"
                                "train:\n  micro_batch: 1\n  global_batch: 1\n",
                                j.dir);
        write_text(j.dir, "run.yaml", yaml, (size_t)yn);
        const int llama = (int)(rnd() % 2);
        kv g[] = {{"model_type", "\"gpt2\""},
                  {"n_layer", "2"},
                  {"n_head", "4"},
                  {"n_embd", "64"},
                  {"n_positions", "128"},
                  {"vocab_size", "250"},
                  {"activation_function", "\"gelu_new\""},
                  {"layer_norm_epsilon", "1e-05"},
                  {"n_inner", "null"},
                  {"tie_word_embeddings", "true"}};
        kv l[] = {{"model_type", "\"llama\""},
                  {"num_hidden_layers", "2"},
                  {"num_attention_heads", "4"},
                  {"num_key_value_heads", "2"},
                  {"hidden_size", "64"},
                  {"intermediate_size", "160"},
                  {"max_position_embeddings", "128"},
                  {"vocab_size", "250"},
                  {"hidden_act", "\"silu\""},
                  {"rms_norm_eps", "1e-06"},
                  {"rope_theta", "10000.0"},
                  {"rope_scaling", "null"},
                  {"attention_bias", "false"},
                  {"tie_word_embeddings", "false"}};
        kv *keys = llama ? l : g;
        const int nk = llama ? 14 : 10, required = llama ? 8 : 6;
        const int k = (int)rnd_in(1, required - 1);
        const int kind = (int)(rnd() % 13);
        int want = 4, drop = -1;
        const char *what = "valid", *named = NULL;
        char extra[96] = ""; // a key appended after the table's
        switch (kind) {
        case 0: want = 0; break;
        case 1: // a required key missing (num_key_value_heads has a default)
            if (llama && k == 3) want = 0;
            drop = k, named = keys[k].key, what = "a key missing";
            break;
        case 2: {
            static const char *bad[] = {"\"2\"", "-1", "0", "1.5", "1e30", "true", "[]"};
            snprintf(keys[k].val, sizeof keys[k].val, "%s", bad[rnd() % 7]);
            named = keys[k].key, what = "a size not a positive int";
            if (llama && k == 3 && !strcmp(keys[k].val, "0")) named = keys[k].key;
            break;
        }
        case 3: { // a value trident refuses
            static const struct {
                int llama, key;
                const char *val;
            } r[] = {{0, 6, "\"relu\""}, {0, 7, "1e-06"},
                     {0, 8, "100"},      {0, 9, "false"},
                     {1, 8, "\"gelu\""}, {1, 11, "{\"type\": \"linear\", \"factor\": 2.0}"},
                     {1, 12, "true"},    {1, 3, "3"}};
            int p;
            do p = (int)(rnd() % 8);
            while (r[p].llama != llama);
            snprintf(keys[r[p].key].val, sizeof keys[0].val, "%s", r[p].val);
            want = 2, named = keys[r[p].key].key, what = "a refused value";
            break;
        }
        case 4:
            if (rnd() % 2) drop = 0, named = "model_type", what = "no model_type";
            else
                snprintf(keys[0].val, sizeof keys[0].val, "\"bert\""),
                    want = 2, named = "model_type", what = "another model_type";
            break;
        case 5: // the heads do not divide the hidden size
            snprintf(keys[llama ? 2 : 2].val, sizeof keys[0].val, "%s", llama ? "6" : "5");
            if (llama) snprintf(keys[3].val, sizeof keys[0].val, "6");
            want = 2, named = keys[2].key, what = "heads not dividing the hidden size";
            break;
        case 10: { // a size that parses but that trident's config refuses (the applied keys)
            static const int gk[] = {2, 3}, lk[] = {4, 5}; // heads (with n_embd), widths
            const int at = llama ? lk[rnd() % 2] : gk[rnd() % 2];
            snprintf(keys[at].val, sizeof keys[0].val, "%s", at == 2 ? "4096" : "1073741824");
            if (!llama && at == 2) snprintf(keys[3].val, sizeof keys[0].val, "1073741824");
            want = 2, named = "model.init_from", what = "a size past trident's limits";
            break;
        }
        case 11: { // more values trident refuses, as keys the table does not hold
            static const struct {
                int llama;
                const char *key, *val;
            } r[] = {{0, "scale_attn_by_inverse_layer_idx", "true"},
                     {0, "add_cross_attention", "true"},
                     {0, "scale_attn_weights", "false"},
                     {1, "mlp_bias", "true"},
                     {1, "sliding_window", "4096"},
                     {1, "use_sliding_window", "true"},
                     {1, "head_dim", "32"},
                     {1, "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}"}};
            int p;
            do p = (int)(rnd() % 8);
            while (r[p].llama != llama);
            snprintf(extra, sizeof extra, ",\n  \"%s\": %s", r[p].key, r[p].val);
            want = 2, named = r[p].key, what = "a refused setting";
            break;
        }
        case 12: // fewer positions than the run's seq_len
            snprintf(keys[llama ? 6 : 4].val, sizeof keys[0].val, "8");
            want = 2, named = keys[llama ? 6 : 4].key, what = "positions below seq_len";
            break;
        default: break;
        }
        size_t n = (size_t)sprintf(text, "{");
        for (int i = 0; i < nk; i++)
            if (i != drop)
                n += (size_t)sprintf(text + n, "%s\n  \"%s\": %s", n > 1 ? "," : "", keys[i].key,
                                     keys[i].val);
        if (kind == 9) n += (size_t)sprintf(text + n, ",\n  \"unknown_key\": {\"a\": [1, 2]}");
        n += (size_t)sprintf(text + n, "%s", extra);
        n += (size_t)sprintf(text + n, "\n}\n");
        if (kind == 6) {
            const size_t at = (size_t)rnd_in(0, (int64_t)n - 1);
            want = at >= n - 1 ? 0 : 4, n = at, what = "truncated";
        } else if (kind == 7) {
            flip((unsigned char *)text, 0, n), want = ANY, what = "random bytes";
        } else if (kind == 8) {
            n = (size_t)sprintf(text, "%s", rnd() % 2 ? "[]" : ""), what = "not an object";
        } else if (kind == 9) {
            want = 0, what = "an unknown key";
        }
        write_text(j.dir, "config.json", text, n);
        child_result r = run_case(&j);
        char path[600];
        snprintf(path, sizeof path, "%s/config.json", j.dir);
        score(fam, c, what, &r, want, path, named);
        // export_open reads positions up to config.json's own (no run seq_len to exceed)
        config_via_export(&j, ex, c, what, want == 2 && kind != 12, path);
    }
}

int main(int argc, char **argv) {
    int cases = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--cases N] [--seed S]\n", argv[0]);
            return 2;
        }
    }
    log_init();
    snprintf(g_dir, sizeof g_dir, "/tmp/trident_fuzz_hf_%d", (int)getpid());
    mkdir(g_dir, 0755);
    const double t0 = (double)time(NULL);
    family st = {.name = "hf_safetensors"}, ix = {.name = "hf_index"}, cf = {.name = "hf_config"};
    family ex = {.name = "hf_export"}, cx = {.name = "hf_config_export"};
    fuzz_safetensors(cases, &st, &ex);
    fuzz_index(cases, &ix, &ex);
    fuzz_config(cases, &cf, &cx);
    if (g_worker > 0) close(g_to), waitpid(g_worker, NULL, 0);
    report(&st);
    report(&ix);
    report(&cf);
    report(&ex);
    report(&cx);
    printf("fuzz_hf: seed %llu, %d cases per family, %.0f s\n", (unsigned long long)g_seed, cases,
           (double)time(NULL) - t0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", g_dir);
    TEST_EXIT();
}

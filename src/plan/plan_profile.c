// plan_profile.c: reading and writing device profiles (plan_profile.h). The reader is a
// reader of outside input: every error names the file and the key and returns
// TRI_ERR_CONFIG (tests/test_fuzz_profile.c fuzzes it).
#include "plan/plan_profile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "base/suggest.h"
#include "compute/backend.h"
#include "base/yaml_limit.h"

#define PROFILE_MAX_BYTES (1 << 20) // a profile is a few kB

// The numeric fields: where each goes in plan_device, and its lower bound (the value must be
// above it, or at least it with `zero_ok`).
typedef enum {
    F_PEAK_FP32,
    F_PEAK_BF16,
    F_PEAK_TF32,
    F_MATMUL_RATE,
    F_MATMUL_RATE_BF16,
    F_GEMM_HALF,
    F_ATTN_RATE,
    F_ELEM_BW,
    F_MEM_BW,
    F_INTRA_BW,
    F_INTER_BW,
    F_LATENCY_INTRA,
    F_LATENCY_INTER,
    F_COUNT
} field_id;

static const struct {
    const char *key;
    int zero_ok; // 0 allowed (else the value must be above 0)
} FIELDS[F_COUNT] = {
    {"peak_fp32", 0},        {"peak_bf16", 0}, {"peak_tf32", 0}, {"matmul_rate", 0},
    {"matmul_rate_bf16", 0}, {"gemm_half", 1}, {"attn_rate", 0}, {"elem_bw", 0},
    {"mem_bw", 0},           {"intra_bw", 0},  {"inter_bw", 0},  {"latency_intra", 1},
    {"latency_inter", 1},
};

// Every top-level key a profile may hold (NULL-terminated, for "did you mean").
static const char *const KEYS[] = {"profile_version",
                                   "device",
                                   "host",
                                   "date",
                                   "threads",
                                   "ranks",
                                   "config",
                                   "seconds",
                                   "peak_fp32",
                                   "peak_bf16",
                                   "peak_tf32",
                                   "matmul_rate",
                                   "matmul_rate_bf16",
                                   "gemm_half",
                                   "attn_rate",
                                   "elem_bw",
                                   "mem_bw",
                                   "intra_bw",
                                   "inter_bw",
                                   "latency_intra",
                                   "latency_inter",
                                   "fbw",
                                   "matmul_points",
                                   "thread_scaling",
                                   "omp_wait",
                                   "comm_all_reduce",
                                   "comm_reduce_scatter",
                                   "comm_all_gather",
                                   "comm_send",
                                   NULL};

// The optional per-collective lines (plan_calibrate_comm.c), in PLAN_COMM_OPS order: the key
// and the op it describes.
static const struct {
    const char *key;
    comm_op_id op;
} COMM_KEYS[PLAN_COMM_OPS] = {{"comm_all_reduce", COMM_OP_ALL_REDUCE},
                              {"comm_reduce_scatter", COMM_OP_REDUCE_SCATTER},
                              {"comm_all_gather", COMM_OP_ALL_GATHER},
                              {"comm_send", COMM_OP_SEND}};

static int is_comm_key(const char *k) {
    for (int i = 0; i < PLAN_COMM_OPS; i++)
        if (!strcmp(k, COMM_KEYS[i].key)) return 1;
    return 0;
}

// ---------------------------------------------------------------------------------------
// Reading

typedef struct {
    const char *path;
    yaml_document_t *doc;
} reader;

static tri_status bad(const reader *r, const char *key, const yaml_node_t *n, const char *what,
                      const char *hint) {
    if (n) LOG_ERROR("%s: %s (line %zu): %s", r->path, key, n->start_mark.line + 1, what);
    else LOG_ERROR("%s: %s: %s", r->path, key, what);
    LOG_HINT("%s; `trident plan CONFIG --calibrate --out %s` writes a fresh profile", hint,
             r->path);
    return TRI_ERR_CONFIG;
}

static const char *scalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

// A finite number, the whole scalar.
static int parse_double(const char *s, double *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(x)) return 0;
    *out = x;
    return 1;
}

static tri_status read_int(const reader *r, const char *key, const yaml_node_t *n, int lo, int hi,
                           int *out) {
    double x;
    if (!parse_double(scalar(n), &x) || x != floor(x) || x < lo || x > hi) {
        char what[96];
        snprintf(what, sizeof what, "not a whole number from %d to %d", lo, hi);
        return bad(r, key, n, what, "write a whole number");
    }
    *out = (int)x;
    return TRI_OK;
}

static tri_status read_text(const reader *r, const char *key, const yaml_node_t *n, char *out,
                            size_t cap) {
    const char *s = scalar(n);
    if (!s || !*s || strlen(s) >= cap) {
        char what[96];
        snprintf(what, sizeof what, "not a text of 1 to %zu characters", cap - 1);
        return bad(r, key, n, what, "write it as one line of text");
    }
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\')
            return bad(r, key, n, "holds a control character, quote or backslash",
                       "write it as plain text");
    snprintf(out, cap, "%s", s);
    return TRI_OK;
}

// A mapping node's value for `key`, or NULL.
static yaml_node_t *map_get(const reader *r, const yaml_node_t *map, const char *key) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const char *k = scalar(yaml_document_get_node(r->doc, p->key));
        if (k && !strcmp(k, key)) return yaml_document_get_node(r->doc, p->value);
    }
    return NULL;
}

// {value: X, source: measured | estimate}; *measured tells which.
static tri_status read_marked(const reader *r, const char *key, const yaml_node_t *n,
                              yaml_node_t **value, int *measured) {
    if (!n || n->type != YAML_MAPPING_NODE)
        return bad(r, key, n, "not a mapping {value: ..., source: measured | estimate}",
                   "write it as {value: X, source: measured} or {value: X, source: estimate}");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const char *k = scalar(yaml_document_get_node(r->doc, p->key));
        if (!k || (strcmp(k, "value") && strcmp(k, "source") && strcmp(k, "unit"))) {
            char what[160];
            snprintf(what, sizeof what, "unknown field '%.64s' (value, source and unit are known)",
                     k ? k : "(not text)");
            return bad(r, key, n, what, "remove the field");
        }
    }
    *value = map_get(r, n, "value");
    if (!*value) return bad(r, key, n, "no value", "give it a value: field");
    const char *src = scalar(map_get(r, n, "source"));
    if (!src || (strcmp(src, "measured") && strcmp(src, "estimate")))
        return bad(r, key, n, "source is not measured or estimate",
                   "say where the value comes from: source: measured or source: estimate");
    *measured = !strcmp(src, "measured");
    return TRI_OK;
}

static tri_status read_rate(const reader *r, const char *key, const yaml_node_t *n, int zero_ok,
                            double *out, int *measured) {
    yaml_node_t *v;
    TRI_CHECK(read_marked(r, key, n, &v, measured));
    double x;
    if (!parse_double(scalar(v), &x) || x < 0 || (x == 0 && !zero_ok))
        return bad(r, key, v,
                   zero_ok ? "value is not a number at least 0"
                           : "value is not a "
                             "number above 0",
                   "give a finite number (e.g. 1.5e11) in the unit of the field");
    *out = x;
    return TRI_OK;
}

// A YAML sequence of exactly k numbers into x: 1, or 0 when it is not one.
static int read_numbers(const reader *r, const yaml_node_t *v, double *x, int k) {
    if (v->type != YAML_SEQUENCE_NODE ||
        v->data.sequence.items.top - v->data.sequence.items.start != k)
        return 0;
    for (int i = 0; i < k; i++)
        if (!parse_double(scalar(yaml_document_get_node(r->doc, v->data.sequence.items.start[i])),
                          &x[i]))
            return 0;
    return 1;
}

static tri_status read_fbw(const reader *r, const yaml_node_t *n, plan_device *dev) {
    yaml_node_t *v;
    int measured;
    TRI_CHECK(read_marked(r, "fbw", n, &v, &measured));
    double x[3];
    if (!read_numbers(r, v, x, 3) || !(x[0] > 0 && x[1] > 0 && x[2] >= 0))
        return bad(r, "fbw", v, "value is not three ratios [F, B, W]",
                   "give the forward, input-gradient and weight-gradient times, e.g. [1, 1.1, "
                   "0.9] (F and B above 0, W at least 0)");
    memcpy(dev->fbw, x, sizeof x);
    dev->fbw_measured = measured;
    return TRI_OK;
}

// comm_<op>: {value: [latency_s, bytes_per_s], source: measured}, within a node.
static tri_status read_comm(const reader *r, int i, const yaml_node_t *n, plan_device *dev) {
    const char *key = COMM_KEYS[i].key;
    yaml_node_t *v;
    int measured;
    TRI_CHECK(read_marked(r, key, n, &v, &measured));
    double x[2];
    if (!read_numbers(r, v, x, 2) || !(x[0] >= 0 && x[1] > 0))
        return bad(r, key, v, "value is not [latency, bandwidth]",
                   "give the seconds per call (at least 0) and the bytes/s (above 0), e.g. "
                   "[2e-06, 5e+09]");
    const comm_op_id op = COMM_KEYS[i].op;
    dev->comm_lat[op] = x[0], dev->comm_bw[op] = x[1];
    if (op == COMM_OP_SEND) dev->comm_lat[COMM_OP_RECV] = x[0], dev->comm_bw[COMM_OP_RECV] = x[1];
    return TRI_OK;
}

// thread_scaling: {value: [[threads, matmul, attention, elementwise], ...], source: measured}:
// the rates at each measured thread count, the thread counts ascending.
static tri_status read_scaling(const reader *r, const yaml_node_t *n, plan_calib *c) {
    yaml_node_t *v;
    int measured;
    TRI_CHECK(read_marked(r, "thread_scaling", n, &v, &measured));
    const char *hint = "give a list of at most 8 [threads, matmul FLOP/s, attention FLOP/s, "
                       "elementwise bytes/s], the threads ascending from 1, the rates above 0";
    if (v->type != YAML_SEQUENCE_NODE)
        return bad(r, "thread_scaling", v, "value is not a list", hint);
    const long count = v->data.sequence.items.top - v->data.sequence.items.start;
    if (count < 1 || count > PLAN_SCALE_POINTS)
        return bad(r, "thread_scaling", v, "not 1 to 8 points", hint);
    for (long i = 0; i < count; i++) {
        const yaml_node_t *item = yaml_document_get_node(r->doc, v->data.sequence.items.start[i]);
        double x[4];
        if (!item || !read_numbers(r, item, x, 4) || !(x[0] >= 1 && x[0] <= 1 << 16) ||
            x[0] != floor(x[0]) || (i > 0 && !(x[0] > c->scale_threads[i - 1])) ||
            !(x[1] > 0 && x[2] > 0 && x[3] > 0) || !isfinite(x[1] + x[2] + x[3]))
            return bad(r, "thread_scaling", item, "a point is not [threads, rate, rate, rate]",
                       hint);
        c->scale_threads[i] = x[0], c->scale_mm[i] = x[1], c->scale_attn[i] = x[2];
        c->scale_elem[i] = x[3];
    }
    c->n_scale = (int)count;
    return TRI_OK;
}

// matmul_points: a list of {m, n, k, dtype, rate}; kept in the file for the reader's eyes,
// checked here so that a damaged list is not silently accepted.
static tri_status read_points(const reader *r, const yaml_node_t *n) {
    if (n->type != YAML_SEQUENCE_NODE)
        return bad(r, "matmul_points", n, "not a list", "write a list of {m, n, k, dtype, rate}");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        const yaml_node_t *p = yaml_document_get_node(r->doc, *it);
        if (!p || p->type != YAML_MAPPING_NODE)
            return bad(r, "matmul_points", p, "an item is not a mapping",
                       "write each point as {m: M, n: N, k: K, dtype: fp32, rate: R}");
        static const char *const nums[] = {"m", "n", "k", "rate"};
        for (int i = 0; i < 4; i++) {
            double x;
            if (!parse_double(scalar(map_get(r, p, nums[i])), &x) || !(x > 0)) {
                char what[80];
                snprintf(what, sizeof what, "an item's %s is missing or not above 0", nums[i]);
                return bad(r, "matmul_points", p, what, "give m, n, k and rate above 0");
            }
        }
        const char *dt = scalar(map_get(r, p, "dtype"));
        if (!dt || (strcmp(dt, "fp32") && strcmp(dt, "bf16")))
            return bad(r, "matmul_points", p, "an item's dtype is not fp32 or bf16",
                       "write dtype: fp32 or dtype: bf16");
    }
    return TRI_OK;
}

static tri_status read_doc(reader *r, int world, plan_device *dev) {
    yaml_node_t *root = yaml_document_get_root_node(r->doc);
    if (!root || root->type != YAML_MAPPING_NODE)
        return bad(r, "profile", root, "not a YAML mapping of keys",
                   "a profile is the YAML that --calibrate writes");
    // Unknown and repeated keys first: a typo must not pass as a missing key's default.
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *kn = yaml_document_get_node(r->doc, p->key);
        const char *k = scalar(kn);
        int known = 0;
        for (int i = 0; k && KEYS[i]; i++) known |= !strcmp(KEYS[i], k);
        if (!known) {
            const char *close = k ? suggest_closest(k, KEYS) : NULL;
            char hint[160];
            snprintf(hint, sizeof hint, "%s%s%s", close ? "did you mean " : "remove the key",
                     close ? close : "", close ? "?" : "");
            return bad(r, k ? k : "(a key that is not text)", kn, "unknown key", hint);
        }
        for (yaml_node_pair_t *q = root->data.mapping.pairs.start; q < p; q++) {
            const char *k2 = scalar(yaml_document_get_node(r->doc, q->key));
            if (k2 && !strcmp(k2, k)) return bad(r, k, kn, "given twice", "keep one of the two");
        }
    }
    // Every key but config, seconds and matmul_points is required.
    for (int i = 0; KEYS[i]; i++) {
        if (!strcmp(KEYS[i], "config") || !strcmp(KEYS[i], "seconds") ||
            !strcmp(KEYS[i], "matmul_points") || !strcmp(KEYS[i], "thread_scaling") ||
            !strcmp(KEYS[i], "omp_wait") || is_comm_key(KEYS[i]))
            continue;
        if (!map_get(r, root, KEYS[i]))
            return bad(r, KEYS[i], NULL, "missing", "every field --calibrate writes is needed");
    }
    int version;
    yaml_node_t *vn = map_get(r, root, "profile_version");
    if (read_int(r, "profile_version", vn, INT32_MIN, INT32_MAX, &version) ||
        version != PLAN_PROFILE_VERSION) {
        char what[96];
        snprintf(what, sizeof what, "not %d, the version this trident reads", PLAN_PROFILE_VERSION);
        return bad(r, "profile_version", vn, what, "calibrate again with this trident");
    }
    const char *name = scalar(map_get(r, root, "device"));
    if (!name || plan_device_lookup(name, world, dev)) {
        char hint[160];
        snprintf(hint, sizeof hint, "name the built-in device it refines: %s", plan_device_names());
        return bad(r, "device", map_get(r, root, "device"), "not a built-in device", hint);
    }
    plan_calib *c = &dev->calib;
    memset(c, 0, sizeof *c);
    TRI_CHECK(read_text(r, "host", map_get(r, root, "host"), c->host, sizeof c->host));
    TRI_CHECK(read_text(r, "date", map_get(r, root, "date"), c->date, sizeof c->date));
    TRI_CHECK(read_int(r, "threads", map_get(r, root, "threads"), 1, 1 << 16, &c->threads));
    TRI_CHECK(read_int(r, "ranks", map_get(r, root, "ranks"), 1, PLAN_MAX_WORLD, &c->ranks));
    const yaml_node_t *wn = map_get(r, root, "omp_wait");
    if (wn) TRI_CHECK(read_text(r, "omp_wait", wn, c->omp_wait, sizeof c->omp_wait));
    double v[F_COUNT];
    int measured[F_COUNT];
    for (int i = 0; i < F_COUNT; i++)
        TRI_CHECK(read_rate(r, FIELDS[i].key, map_get(r, root, FIELDS[i].key), FIELDS[i].zero_ok,
                            &v[i], &measured[i]));
    TRI_CHECK(read_fbw(r, map_get(r, root, "fbw"), dev));
    for (int i = 0; i < PLAN_COMM_OPS; i++) {
        const yaml_node_t *cn = map_get(r, root, COMM_KEYS[i].key);
        if (cn) TRI_CHECK(read_comm(r, i, cn, dev));
    }
    const yaml_node_t *pts = map_get(r, root, "matmul_points");
    if (pts) TRI_CHECK(read_points(r, pts));
    const yaml_node_t *sc = map_get(r, root, "thread_scaling");
    if (sc) TRI_CHECK(read_scaling(r, sc, c));
    dev->peak_fp32 = v[F_PEAK_FP32], dev->peak_bf16 = v[F_PEAK_BF16];
    dev->peak_tf32 = v[F_PEAK_TF32];
    // The time model's large-matmul rate is peak x efficiency: the measured rate over the
    // (estimated) peak, which stays the MFU denominator.
    dev->efficiency = v[F_MATMUL_RATE] / v[F_PEAK_FP32];
    dev->matmul_rate_bf16 = v[F_MATMUL_RATE_BF16];
    dev->gemm_half = v[F_GEMM_HALF];
    dev->attn_rate = v[F_ATTN_RATE], dev->elem_bw = v[F_ELEM_BW], dev->mem_bw = v[F_MEM_BW];
    dev->intra_bw = v[F_INTRA_BW], dev->inter_bw = v[F_INTER_BW];
    dev->latency_intra = v[F_LATENCY_INTRA], dev->latency_inter = v[F_LATENCY_INTER];
    c->intra_measured = measured[F_INTRA_BW] && measured[F_LATENCY_INTRA];
    c->calibrated = 1;
    snprintf(c->path, sizeof c->path, "%s", r->path);
    return TRI_OK;
}

tri_status plan_profile_load(const char *path, const char *what, int world, plan_device *dev) {
    reader r = {.path = path};
    FILE *f = fopen(path, "rb");
    if (!f) {
        LOG_ERROR("%s: cannot open the profile %s: %s", what, path, strerror(errno));
        if (what[0] == '-') // a config key's caller says what to do with the key
            LOG_HINT("give a profile that `trident plan CONFIG --calibrate` wrote, or a built-in "
                     "device: %s",
                     plan_device_names());
        return TRI_ERR_CONFIG;
    }
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_size > PROFILE_MAX_BYTES) {
        fclose(f);
        LOG_ERROR("%s: profile: not a regular file of at most %d bytes", path, PROFILE_MAX_BYTES);
        LOG_HINT("give the YAML file that `trident plan CONFIG --calibrate` wrote");
        return TRI_ERR_CONFIG;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    int loaded = ylimit_load_file(&parser, f, &doc);
    fclose(f);
    if (!loaded) {
        LOG_ERROR("%s: profile: not YAML: %s (line %zu)", path,
                  parser.problem ? parser.problem : "unreadable", parser.problem_mark.line + 1);
        LOG_HINT("give the YAML file that `trident plan CONFIG --calibrate` wrote");
        yaml_parser_delete(&parser);
        return TRI_ERR_CONFIG;
    }
    r.doc = &doc;
    tri_status rc = read_doc(&r, world, dev);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

void plan_omp_wait(char *out, size_t n) {
    backend_cpu_wait_describe(out, n);
    char *set = strstr(out, " (set by trident)");
    if (set) *set = '\0';
}

int plan_omp_wait_differs(const plan_device *dev, char *now, size_t n) {
    plan_omp_wait(now, n);
    return dev->calib.calibrated && dev->calib.omp_wait[0] && strcmp(now, dev->calib.omp_wait);
}

tri_status plan_profile_of_config(const run_config *cfg, int world, plan_device *dev) {
    const tri_status rc = plan_profile_load(cfg->system.device_profile, "system.device_profile",
                                            world, dev);
    if (rc != TRI_OK)
        LOG_HINT("system.device_profile in %s names a profile `trident plan CONFIG --calibrate` "
                 "wrote; fix the path or remove the key (predictions then come from the built-in "
                 "device table)",
                 cfg->source_path ? cfg->source_path : "the config");
    return rc;
}

int plan_profile_is_file(const char *arg) {
    const size_t n = strlen(arg);
    if ((n > 5 && !strcasecmp(arg + n - 5, ".yaml")) || (n > 4 && !strcasecmp(arg + n - 4, ".yml")))
        return 1;
    plan_device d;
    if (!plan_device_lookup(arg, 1, &d)) return 0;
    struct stat st;
    return stat(arg, &st) == 0;
}

// ---------------------------------------------------------------------------------------
// Writing

void plan_profile_default_path(const char *device, char *out, size_t n) {
    char host[64] = "host";
    if (gethostname(host, sizeof host) || !host[0]) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            *c = '_';
    snprintf(out, n, "profiles/%s-%s.yaml", device, host);
}

static void put(FILE *f, const char *key, double x, const char *unit, int measured,
                const char *comment) {
    fprintf(f, "%s: {value: %.6g, unit: %s, source: %s} # %s\n", key, x, unit,
            measured ? "measured" : "estimate", comment);
}

static tri_status write_body(const plan_profile *pr, FILE *f) {
    const plan_device *d = &pr->dev;
    const plan_calib *c = &d->calib;
    fprintf(f, "# trident device profile: written by `trident plan CONFIG --calibrate`, read by\n"
               "# `trident plan CONFIG --device THIS_FILE`. Every value is {value, unit, source}:\n"
               "# source measured (on this host, at the config's shapes, through trident's own\n"
               "# compute backend) or estimate (the built-in table's, which this host could not\n"
               "# measure). README \"Planning a run\" describes each field.\n");
    fprintf(f, "profile_version: %d\n", PLAN_PROFILE_VERSION);
    fprintf(f, "device: %s # the built-in device it refines (%s)\n", d->name, d->description);
    fprintf(f, "host: \"%s\"\n", c->host);
    fprintf(f, "date: \"%s\" # UTC\n", c->date);
    fprintf(f, "threads: %d # compute threads per rank it was measured with\n", c->threads);
    fprintf(f, "ranks: %d # processes (comm measured with 2 or more)\n", c->ranks);
    if (c->omp_wait[0])
        fprintf(f, "omp_wait: \"%s\" # how idle OpenMP threads waited (README \"CPU threads\")\n",
                c->omp_wait);
    if (pr->config) fprintf(f, "config: \"%s\" # whose shapes were measured\n", pr->config);
    fprintf(f, "seconds: %.2f # how long the measurement took\n", pr->seconds);
    put(f, "peak_fp32", d->peak_fp32, "FLOP/s", 0, "nominal dense peak per rank: the MFU divisor");
    put(f, "peak_bf16", d->peak_bf16, "FLOP/s", 0, "nominal bf16 peak per rank");
    put(f, "peak_tf32", d->peak_tf32, "FLOP/s", 0, "nominal TF32 peak per rank");
    put(f, "matmul_rate", pr->matmul_rate, "FLOP/s", 1,
        "R of rate(s) = R s / (s + gemm_half), fwd + bwd, fp32 operands");
    put(f, "matmul_rate_bf16", d->matmul_rate_bf16, "FLOP/s", 1,
        "the same R with bf16 operands (measured at the largest shapes, scaled)");
    put(f, "gemm_half", d->gemm_half, "elements", 1,
        "the smallest dimension at which a matmul runs at half of R (least squares, log space)");
    put(f, "attn_rate", d->attn_rate, "FLOP/s", 1,
        "attention forward + backward, counted as 12 T C FLOPs per token");
    put(f, "elem_bw", d->elem_bw, "bytes/s", 1, "LayerNorm, residual and GELU passes");
    put(f, "mem_bw", d->mem_bw, "bytes/s", 1, "AdamW streaming its state (the optimizer's time)");
    put(f, "intra_bw", d->intra_bw, "bytes/s", c->intra_measured,
        "per rank, one direction, within a node");
    put(f, "latency_intra", d->latency_intra, "s", c->intra_measured,
        "per collective call within a node");
    put(f, "inter_bw", d->inter_bw, "bytes/s", 0, "between nodes: not measurable on one host");
    put(f, "latency_inter", d->latency_inter, "s", 0, "between nodes: not measurable on one host");
    fprintf(f,
            "fbw: {value: [%.4g, %.4g, %.4g], source: measured} # one layer's forward, input "
            "gradient, weight gradient time\n",
            d->fbw[0], d->fbw[1], d->fbw[2]);
    for (int i = 0; i < PLAN_COMM_OPS && c->intra_measured; i++) {
        const comm_op_id op = COMM_KEYS[i].op;
        fprintf(f,
                "%s: {value: [%.6g, %.6g], source: measured} # within this host over %d ranks: "
                "seconds per call, bytes/s of its ring wire bytes\n",
                COMM_KEYS[i].key, d->comm_lat[op], d->comm_bw[op], c->ranks);
    }
    if (c->n_scale) {
        fprintf(f, "thread_scaling: # one rank's rates by its compute threads: [threads, matmul "
                   "FLOP/s (the two largest layer shapes), attention FLOP/s, elementwise bytes/s]\n"
                   "  value:\n");
        for (int i = 0; i < c->n_scale; i++)
            fprintf(f, "    - [%d, %.6g, %.6g, %.6g]\n", (int)c->scale_threads[i], c->scale_mm[i],
                    c->scale_attn[i], c->scale_elem[i]);
        fprintf(f, "  source: measured\n");
    }
    fprintf(f, "matmul_points: # the measurements the fit came from: m rows, n output columns, k "
               "inner; fwd + bwd FLOP/s\n");
    for (int i = 0; i < pr->n_points; i++) {
        const plan_matmul_point *p = &pr->points[i];
        fprintf(f, "  - {m: %d, n: %d, k: %d, dtype: %s, rate: %.4g}\n", p->m, p->n, p->k,
                dtype_name(p->dtype), p->rate);
    }
    return ferror(f) ? TRI_ERR_CKPT : TRI_OK;
}

tri_status plan_profile_write(const plan_profile *pr, const char *path) {
    char dir[512], tmp[600];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (mkdir(dir, 0755) && errno != EEXIST) {
            LOG_ERROR("--out: cannot create the directory %s: %s", dir, strerror(errno));
            LOG_HINT("give --out a path in a directory you can write");
            return TRI_ERR_CKPT;
        }
    }
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    tri_status rc = f ? write_body(pr, f) : TRI_ERR_CKPT;
    if (f && fclose(f)) rc = TRI_ERR_CKPT;
    if (rc == TRI_OK && rename(tmp, path)) rc = TRI_ERR_CKPT;
    if (rc != TRI_OK) {
        LOG_ERROR("--out: cannot write the profile %s: %s", path, strerror(errno));
        LOG_HINT("give --out a path you can write");
        unlink(tmp);
    }
    return rc;
}

// data_order.c: the training data's order (data_order.h): the sources and their streams, the
// step-by-step layout of each global batch, the cursor of a checkpoint, what a resume
// continues, the comparison with a config, and the start-up description.
#include "io/data_order.h"

#include <math.h>
#include <string.h>

// The permutation key of source i: run.seed, and the source's place in the list.
static uint64_t source_key(uint64_t seed, int i) {
    return seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL;
}

// Shares of the weights (normalised by the largest first, so that the sum cannot overflow).
static void shares_of(const double *w, int n, double *share) {
    double wmax = 0.0, sum = 0.0;
    for (int i = 0; i < n; i++) wmax = w[i] > wmax ? w[i] : wmax;
    for (int i = 0; i < n; i++) sum += w[i] / wmax;
    for (int i = 0; i < n; i++) share[i] = w[i] / wmax / sum;
}

void data_cursor_free(data_cursor *c) {
    if (!c) return;
    for (int i = 0; i < c->n_sources; i++) free(c->sources[i].path);
    free(c->sources);
    memset(c, 0, sizeof *c);
}

void data_order_close(data_order *o) {
    if (!o) return;
    for (int i = 0; i < o->n_sources; i++) {
        data_close(&o->src[i].stream);
        free(o->src[i].path);
    }
    free(o->src);
    blend_free(&o->sched);
    free(o->counts);
    free(o->source_of);
    free(o->nth);
    memset(o, 0, sizeof *o);
}

tri_status data_order_open(data_order *o, const config_data_sources *train, int shuffle,
                           uint64_t seed, int T, int vocab_size, int G) {
    TRI_ASSERT(train && train->n >= 1 && G >= 1);
    memset(o, 0, sizeof *o);
    const int n = train->n;
    o->n_sources = n;
    o->listed = train->listed;
    o->shuffle = shuffle;
    o->seed = seed;
    o->T = T;
    o->G = G;
    o->spread = -1;
    o->src = xcalloc((size_t)n, sizeof *o->src);
    o->counts = xcalloc((size_t)n, sizeof(int));
    if (n > 1) {
        o->source_of = xmalloc_for((size_t)G * sizeof(int), "the blend's batch layout");
        o->nth = xmalloc_for((size_t)G * sizeof(int), "the blend's batch layout");
    }
    double *w = xmalloc((size_t)n * sizeof(double)), *share = xmalloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) w[i] = train->listed ? train->items[i].weight : 1.0;
    shares_of(w, n, share);
    blend_init(&o->sched, w, n, G);
    tri_status rc = TRI_OK;
    for (int i = 0; i < n && rc == TRI_OK; i++) {
        data_order_source *s = &o->src[i];
        s->path = xstrdup(train->items[i].path);
        s->weight = w[i];
        s->share = share[i];
        s->key = source_key(seed, i);
        // A single glob needs a batch (as before blends); a source of a list its largest
        // count in a step.
        char what[64];
        int64_t need = G;
        if (train->listed) {
            snprintf(what, sizeof what, "data.train[%d].path", i);
            need = o->sched.base[i] + (o->sched.frac[i] > 0);
        } else {
            snprintf(what, sizeof what, "data.train");
        }
        rc = data_open(&s->stream, s->path, T, vocab_size, need, what);
    }
    free(w);
    free(share);
    if (rc != TRI_OK) data_order_close(o);
    return rc;
}

static int same_sources(const data_order *o, const data_cursor *c) {
    if (c->n_sources != o->n_sources) return 0;
    for (int i = 0; i < o->n_sources; i++)
        if (!c->sources[i].path || strcmp(c->sources[i].path, o->src[i].path) ||
            c->sources[i].weight != o->src[i].weight)
            return 0;
    return 1;
}

tri_status data_order_resume(data_order *o, const data_cursor *c, const char *ckpt_path) {
    TRI_ASSERT(c->step >= 0 && c->n_sources >= 1);
    // The schedule continues exactly only with the same sources, shares and batch; a
    // string form and a one-source list are the same order.
    int exact = c->recorded && c->global_batch == o->G && same_sources(o, c);
    if (!c->recorded && o->n_sources == 1 && c->sources[0].path &&
        !strcmp(c->sources[0].path, o->src[0].path)) {
        o->shuffle = 0; // written before data.shuffle: its stream in plain order
        exact = 1;
    }
    o->step = c->step;
    o->counted = 0;
    o->spread = -1;
    if (exact) {
        int64_t *extras = xcalloc((size_t)o->n_sources, sizeof(int64_t));
        for (int i = 0; i < o->n_sources; i++) {
            o->src[i].samples = c->sources[i].samples;
            o->src[i].origin_samples = c->recorded ? c->sources[i].origin_samples : 0;
            extras[i] = c->recorded ? c->sources[i].extras : 0;
        }
        o->origin_step = c->recorded ? c->origin_step : c->step;
        o->retired = c->retired;
        char why[256];
        int bad;
        const int rc = blend_set_state(&o->sched, o->step - o->origin_step, extras, &bad, why,
                                       sizeof why);
        free(extras);
        if (rc) {
            LOG_ERROR("checkpoint %s: data_sources[%d] (%s): %s", ckpt_path, bad, o->src[bad].path,
                      why);
            LOG_HINT("the manifest's data order is damaged; resume from another checkpoint "
                     "(checkpoint.resume: <checkpoint.dir>/step_N)");
            return TRI_ERR_CKPT;
        }
        return TRI_OK;
    }
    // Another order (allowed by checkpoint.resume_changes): the schedule begins anew here,
    // each source continuing after the samples drawn from the same path.
    o->origin_step = c->step;
    o->retired = c->retired;
    for (int j = 0; j < c->n_sources; j++) { // a source left out retires its samples
        int kept = 0;
        for (int i = 0; i < o->n_sources && !kept; i++)
            kept = c->sources[j].path && !strcmp(c->sources[j].path, o->src[i].path);
        if (!kept) o->retired += c->sources[j].samples;
    }
    for (int i = 0; i < o->n_sources; i++) {
        o->src[i].samples = 0;
        for (int j = 0; j < c->n_sources; j++)
            if (c->sources[j].path && !strcmp(c->sources[j].path, o->src[i].path))
                o->src[i].samples = c->sources[j].samples;
        o->src[i].origin_samples = o->src[i].samples;
    }
    return TRI_OK;
}

// Step `o->step`'s counts (the schedule's next step), and the note when a source's second
// epoch begins in it.
static void count_step(data_order *o) {
    blend_step(&o->sched, o->counts);
    o->counted = 1;
    for (int i = 0; i < o->n_sources && o->notes; i++) {
        data_order_source *s = &o->src[i];
        const int64_t n = s->stream.n_samples;
        if (s->noted_epoch2 || !(s->samples <= n && n < s->samples + o->counts[i])) continue;
        s->noted_epoch2 = 1;
        LOG_INFO("step %lld: data.train%s%s%s: epoch 2 begins: its %lld samples were each read "
                 "once, and repeat from here%s",
                 (long long)o->step + 1, o->listed ? " (" : "", o->listed ? s->path : "",
                 o->listed ? ")" : "", (long long)n,
                 o->shuffle ? " in a new order" : ", in the same order");
    }
}

// Counts up to step `step` (steps go forward only), its counts computed.
static void seek(data_order *o, int64_t step) {
    TRI_ASSERT(step >= o->step);
    if (!o->counted) count_step(o);
    while (o->step < step) {
        for (int i = 0; i < o->n_sources; i++) o->src[i].samples += o->counts[i];
        o->step++;
        count_step(o);
    }
}

static void read_sample(const data_order *o, int i, int64_t c, int *inputs, int *targets) {
    const data_order_source *s = &o->src[i];
    const int64_t n = s->stream.n_samples;
    const int64_t plain = o->shuffle ? (int64_t)data_permute((uint64_t)n, s->key, (uint64_t)(c / n),
                                                             (uint64_t)(c % n))
                                     : c;
    data_sample(&s->stream, plain, inputs, targets);
}

void data_order_batch(data_order *o, int64_t step, int pos, int B, int *inputs, int *targets) {
    TRI_ASSERT(pos >= 0 && B >= 1 && pos + B <= o->G);
    seek(o, step);
    if (o->n_sources > 1 && o->spread != step) {
        blend_interleave(o->counts, o->n_sources, o->G, o->source_of, o->nth);
        o->spread = step;
    }
    for (int b = 0; b < B; b++) {
        const int p = pos + b, i = o->n_sources > 1 ? o->source_of[p] : 0;
        const int64_t c = o->src[i].samples + (o->n_sources > 1 ? o->nth[p] : p);
        read_sample(o, i, c, inputs + (size_t)b * o->T, targets + (size_t)b * o->T);
    }
}

int64_t data_order_samples(data_order *o, int64_t step) {
    seek(o, step);
    int64_t total = o->retired;
    for (int i = 0; i < o->n_sources; i++) total += o->src[i].samples;
    return total;
}

void data_order_cursor(data_order *o, int64_t step, data_cursor *out) {
    seek(o, step);
    memset(out, 0, sizeof *out);
    out->recorded = 1;
    out->shuffle = o->shuffle;
    out->seed = o->seed;
    out->global_batch = o->G;
    out->step = step;
    out->origin_step = o->origin_step;
    out->retired = o->retired;
    out->n_sources = o->n_sources;
    out->sources = xcalloc((size_t)o->n_sources, sizeof *out->sources);
    const int64_t t = step - o->origin_step;
    for (int i = 0; i < o->n_sources; i++) {
        const data_order_source *s = &o->src[i];
        data_cursor_source *cs = &out->sources[i];
        cs->path = xstrdup(s->path);
        cs->weight = s->weight;
        cs->samples = s->samples;
        cs->origin_samples = s->origin_samples;
        // What the schedule gave beyond its base in steps [origin, step): the state that
        // blend_set_state takes back.
        cs->extras = s->samples - s->origin_samples - o->sched.base[i] * t;
    }
}

// ---- comparison ----

// "data/a_*.bin" for a single glob, "[data/a_*.bin weight 0.7, ...]" for a list.
static void describe_sources(char *out, size_t n, int count, int listed,
                             const char *(*path_of)(const void *, int),
                             double (*weight_of)(const void *, int), const void *ctx) {
    size_t len = 0;
    if (!listed) {
        snprintf(out, n, "\"%s\"", path_of(ctx, 0));
        return;
    }
    len += (size_t)snprintf(out + len, n - len, "[");
    for (int i = 0; i < count && len < n; i++) {
        char w[40];
        config_format_double(weight_of(ctx, i), w, sizeof w);
        len += (size_t)snprintf(out + len, n - len, "%s{path: \"%s\", weight: %s}", i ? ", " : "",
                                path_of(ctx, i), w);
    }
    if (len < n) snprintf(out + len, n - len, "]");
}

static const char *cursor_path(const void *c, int i) {
    const char *p = ((const data_cursor *)c)->sources[i].path;
    return p ? p : "?";
}
static double cursor_weight(const void *c, int i) {
    return ((const data_cursor *)c)->sources[i].weight;
}
static const char *config_path(const void *c, int i) {
    return ((const config_data_sources *)c)->items[i].path;
}
static double config_weight(const void *c, int i) {
    return ((const config_data_sources *)c)->listed
               ? ((const config_data_sources *)c)->items[i].weight
               : 1.0;
}

// Whether the recorded sources and the configured ones are the same paths with the same
// shares (a string and a one-source list are the same order).
static int sources_match(const data_cursor *c, const config_data_sources *t) {
    if (c->n_sources != t->n) return 0;
    double *a = xmalloc((size_t)t->n * sizeof(double)), *b = xmalloc((size_t)t->n * sizeof(double));
    double *wa = xmalloc((size_t)t->n * sizeof(double)),
           *wb = xmalloc((size_t)t->n * sizeof(double));
    int same = 1;
    for (int i = 0; i < t->n; i++) {
        wa[i] = c->sources[i].weight > 0 ? c->sources[i].weight : 1.0;
        wb[i] = config_weight(t, i);
        same = same && c->sources[i].path && !strcmp(c->sources[i].path, t->items[i].path);
    }
    shares_of(wa, t->n, a);
    shares_of(wb, t->n, b);
    for (int i = 0; i < t->n; i++) same = same && fabs(a[i] - b[i]) <= 1e-12 * fmax(a[i], b[i]);
    free(a), free(b), free(wa), free(wb);
    return same;
}

int data_order_compare(const data_cursor *c, const run_config *cfg, char *out, size_t n) {
    int count = 0;
    size_t len = 0;
    out[0] = '\0';
#define DIFF(...)                                                                                  \
    do {                                                                                           \
        if (len < n) len += (size_t)snprintf(out + len, n - len, "%s", count ? "\n" : "");         \
        if (len < n) len += (size_t)snprintf(out + len, n - len, __VA_ARGS__);                     \
        count++;                                                                                   \
    } while (0)
    if (c->recorded && c->shuffle != cfg->data.shuffle)
        DIFF("data.shuffle: %s in the checkpoint, %s in the config", c->shuffle ? "true" : "false",
             cfg->data.shuffle ? "true" : "false");
    else if (c->recorded && c->shuffle && c->seed != cfg->run.seed)
        DIFF("run.seed (the seed of the shuffled order): %llu in the checkpoint, %llu in the "
             "config",
             (unsigned long long)c->seed, (unsigned long long)cfg->run.seed);
    if (c->sources[0].path && !sources_match(c, &cfg->data.train)) {
        char was[1024], now[1024];
        describe_sources(was, sizeof was, c->n_sources,
                         c->n_sources > 1 || c->sources[0].weight != 1.0, cursor_path,
                         cursor_weight, c);
        describe_sources(now, sizeof now, cfg->data.train.n, cfg->data.train.listed, config_path,
                         config_weight, &cfg->data.train);
        DIFF("data.train: %s in the checkpoint, %s in the config", was, now);
    }
#undef DIFF
    return count;
}

// ---- what a run is told ----

// Samples a step of source i: its share of G, quantised as the schedule has it.
static double per_step(const data_order *o, int i) {
    return (double)o->sched.base[i] + (double)o->sched.frac[i] / (double)BLEND_UNITS;
}

void data_order_describe(const data_order *o, int steps) {
    char order[96];
    if (o->shuffle)
        snprintf(order, sizeof order, "shuffled (seed %llu)", (unsigned long long)o->seed);
    else snprintf(order, sizeof order, "in plain order (data.shuffle: false)");
    if (o->listed)
        LOG_INFO("data.train: a blend of %d source%s, %s, %d samples a step:", o->n_sources,
                 o->n_sources > 1 ? "s" : "", order, o->G);
    for (int i = 0; i < o->n_sources; i++) {
        const data_order_source *s = &o->src[i];
        const double q = per_step(o, i), n = (double)s->stream.n_samples;
        const double epochs = q * steps / n;
        char head[600];
        if (o->listed)
            snprintf(head, sizeof head, "  [%d] %s: weight %g (%.4g samples a step), ", i, s->path,
                     s->weight, q);
        else snprintf(head, sizeof head, "data.train: %s: ", s->path);
        LOG_INFO("%s%d shard%s, %lld tokens, %lld samples of %d tokens; %.1f steps per epoch; "
                 "the run's %d steps make %.2f epochs%s%s",
                 head, s->stream.n_shards, s->stream.n_shards > 1 ? "s" : "",
                 (long long)s->stream.n_tokens, (long long)s->stream.n_samples, o->T, n / q, steps,
                 epochs, o->listed ? "" : ", ", o->listed ? "" : order);
        if (epochs > 1.0)
            LOG_WARN("data.train%s%s%s: the run's %d steps read its %lld samples %.2f times: they "
                     "repeat from step %.0f%s",
                     o->listed ? " (" : "", o->listed ? s->path : "", o->listed ? ")" : "", steps,
                     (long long)s->stream.n_samples, epochs, floor(n / q) + 1,
                     o->shuffle ? ", each epoch in a new order" : ", in the same order");
    }
}

void data_order_json(const data_order *o, int steps, FILE *f) {
    fputc('[', f);
    for (int i = 0; i < o->n_sources; i++) {
        const data_order_source *s = &o->src[i];
        const double q = per_step(o, i);
        char w[40], share[40];
        config_format_double(s->weight, w, sizeof w);
        config_format_double(q / o->G, share, sizeof share);
        fprintf(f, "%s{\"path\":", i ? "," : "");
        config_print_quoted(f, s->path);
        fprintf(f,
                ",\"weight\":%s,\"share\":%s,\"shards\":%d,\"tokens\":%lld,\"samples\":%lld,"
                "\"epochs\":%.6g}",
                w, share, s->stream.n_shards, (long long)s->stream.n_tokens,
                (long long)s->stream.n_samples, q * steps / (double)s->stream.n_samples);
    }
    fputc(']', f);
}

// plan_search.c: `trident plan --search`: every layout of a model and batch on a world,
// planned with plan_compute, those that fit ranked by predicted step time.
//
// A layout is (tp, pp, virtual stages, schedule, zero, micro_batch, recompute, sequence
// parallelism); dp = world / (tp * pp). Families that cannot run are rejected with the rule
// they break (the rules of config_rules.c); a (tp, pp) whose every layout needs more memory
// than the device has is reported with its smallest need.
#include <stdarg.h>
#include <string.h>

#include "io/metrics.h"
#include "plan/plan.h"

typedef struct {
    int tp, pp, dp, v, zero, micro_batch, sp;
    schedule_kind schedule;
    recompute_kind recompute;
    double step_s, tokens_per_s, mfu, bubble;
    uint64_t mem; // the stage that needs the most
} layout_row;

// Values of one axis that break a rule for every layout that has them ("tp 3, 5").
typedef struct {
    int values[64];
    int n;
} value_list;

// Adds v, keeping the list sorted and without repeats.
static void value_add(value_list *l, int v) {
    int i = 0;
    while (i < l->n && l->values[i] < v) i++;
    if ((i < l->n && l->values[i] == v) || l->n == 64) return;
    memmove(l->values + i + 1, l->values + i, (size_t)(l->n - i) * sizeof(int));
    l->values[i] = v;
    l->n++;
}

typedef struct {
    layout_row *rows;
    int n, cap;
    char (*reasons)[200]; // rejected (tp, pp) families, one line each
    int n_reasons, cap_reasons;
    value_list bad_heads, bad_layers, bad_batch; // tp, pp and dp values
    long evaluated, rejected;
    plan_cache *cache;
} search_state;

static void add_reason(search_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_reason(search_state *s, const char *fmt, ...) {
    if (s->n_reasons == s->cap_reasons) {
        s->cap_reasons = s->cap_reasons ? 2 * s->cap_reasons : 32;
        char(*grown)[200] = xcalloc((size_t)s->cap_reasons, sizeof *grown);
        if (s->n_reasons) memcpy(grown, s->reasons, (size_t)s->n_reasons * sizeof *grown);
        free(s->reasons);
        s->reasons = grown;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->reasons[s->n_reasons++], sizeof s->reasons[0], fmt, ap);
    va_end(ap);
}

static void add_row(search_state *s, const layout_row *r) {
    s->rows = xgrow(s->rows, s->n, &s->cap, sizeof *s->rows);
    s->rows[s->n++] = *r;
}

static int by_step_time(const void *a, const void *b) {
    const layout_row *x = a, *y = b;
    if (x->step_s != y->step_s) return x->step_s < y->step_s ? -1 : 1;
    return x->mem < y->mem ? -1 : x->mem > y->mem;
}

// The schedules of (pp, v): one stage runs any; interleaved needs v >= 2.
static int schedules_of(int pp, int v, schedule_kind out[3]) {
    if (pp == 1) return v == 1 ? (out[0] = SCHEDULE_1F1B, 1) : 0;
    if (v == 2) return out[0] = SCHEDULE_INTERLEAVED, out[1] = SCHEDULE_ZBV, 2;
    if (v > 1) return out[0] = SCHEDULE_INTERLEAVED, 1;
    out[0] = SCHEDULE_1F1B, out[1] = SCHEDULE_GPIPE, out[2] = SCHEDULE_ZBH1;
    return 3;
}

// The zero, recompute and sequence-parallel choices of one (tp, pp, v, schedule,
// micro_batch); counts those that fit and keeps the least memory any other needed.
static void search_options(search_state *s, run_config *c, const plan_device *dev, int *fit,
                           layout_row *least) {
    const int dp = c->parallel.dp, tp = c->parallel.tp;
    const int sp_choices = tp > 1 && c->model.seq_len % tp == 0 ? 2 : 1;
    for (int zero = 0; zero <= (dp > 1 ? 3 : 0); zero++) {
        for (int rc = 0; rc < 2; rc++) {
            for (int sp = 0; sp < sp_choices; sp++) {
                c->parallel.zero = zero;
                c->parallel.recompute = (recompute_kind)rc;
                c->parallel.sequence_parallel = sp;
                plan_result p;
                if (plan_compute_cached(&p, c, dev, s->cache) != TRI_OK) continue;
                s->evaluated++;
                layout_row r = {tp,
                                c->parallel.pp,
                                dp,
                                c->parallel.virtual_stages,
                                zero,
                                c->train.micro_batch,
                                sp,
                                c->parallel.schedule,
                                c->parallel.recompute,
                                p.step_s,
                                p.tokens_per_s,
                                p.mfu,
                                p.bubble_sim,
                                p.stages[p.worst_stage].mem_total};
                if (p.fits) {
                    add_row(s, &r);
                    (*fit)++;
                } else {
                    s->rejected++;
                    if (!least->mem || r.mem < least->mem) *least = r;
                }
                plan_free(&p);
            }
        }
    }
}

// One (tp, pp): its virtual stages, schedules and micro-batch sizes, under the rules of
// config_rules.c (n_layer % (pp * v), global_batch % (micro_batch * dp), at least pp
// micro-batches for 1f1b and interleaved, a multiple of pp for interleaved).
static void search_tp_pp(search_state *s, run_config *c, const plan_device *dev, int world) {
    const int tp = c->parallel.tp, pp = c->parallel.pp, L = c->model.n_layer;
    const int dp = world / (tp * pp), gb = c->train.global_batch;
    if (L % pp) {
        value_add(&s->bad_layers, pp);
        return;
    }
    if (gb % dp) {
        value_add(&s->bad_batch, dp);
        return;
    }
    c->parallel.dp = dp;
    // The size rules of config_load for this tp and pp (a layout of the search can hold far
    // more per rank than the config's own): past them, nothing of it is built.
    char why[400];
    c->train.micro_batch = 1;
    if (config_size_problem(c, why, sizeof why)) {
        add_reason(s, "tp %d, pp %d, dp %d: %s", tp, pp, dp, why);
        return;
    }
    const int per_replica = gb / dp;
    layout_row least = {0};
    int fit = 0;
    long before = s->evaluated;
    for (int v = 1; v <= L / pp; v++) {
        if ((L / pp) % v || (v > 1 && pp == 1)) continue;
        c->parallel.virtual_stages = v;
        schedule_kind scheds[3];
        for (int k = 0, n = schedules_of(pp, v, scheds); k < n; k++) {
            c->parallel.schedule = scheds[k];
            for (int mb = 1; mb <= per_replica; mb++) {
                const int m = per_replica / mb;
                if (per_replica % mb || (scheds[k] != SCHEDULE_GPIPE && m < pp) ||
                    (scheds[k] == SCHEDULE_INTERLEAVED && m % pp) ||
                    (int64_t)m * v > SCHED_MAX_PAIRS)
                    continue;
                c->train.micro_batch = mb;
                if (config_size_problem(c, NULL, 0)) continue; // its rows pass an int

                search_options(s, c, dev, &fit, &least);
            }
        }
    }
    if (s->evaluated == before)
        add_reason(s,
                   "tp %d, pp %d, dp %d: fewer than pp micro-batches at every micro_batch "
                   "(global_batch / dp = %d)",
                   tp, pp, dp, per_replica);
    else if (!fit)
        add_reason(s,
                   "tp %d, pp %d, dp %d: does not fit: %.2f GB at least (v %d, %s, zero %d, "
                   "micro_batch %d, recompute %s%s) > %.2f GB usable",
                   tp, pp, dp, (double)least.mem / 1e9, least.v,
                   config_schedule_name(least.schedule), least.zero, least.micro_batch,
                   config_recompute_name(least.recompute), least.sp ? ", sp" : "",
                   (dev->mem_bytes - dev->reserve_bytes) / 1e9);
}

// One reason line for the values of an axis that break a rule: "tp 3, 5: model.n_head ..."
static void add_values_reason(search_state *s, const value_list *l, const char *axis,
                              const char *rule) {
    if (!l->n) return;
    char line[200];
    int n = snprintf(line, sizeof line, "%s", axis);
    for (int i = 0; i < l->n && n < 150; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s %d", i ? "," : "", l->values[i]);
    add_reason(s, "%s: %s", line, rule);
}

static void print_rows(const search_state *s, int top, FILE *f) {
    if (!s->n) {
        fprintf(f, "  none\n");
        return;
    }
    fprintf(f, "  %4s %4s %4s %4s %3s %-12s %4s %4s %-9s %-3s %10s %10s %12s %6s %7s\n", "#", "tp",
            "pp", "dp", "v", "schedule", "zero", "mb", "recompute", "sp", "memory", "step",
            "tokens/s", "MFU", "bubble");
    for (int i = 0; i < s->n && i < top; i++) {
        const layout_row *r = &s->rows[i];
        fprintf(f,
                "  %4d %4d %4d %4d %3d %-12s %4d %4d %-9s %-3s %7.2f GB %8.3f s %12.4g %5.1f%% "
                "%6.1f%%\n",
                i + 1, r->tp, r->pp, r->dp, r->v, config_schedule_name(r->schedule), r->zero,
                r->micro_batch, config_recompute_name(r->recompute), r->sp ? "yes" : "no",
                (double)r->mem / 1e9, r->step_s, r->tokens_per_s, 100 * r->mfu, 100 * r->bubble);
    }
}

static void print_json(const search_state *s, const run_config *cfg, int world,
                       const plan_device *dev, int top, FILE *f) {
    char buf[32];
    fprintf(f,
            "{\"type\":\"plan_search\",\"world\":%d,\"device\":\"%s\",\"evaluated\":%ld,"
            "\"fitting\":%d,\"layouts\":[",
            world, dev->name, s->evaluated, s->n);
    for (int i = 0; i < s->n && i < top; i++) {
        const layout_row *r = &s->rows[i];
        fprintf(f,
                "%s{\"tp\":%d,\"pp\":%d,\"dp\":%d,\"virtual_stages\":%d,\"schedule\":\"%s\","
                "\"zero\":%d,\"micro_batch\":%d,\"recompute\":\"%s\",\"sequence_parallel\":%s,"
                "\"memory_bytes\":%llu,",
                i ? "," : "", r->tp, r->pp, r->dp, r->v, config_schedule_name(r->schedule), r->zero,
                r->micro_batch, config_recompute_name(r->recompute), r->sp ? "true" : "false",
                (unsigned long long)r->mem);
        metrics_format_double(buf, sizeof buf, r->step_s);
        fprintf(f, "\"step_s\":%s,", buf);
        metrics_format_double(buf, sizeof buf, r->mfu);
        fprintf(f, "\"mfu\":%s}", buf);
    }
    fprintf(f, "],\"rejected\":[");
    for (int i = 0; i < s->n_reasons; i++) fprintf(f, "%s\"%s\"", i ? "," : "", s->reasons[i]);
    fprintf(f, "],\"config\":");
    config_print_json(cfg, f);
    fprintf(f, "}\n");
}

tri_status plan_search(const run_config *cfg, int world, const plan_device *dev, int top, int json,
                       FILE *f) {
    search_state s = {.cache = plan_cache_create()};
    run_config c = *cfg; // a shallow copy: only numbers change
    const int heads = cfg->model.n_head, width = 4 * cfg->model.d_model;
    for (int tp = 1; tp <= world; tp++) {
        if (world % tp) continue;
        if (heads % tp || width % tp) {
            value_add(&s.bad_heads, tp);
            continue;
        }
        for (int pp = 1; pp <= world / tp; pp++) {
            if ((world / tp) % pp) continue;
            c.parallel.tp = tp, c.parallel.pp = pp;
            search_tp_pp(&s, &c, dev, world);
        }
    }
    qsort(s.rows, (size_t)s.n, sizeof *s.rows, by_step_time);
    char rule[64];
    snprintf(rule, sizeof rule, "model.n_head (%d) %% tp != 0", heads);
    add_values_reason(&s, &s.bad_heads, "tp", rule);
    snprintf(rule, sizeof rule, "model.n_layer (%d) %% pp != 0", cfg->model.n_layer);
    add_values_reason(&s, &s.bad_layers, "pp", rule);
    snprintf(rule, sizeof rule, "train.global_batch (%d) %% dp != 0", cfg->train.global_batch);
    add_values_reason(&s, &s.bad_batch, "dp", rule);
    if (json) {
        print_json(&s, cfg, world, dev, top, f);
    } else {
        fprintf(f, "search: %s on %d x %s (%s), %d sequences of %d tokens per step\n",
                cfg->source_path ? cfg->source_path : "config", world, dev->name, dev->description,
                cfg->train.global_batch, cfg->model.seq_len);
        plan_print_calibration(dev, f);
        fprintf(f,
                "%ld layouts planned, %d fit in %.2f GB per device; ranked by predicted step "
                "time:\n",
                s.evaluated, s.n, (dev->mem_bytes - dev->reserve_bytes) / 1e9);
        print_rows(&s, top, f);
        if (s.n > top) fprintf(f, "  ... %d more (--top N lists more)\n", s.n - top);
        if (s.n) {
            const layout_row *r = &s.rows[0];
            fprintf(f,
                    "to use #1: --set parallel.tp=%d --set parallel.pp=%d --set parallel.dp=%d "
                    "--set parallel.virtual_stages=%d --set parallel.schedule=%s --set "
                    "parallel.zero=%d --set train.micro_batch=%d --set parallel.recompute=%s "
                    "--set parallel.sequence_parallel=%s\n",
                    r->tp, r->pp, r->dp, r->v, config_schedule_name(r->schedule), r->zero,
                    r->micro_batch, config_recompute_name(r->recompute), r->sp ? "true" : "false");
        }
        fprintf(f,
                "rejected: %ld planned layouts need more than %.2f GB (not listed); families "
                "that cannot run or never fit:\n",
                s.rejected, (dev->mem_bytes - dev->reserve_bytes) / 1e9);
        for (int i = 0; i < s.n_reasons; i++) fprintf(f, "  %s\n", s.reasons[i]);
        if (!s.n_reasons) fprintf(f, "  none\n");
    }
    free(s.rows);
    free(s.reasons);
    plan_cache_free(s.cache);
    return TRI_OK;
}

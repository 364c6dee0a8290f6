// plan_rundir.c: `trident plan RUN_DIR` (issue 21 point 3): per pipeline stage, the planner's
// prediction that the run record holds (its "plan": the step, and each stage's parts,
// plan_stage_parts) beside what the run measured (<RUN_DIR>/timing.json, app/train_timing.c):
// compute, waits (the bubble and the pipeline transfers), comm and the step, with their
// ratios, and the stage and part the prediction is furthest off. Both files are outside
// input: every value is checked (type, range, the layout agreeing between them) and a damaged
// one is refused naming the file and the key (exit 4); a directory with no run record exits 2.
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "io/metrics.h"
#include "io/run_record.h"
#include "plan/plan.h"

enum {
    PARTS = 4,                   // compute, waits, comm, step
    RECORD_MAX_LINE = 64 << 20,  // a run record longer than this is not one trident wrote
    TIMING_MAX_BYTES = 64 << 20, // timing.json: about 200 bytes per stage
    TIMING_MAX_DEPTH = 8,
};
static const char *const PART_NAMES[PARTS] = {"compute", "waits", "comm", "step"};

plan_step_parts plan_stage_parts(const plan_result *p, int pp_rank) {
    const plan_stage *s = &p->stages[pp_rank];
    plan_step_parts o;
    o.compute_s = s->t_compute + s->t_optimizer;
    // What the stage's schedule spends in collectives beyond its compute, less its pipeline
    // messages (which a run counts as waits), and its own step end.
    const double in_schedule = s->t_busy - s->t_compute - s->t_p2p_busy;
    o.comm_s = fmax(0, in_schedule) + s->t_comm[PLAN_PHASE_STEP_END];
    // The rest of the step: idle in the schedule (its makespan is at least this stage's busy
    // time), its pipeline messages, and the other stages' longer step end and optimizer.
    o.waits_s = fmax(0, p->step_s - o.compute_s - o.comm_s);
    return o;
}

// One file being read: its path for the messages, and the first problem found.
typedef struct {
    const char *path;
    char what[320];
} reader;

static int bad(reader *r, const char *fmt, const char *key, const char *detail) {
    if (!r->what[0]) snprintf(r->what, sizeof r->what, fmt, key, detail);
    return 0;
}

// A number of obj[key] (full name `name` for the message) that is finite and >= lo.
static int get_number(reader *r, const json_value *obj, const char *key, const char *name,
                      double lo, double *out) {
    const json_value *v = json_get(obj, key);
    if (!v || v->type != JSON_NUMBER)
        return bad(r, "%s: expected a number, got %s", name, json_type_name(v));
    if (!isfinite(v->u.number) || v->u.number < lo)
        return bad(r, "%s: %s", name, lo > 0 ? "not a number above 0" : "not a number >= 0");
    *out = v->u.number;
    return 1;
}

static int get_int(reader *r, const json_value *obj, const char *key, const char *name, int lo,
                   int hi, int *out) {
    uint64_t x;
    if (!json_uint(json_get(obj, key), (uint64_t)hi, &x) || (int)x < lo) {
        char range[64];
        snprintf(range, sizeof range, "an integer from %d to %d", lo, hi);
        return bad(r, "%s: expected %s", name, range);
    }
    *out = (int)x;
    return 1;
}

// A string of obj[key], copied into out[n] (the document is freed after reading).
static int get_string(reader *r, const json_value *obj, const char *key, const char *name,
                      char *out, size_t n) {
    const json_value *v = json_get(obj, key);
    if (!v || v->type != JSON_STRING || !v->u.str.len || strlen(v->u.str.s) != v->u.str.len)
        return bad(r, "%s: expected a string, got %s", name, json_type_name(v));
    if (v->u.str.len >= n) return bad(r, "%s: longer than any trident writes%s", name, "");
    memcpy(out, v->u.str.s, v->u.str.len + 1);
    return 1;
}

// What `plan RUN_DIR` shows of a run: the record's layout and prediction, the measurement.
typedef struct {
    int world, tp, pp, dp, virtual_stages, micro_batches, record_line;
    char schedule[32], device[64];
    int calibrated;
    double step_s;
    double *predicted; // (pp, PARTS) seconds
    int measured;      // timing.json holds medians
    int logged_steps, median_of, from_step, to_step;
    double *run; // (pp, PARTS + 1) ms: the parts, then the compute spread
    int *ranks;  // (pp) ranks per stage
} rundir_view;

static int read_mesh(reader *r, const json_value *root, rundir_view *v, int *tp, int *pp, int *dp) {
    const json_value *mesh = json_get(root, "mesh");
    return get_int(r, mesh, "tp", "mesh.tp", 1, PLAN_MAX_WORLD, tp) &&
           get_int(r, mesh, "pp", "mesh.pp", 1, PLAN_MAX_WORLD, pp) &&
           get_int(r, mesh, "dp", "mesh.dp", 1, PLAN_MAX_WORLD, dp) &&
           ((long long)*tp * *pp * *dp == v->world ||
            bad(r, "%s: tp x pp x dp is not the world %s", "mesh", ""));
}

static int read_record(reader *r, const json_value *root, rundir_view *v) {
    if (!get_int(r, root, "world", "world", 1, PLAN_MAX_WORLD, &v->world) ||
        !read_mesh(r, root, v, &v->tp, &v->pp, &v->dp) ||
        !get_int(r, root, "micro_batches", "micro_batches", 1, 1 << 30, &v->micro_batches))
        return 0;
    const json_value *par = json_get(json_get(root, "config"), "parallel");
    if (!get_string(r, par, "schedule", "config.parallel.schedule", v->schedule,
                    sizeof v->schedule) ||
        !get_int(r, par, "virtual_stages", "config.parallel.virtual_stages", 1, 1 << 20,
                 &v->virtual_stages))
        return 0;
    const json_value *plan = json_get(root, "plan");
    if (!plan)
        return bad(r, "%s: none: the planner has no entry for the device this run used%s", "plan",
                   "");
    if (!get_string(r, plan, "device", "plan.device", v->device, sizeof v->device) ||
        !get_number(r, plan, "step_s", "plan.step_s", 1e-300, &v->step_s))
        return 0;
    const json_value *cal = json_get(plan, "calibrated");
    if (!cal || (cal->type != JSON_TRUE && cal->type != JSON_FALSE))
        return bad(r, "%s: expected true or false, got %s", "plan.calibrated", json_type_name(cal));
    v->calibrated = cal->type == JSON_TRUE;
    const json_value *st = json_get(plan, "stages");
    if (!st) return bad(r, "%s: none (a run record of an older trident)%s", "plan.stages", "");
    if (st->type != JSON_ARRAY || st->u.array.n != (size_t)v->pp)
        return bad(r, "%s: expected an array of one object per pipeline stage (mesh.pp)%s",
                   "plan.stages", "");
    v->predicted = xcalloc((size_t)v->pp * PARTS, sizeof(double));
    for (int s = 0; s < v->pp; s++) {
        const json_value *o = st->u.array.items[s];
        double *p = &v->predicted[(size_t)s * PARTS];
        static const char *const keys[3] = {"compute_s", "waits_s", "comm_s"};
        for (int k = 0; k < 3; k++) {
            char name[96];
            snprintf(name, sizeof name, "plan.stages[%d].%s", s, keys[k]);
            if (!get_number(r, o, keys[k], name, 0, &p[k])) return 0;
        }
        p[3] = v->step_s;
    }
    return 1;
}

static int read_timing(reader *r, const json_value *root, rundir_view *v) {
    char type[16];
    int version, world, tp, pp, dp;
    if (!get_string(r, root, "type", "type", type, sizeof type)) return 0;
    if (strcmp(type, "timing")) return bad(r, "%s: expected \"timing\", got \"%s\"", "type", type);
    if (!get_int(r, root, "version", "version", 0, 1 << 30, &version)) return 0;
    if (version != 1)
        return bad(r, "%s: %s is not 1, the one this trident reads (written by a newer one?)",
                   "version", version > 1 ? "a newer version" : "0");
    rundir_view m = {.world = 0};
    if (!get_int(r, root, "world", "world", 1, PLAN_MAX_WORLD, &world)) return 0;
    m.world = world;
    if (!read_mesh(r, root, &m, &tp, &pp, &dp)) return 0;
    if (world != v->world || tp != v->tp || pp != v->pp || dp != v->dp)
        return bad(r,
                   "%s: another layout than the run record's: from another run (a resume on "
                   "a new layout rewrites it at its first logged step)%s",
                   "mesh", "");
    if (!get_int(r, root, "logged_steps", "logged_steps", 0, 1 << 30, &v->logged_steps) ||
        !get_int(r, root, "median_of", "median_of", 0, 1 << 30, &v->median_of) ||
        !get_int(r, root, "from_step", "from_step", 0, 1 << 30, &v->from_step) ||
        !get_int(r, root, "to_step", "to_step", 0, 1 << 30, &v->to_step))
        return 0;
    if (v->median_of > v->logged_steps || v->from_step > v->to_step)
        return bad(r, "%s: more steps than logged, or from_step after to_step%s", "median_of", "");
    const json_value *st = json_get(root, "stages");
    const size_t want = v->median_of ? (size_t)v->pp : 0;
    if (!st || st->type != JSON_ARRAY || st->u.array.n != want)
        return bad(r, "%s: expected an array of %s", "stages",
                   want ? "one object per pipeline stage (mesh.pp)" : "none (median_of is 0)");
    v->measured = v->median_of > 0;
    v->run = xcalloc((size_t)v->pp * (PARTS + 1), sizeof(double));
    v->ranks = xcalloc((size_t)v->pp, sizeof(int));
    static const char *const keys[PARTS + 1] = {"compute_ms", "waits_ms", "comm_ms", "step_ms",
                                                "compute_spread_ms"};
    for (size_t s = 0; s < want; s++) {
        const json_value *o = st->u.array.items[s];
        char name[96];
        int rank;
        snprintf(name, sizeof name, "stages[%zu].pp_rank", s);
        if (!get_int(r, o, "pp_rank", name, 0, PLAN_MAX_WORLD, &rank)) return 0;
        if (rank != (int)s)
            return bad(r, "%s: stages out of order (expected %s)", name, "its index");
        snprintf(name, sizeof name, "stages[%zu].ranks", s);
        if (!get_int(r, o, "ranks", name, 1, v->tp * v->dp, &v->ranks[s])) return 0;
        for (int k = 0; k < PARTS + 1; k++) {
            snprintf(name, sizeof name, "stages[%zu].%s", s, keys[k]);
            if (!get_number(r, o, keys[k], name, 0, &v->run[s * (PARTS + 1) + k])) return 0;
        }
    }
    return 1;
}

// Loads both files into *v; a status naming what is wrong.
static tri_status load_view(const char *dir, rundir_view *v, char *timing_path, size_t tn,
                            char *record_path, size_t rn) {
    struct stat st;
    snprintf(record_path, rn, "%s/metrics.jsonl", dir);
    snprintf(timing_path, tn, "%s/timing.json", dir);
    json_doc *doc = json_doc_new();
    const json_value *root = NULL;
    char err[200] = "";
    reader r = {.path = record_path};
    int got = run_record_newest(record_path, doc, &root, &v->record_line, RECORD_MAX_LINE, err,
                                sizeof err);
    if (got == 0) {
        json_doc_free(doc);
        const int missing = stat(record_path, &st) != 0;
        LOG_ERROR("trident plan %s: no run record: %s %s", dir, record_path,
                  missing ? "does not exist" : "has no {\"type\":\"run\"} line");
        LOG_HINT("give a run.out_dir that a `trident train` has started (its metrics.jsonl "
                 "begins with the run record; a run with log.metrics elsewhere has none there), "
                 "or a config file to plan");
        return TRI_ERR_CONFIG;
    }
    if (got < 0) snprintf(r.what, sizeof r.what, "not valid JSON: %s", err);
    else read_record(&r, root, v);
    json_doc_free(doc);
    if (r.what[0]) {
        LOG_ERROR("%s line %d: run record: %s", record_path, v->record_line, r.what);
        LOG_HINT("the run record is the newest {\"type\":\"run\"} line that `trident train` "
                 "wrote; `trident plan CONFIG` predicts the layout of a config instead");
        return TRI_ERR_CKPT;
    }
    size_t len = 0;
    char *text = tri_read_small_file(timing_path, TIMING_MAX_BYTES, &len);
    if (!text && errno == ENOENT) return TRI_OK; // no step logged yet (or an older trident)
    r = (reader){.path = timing_path};
    if (!text) {
        snprintf(r.what, sizeof r.what, "%s",
                 errno == EFBIG ? "larger than 64 MiB: not a file trident wrote" : strerror(errno));
    } else {
        doc = json_doc_new();
        root = json_parse(doc, text, len, TIMING_MAX_DEPTH, err, sizeof err);
        if (!root) snprintf(r.what, sizeof r.what, "not valid JSON: %s", err);
        else read_timing(&r, root, v);
        json_doc_free(doc);
        free(text);
    }
    if (!r.what[0]) return TRI_OK;
    LOG_ERROR("%s: %s", timing_path, r.what);
    LOG_HINT("timing.json is rewritten at every logged step of a run (README \"Predicted "
             "against measured, per stage\"); remove it to see the prediction alone");
    return TRI_ERR_CKPT;
}

// The part of a stage the prediction is furthest off (most ms): 1 and where, 0 unmeasured.
static int most_wrong(const rundir_view *v, int *stage, int *part) {
    double worst = -1;
    for (int s = 0; s < v->pp && v->measured; s++)
        for (int k = 0; k < PARTS - 1; k++) {
            const double d = fabs(v->run[s * (PARTS + 1) + k] - 1e3 * v->predicted[s * PARTS + k]);
            if (d > worst) worst = d, *stage = s, *part = k;
        }
    return worst >= 0;
}

static void print_text(const char *dir, const rundir_view *v, const char *timing_path, FILE *f) {
    fprintf(f, "predicted against measured: %s\n", dir);
    fprintf(f,
            "run: tp %d x pp %d x dp %d (%d rank%s), schedule %s, virtual_stages %d, %d "
            "micro-batches per step; device %s (%s)\n",
            v->tp, v->pp, v->dp, v->world, v->world == 1 ? "" : "s", v->schedule, v->virtual_stages,
            v->micro_batches, v->device,
            v->calibrated ? "a calibrated profile" : "uncalibrated estimate");
    fprintf(f, "predicted: the run record's plan (metrics.jsonl line %d), step %.2f ms\n",
            v->record_line, 1e3 * v->step_s);
    if (v->measured)
        fprintf(f,
                "measured: %s, medians of %d logged step%s (%d to %d) of each stage's median "
                "rank\n",
                timing_path, v->median_of, v->median_of == 1 ? "" : "s", v->from_step, v->to_step);
    else
        fprintf(f, "measured: nothing yet (%s is written at the run's first logged step)\n",
                timing_path);
    fprintf(f, "\n%-6s", "stage");
    for (int k = 0; k < PARTS; k++) fprintf(f, " %-24s", PART_NAMES[k]);
    fprintf(f, " %s\n%-6s", "spread", "");
    for (int k = 0; k < PARTS; k++) fprintf(f, " %9s %8s %5s", "plan ms", "run ms", "x");
    fprintf(f, " %6s\n", "ms");
    for (int s = 0; s < v->pp; s++) {
        fprintf(f, "%-6d", s);
        for (int k = 0; k < PARTS; k++) {
            const double plan_ms = 1e3 * v->predicted[s * PARTS + k];
            const double run_ms = v->measured ? v->run[s * (PARTS + 1) + k] : NAN;
            char run[16] = "-", ratio[16] = "-";
            if (v->measured) snprintf(run, sizeof run, "%.2f", run_ms);
            if (v->measured && plan_ms > 0) snprintf(ratio, sizeof ratio, "%.2f", run_ms / plan_ms);
            fprintf(f, " %9.2f %8s %5s", plan_ms, run, ratio);
        }
        if (v->measured) fprintf(f, " %6.2f\n", v->run[s * (PARTS + 1) + PARTS]);
        else fprintf(f, " %6s\n", "-");
    }
    int ws = 0, wp = 0;
    if (most_wrong(v, &ws, &wp))
        fprintf(f, "most wrong: stage %d's %s, predicted %.2f ms, measured %.2f ms\n", ws,
                PART_NAMES[wp], 1e3 * v->predicted[ws * PARTS + wp], v->run[ws * (PARTS + 1) + wp]);
}

// The shortest text that reads back to x: the measured values equal timing.json's.
static void json_num(FILE *f, const char *key, double x) {
    char buf[32];
    if (isfinite(x)) metrics_format_double(buf, sizeof buf, x);
    fprintf(f, "\"%s\":%s", key, isfinite(x) ? buf : "null");
}

static void print_json(const char *dir, const rundir_view *v, const char *record_path,
                       const char *timing_path, FILE *f) {
    fputs("{\"type\":\"plan_run\",\"run_dir\":", f);
    config_print_quoted(f, dir);
    fputs(",\"record\":", f);
    config_print_quoted(f, record_path);
    fprintf(f, ",\"record_line\":%d,\"timing\":", v->record_line);
    if (v->measured) config_print_quoted(f, timing_path);
    else fputs("null", f);
    fprintf(f, ",\"world\":%d,\"mesh\":{\"tp\":%d,\"pp\":%d,\"dp\":%d},\"schedule\":", v->world,
            v->tp, v->pp, v->dp);
    config_print_quoted(f, v->schedule);
    fprintf(f, ",\"virtual_stages\":%d,\"micro_batches\":%d,\"device\":", v->virtual_stages,
            v->micro_batches);
    config_print_quoted(f, v->device);
    fprintf(f, ",\"calibrated\":%s,", v->calibrated ? "true" : "false");
    json_num(f, "step_ms", 1e3 * v->step_s);
    if (v->measured)
        fprintf(f,
                ",\"measured\":{\"logged_steps\":%d,\"median_of\":%d,\"from_step\":%d,"
                "\"to_step\":%d}",
                v->logged_steps, v->median_of, v->from_step, v->to_step);
    else fputs(",\"measured\":null", f);
    fputs(",\"stages\":[", f);
    for (int s = 0; s < v->pp; s++) {
        fprintf(f, "%s{\"pp_rank\":%d,\"predicted\":{", s ? "," : "", s);
        for (int k = 0; k < PARTS; k++) {
            char key[32];
            snprintf(key, sizeof key, "%s_ms", PART_NAMES[k]);
            fputs(k ? "," : "", f);
            json_num(f, key, 1e3 * v->predicted[s * PARTS + k]);
        }
        if (!v->measured) {
            fputs("},\"measured\":null,\"ratio\":null}", f);
            continue;
        }
        const double *run = &v->run[s * (PARTS + 1)];
        fprintf(f, "},\"measured\":{\"ranks\":%d", v->ranks[s]);
        for (int k = 0; k < PARTS; k++) {
            char key[32];
            snprintf(key, sizeof key, "%s_ms", PART_NAMES[k]);
            fputc(',', f);
            json_num(f, key, run[k]);
        }
        fputc(',', f);
        json_num(f, "compute_spread_ms", run[PARTS]);
        fputs("},\"ratio\":{", f);
        for (int k = 0; k < PARTS; k++) {
            const double plan_ms = 1e3 * v->predicted[s * PARTS + k];
            fputs(k ? "," : "", f);
            json_num(f, PART_NAMES[k], plan_ms > 0 ? run[k] / plan_ms : NAN);
        }
        fputs("}}", f);
    }
    fputs("],\"most_wrong\":", f);
    int ws = 0, wp = 0;
    if (most_wrong(v, &ws, &wp)) {
        fprintf(f, "{\"pp_rank\":%d,\"part\":\"%s\",", ws, PART_NAMES[wp]);
        json_num(f, "predicted_ms", 1e3 * v->predicted[ws * PARTS + wp]);
        fputc(',', f);
        json_num(f, "measured_ms", v->run[ws * (PARTS + 1) + wp]);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs("}\n", f);
}

tri_status plan_rundir_run(const char *dir, const plan_options *po) {
    if (po->search || po->calibrate || po->fbw || po->device || po->out || po->world_given) {
        LOG_ERROR("trident plan %s: a run directory takes only --json (--world, --device, "
                  "--search, --fbw, --calibrate and --out plan a CONFIG)",
                  dir);
        LOG_HINT("the run's layout and device are in its run record; give its config file to "
                 "plan another");
        return TRI_ERR_CONFIG;
    }
    rundir_view v = {.world = 0};
    char timing_path[4200], record_path[4200];
    tri_status rc = load_view(dir, &v, timing_path, sizeof timing_path, record_path,
                              sizeof record_path);
    if (rc == TRI_OK && po->json) print_json(dir, &v, record_path, timing_path, stdout);
    else if (rc == TRI_OK) print_text(dir, &v, timing_path, stdout);
    free(v.predicted);
    free(v.run);
    free(v.ranks);
    return rc;
}

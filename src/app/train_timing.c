// train_timing.c: what the run measured per pipeline stage, for `trident plan RUN_DIR`
// (issue 21 point 3), in <run.out_dir>/timing.json (README "Predicted against measured, per
// stage"). Rank 0 has every rank's step, comm-wait and pipeline-transfer times at each logged
// step already (the straggler gather, train_straggler.c); it keeps each stage's medians of
// the latest TIMING_WINDOW logged steps and rewrites the file from them (tmp + rename) at
// every logged step. Its size is a function of pp alone: nothing grows with steps x world.
//
// The medians leave out this process's first two steps (the warm-up: first-touch page faults,
// thread start-up, lazy allocations) once a later logged step is there; a run of one or two
// steps shows them. A resumed run starts the file afresh: it describes the newest process,
// whose run record is the newest in metrics.jsonl.
#include "app/trainer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

enum { TIMING_WINDOW = 64, TIMING_WARMUP_STEPS = 2 };

// Whether ring slot i is past the warm-up.
static int warm(const run_timing *t, int i) {
    return t->steps[i] >= t->first_step + TIMING_WARMUP_STEPS;
}

// The file's text: the layout, which steps the medians cover, and per stage (when any step
// was logged) the medians in ms.
static char *timing_text(const run_timing *t, size_t *len) {
    int any_warm = 0, used = 0, lo = 0, hi = 0;
    for (int i = 0; i < t->n; i++) any_warm |= warm(t, i);
    double *v = xmalloc((size_t)(t->n ? t->n : 1) * sizeof(double));
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    TRI_ASSERT(f);
    for (int i = 0; i < t->n; i++) {
        if (any_warm && !warm(t, i)) continue;
        if (!used || t->steps[i] < lo) lo = t->steps[i];
        if (!used || t->steps[i] > hi) hi = t->steps[i];
        used++;
    }
    fprintf(f,
            "{\"type\":\"timing\",\"version\":1,\"world\":%d,\"mesh\":{\"tp\":%d,\"pp\":%d,"
            "\"dp\":%d},\"first_step\":%d,\"logged_steps\":%d,\"median_of\":%d,\"from_step\":%d,"
            "\"to_step\":%d,\"stages\":[",
            t->world, t->tp, t->pp, t->dp, t->first_step, t->logged, used, lo, hi);
    for (int s = 0; s < t->pp && used; s++) {
        double parts[5];
        for (int k = 0; k < 5; k++) {
            int m = 0;
            for (int i = 0; i < t->n; i++) {
                if (any_warm && !warm(t, i)) continue;
                const stage_times *x = &t->times[(size_t)i * t->pp + s];
                const double p[5] = {x->compute, x->waits, x->comm, x->step, x->spread};
                v[m++] = p[k];
            }
            parts[k] = tri_median(v, m);
        }
        fprintf(f,
                "%s{\"pp_rank\":%d,\"ranks\":%d,\"compute_ms\":%.3f,\"waits_ms\":%.3f,"
                "\"comm_ms\":%.3f,\"step_ms\":%.3f,\"compute_spread_ms\":%.3f}",
                s ? "," : "", s, t->times[s].ranks, 1e3 * parts[0], 1e3 * parts[1], 1e3 * parts[2],
                1e3 * parts[3], 1e3 * parts[4]);
    }
    fputs("]}\n", f);
    TRI_ASSERT(fclose(f) == 0);
    free(v);
    return text;
}

// Replaces the file by rename, so that a reader sees the old one or the new one whole.
static void timing_write(run_timing *t) {
    size_t len = 0;
    char *text = timing_text(t, &len), tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", t->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644), err = 0;
    if (fd < 0 || tri_write_all(fd, text, len) != 0) err = errno;
    if (fd >= 0 && close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, t->path) != 0) err = errno;
    free(text);
    if (!err) return;
    if (fd >= 0) unlink(tmp);
    if (t->warned) return;
    t->warned = 1;
    LOG_WARN("could not write %s (%s): `trident plan RUN_DIR` will lack this run's measured "
             "times; training goes on",
             t->path, strerror(err));
    LOG_HINT("free space in run.out_dir, or check its permissions");
}

void timing_init(run_timing *t, const trainer *tr) {
    memset(t, 0, sizeof *t);
    if (tr->li->rank != 0) return;
    const run_config *cfg = tr->cfg;
    t->pp = cfg->parallel.pp, t->tp = cfg->parallel.tp, t->dp = cfg->parallel.dp;
    t->world = tr->li->world;
    t->cap = TIMING_WINDOW;
    t->steps = xcalloc((size_t)t->cap, sizeof(int));
    t->times = xcalloc((size_t)t->cap * t->pp, sizeof(stage_times));
    t->first_step = tr->start.step + 1;
    const size_t n = strlen(cfg->run.out_dir) + sizeof "/timing.json";
    t->path = xmalloc(n);
    snprintf(t->path, n, "%s/timing.json", cfg->run.out_dir);
    timing_write(t);
}

void timing_log_step(run_timing *t, int step, const stage_times *stages) {
    if (!t->path) return;
    t->steps[t->next] = step;
    memcpy(&t->times[(size_t)t->next * t->pp], stages, (size_t)t->pp * sizeof(stage_times));
    t->next = (t->next + 1) % t->cap;
    if (t->n < t->cap) t->n++;
    t->logged++;
    timing_write(t);
}

void timing_free(run_timing *t) {
    free(t->steps);
    free(t->times);
    free(t->path);
    memset(t, 0, sizeof *t);
}

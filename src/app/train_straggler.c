// train_straggler.c: which rank is slow (issue 19, point 4). At every logged step each rank's
// step time, compute time and time waiting in communication travel to every rank inside the
// step boundary's all-reduce over the world (train.c step_boundary): each rank writes its
// five values into its own slots of a (world, 5) block that is zero elsewhere, and the MAX
// reduction, which the boundary does anyway, leaves every rank's values in every rank's copy.
// The host names are gathered once, at the first logged step. Each rank's time in its pipeline
// transfers rides along too: rank 0 keeps every stage's parts of the step (train_timing.c).
//
// In a synchronous job every rank's step takes about as long as the slowest one's: the others
// wait for it in their collectives. So a rank is judged by its compute time (step time less
// the host's time inside comm waits), against the median of the ranks of its pipeline stage
// (the stages do different work; the ranks of one stage do the same).
#include "app/trainer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"

enum { SLOT_STEP, SLOT_COMPUTE, SLOT_WAIT, SLOT_STAGE, SLOT_PIPE, SLOTS };

void straggler_init(straggler_state *sg, const run_config *cfg, const launch_info *li) {
    memset(sg, 0, sizeof *sg);
    sg->world = li->world;
    sg->rank = li->rank;
    sg->pct = cfg->log.straggler_pct;
    sg->steps = cfg->log.straggler_steps;
    sg->streak_rank = -1;
    sg->boundary = xcalloc(3 + SLOTS * (size_t)sg->world, sizeof(double));
    sg->slow_ms = 0;
    const char *slow = env_get(ENV_TEST_SLOW_RANK); // "RANK:MS"
    int r = -1, ms = 0;
    if (slow && sscanf(slow, "%d:%d", &r, &ms) == 2 && r == li->rank && ms > 0) sg->slow_ms = ms;
}

void straggler_free(straggler_state *sg) {
    free(sg->boundary);
    free(sg->hosts);
    sg->boundary = NULL;
    sg->hosts = NULL;
}

void straggler_test_delay(const straggler_state *sg) {
    if (sg->slow_ms <= 0) return;
    // A busy loop, not a sleep: the rank is slow at computing, as a throttled GPU or a loaded
    // CPU would be.
    const double until = time_now_s() + 1e-3 * sg->slow_ms;
    volatile double x = 1.0;
    while (time_now_s() < until) x = x * 1.0000001 + 1e-9;
}

int straggler_wanted(const straggler_state *sg) { return sg->world > 1; }

tri_status straggler_gather_hosts(straggler_state *sg, comm *cm, const char *host) {
    if (sg->hosts) return TRI_OK;
    enum { WORDS = STRAGGLER_HOST_LEN / 8 };
    int64_t mine[WORDS];
    memset(mine, 0, sizeof mine);
    snprintf((char *)mine, sizeof mine, "%s", host);
    sg->hosts = xcalloc((size_t)sg->world, STRAGGLER_HOST_LEN);
    return comm_all_gather(cm, COMM_GROUP_WORLD, mine, sg->hosts, WORDS, DTYPE_INT64);
}

size_t straggler_fill(straggler_state *sg, double *block, double step_s, double wait_s,
                      double pipe_s, int stage) {
    const size_t n = SLOTS * (size_t)sg->world;
    memset(block, 0, n * sizeof(double));
    double *mine = block + SLOTS * (size_t)sg->rank;
    mine[SLOT_STEP] = step_s;
    mine[SLOT_COMPUTE] = step_s > wait_s ? step_s - wait_s : 0.0;
    mine[SLOT_WAIT] = wait_s;
    mine[SLOT_STAGE] = stage;
    mine[SLOT_PIPE] = pipe_s;
    return n;
}

// The median compute time of the ranks of pipeline stage `stage` (scratch: world doubles).
static double stage_median(const double *block, int world, int stage, double *scratch) {
    int n = 0;
    for (int r = 0; r < world; r++)
        if ((int)block[SLOTS * r + SLOT_STAGE] == stage)
            scratch[n++] = block[SLOTS * r + SLOT_COMPUTE];
    return tri_median(scratch, n);
}

void straggler_take(straggler_state *sg, const double *block, int step, metrics_step *s) {
    const int world = sg->world;
    double *scratch = xmalloc((size_t)world * sizeof(double));
    int worst = 0;
    double worst_pct = -INFINITY, worst_median = 0.0;
    for (int r = 0; r < world; r++) {
        const double *v = block + SLOTS * r;
        const double med = stage_median(block, world, (int)v[SLOT_STAGE], scratch);
        const double pct = med > 0 ? 100.0 * (v[SLOT_COMPUTE] - med) / med : 0.0;
        if (pct > worst_pct) worst = r, worst_pct = pct, worst_median = med;
    }
    free(scratch);
    const double *v = block + SLOTS * worst;
    s->has_straggler = 1;
    s->straggler_rank = worst;
    snprintf(s->straggler_host, sizeof s->straggler_host, "%s",
             sg->hosts ? sg->hosts + (size_t)worst * STRAGGLER_HOST_LEN : "?");
    s->straggler_excess_pct = worst_pct;
    s->straggler_step_ms = 1e3 * v[SLOT_STEP];
    s->straggler_compute_ms = 1e3 * v[SLOT_COMPUTE];
    s->straggler_wait_ms = 1e3 * v[SLOT_WAIT];
    s->straggler_median_ms = 1e3 * worst_median;

    // The warning: the same rank over log.straggler_pct at log.straggler_steps logged steps
    // in a row, said once per such run of steps (every rank knows; rank 0 says it).
    if (worst_pct > sg->pct) {
        sg->streak = worst == sg->streak_rank ? sg->streak + 1 : 1;
        sg->streak_rank = worst;
    } else {
        sg->streak = 0;
        sg->streak_rank = -1;
    }
    if (sg->streak == sg->steps && sg->rank == 0) {
        LOG_WARN("straggler: rank %d (host %s) computes %.0f%% slower than the median of its "
                 "pipeline stage at the last %d logged steps (step %d: compute %.1f ms, median "
                 "%.1f ms; it waits %.1f ms of its %.1f ms step in communication)",
                 worst, s->straggler_host, worst_pct, sg->steps, step, s->straggler_compute_ms,
                 s->straggler_median_ms, s->straggler_wait_ms, s->straggler_step_ms);
        LOG_HINT("check that node (thermal throttling, other jobs, a slow disk or NIC); "
                 "log.straggler_pct and log.straggler_steps set this warning");
    }
}

stage_times stage_times_of_rank(double step_s, double wait_s, double pipe_s) {
    // The pipeline transfers are comm waits too, but their start is timed by the executor
    // alone: the larger of the two is the rank's time not computing.
    const double idle = wait_s > pipe_s ? wait_s : pipe_s;
    return (stage_times){.compute = step_s > idle ? step_s - idle : 0.0,
                         .waits = pipe_s,
                         .comm = idle - pipe_s,
                         .step = step_s,
                         .ranks = 1};
}

void straggler_stage_times(const straggler_state *sg, const double *block, int pp,
                           stage_times *out) {
    const int world = sg->world;
    double *part = xmalloc(4 * (size_t)world * sizeof(double)); // (4, world): a stage's ranks
    for (int st = 0; st < pp; st++) {
        int n = 0;
        double lo = INFINITY, hi = -INFINITY;
        for (int r = 0; r < world; r++) {
            const double *v = block + SLOTS * (size_t)r;
            if ((int)v[SLOT_STAGE] != st) continue;
            const stage_times t = stage_times_of_rank(v[SLOT_STEP], v[SLOT_WAIT], v[SLOT_PIPE]);
            part[n] = t.compute, part[world + n] = t.waits, part[2 * world + n] = t.comm;
            part[3 * world + n] = t.step;
            lo = fmin(lo, t.compute), hi = fmax(hi, t.compute);
            n++;
        }
        stage_times *o = &out[st];
        memset(o, 0, sizeof *o);
        if (n == 0) continue; // every stage has ranks (rank = tp + TP (dp + DP pp))
        o->compute = tri_median(part, n), o->waits = tri_median(part + world, n);
        o->comm = tri_median(part + 2 * world, n), o->step = tri_median(part + 3 * world, n);
        o->spread = hi - lo, o->ranks = n;
    }
    free(part);
}

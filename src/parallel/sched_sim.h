// sched_sim.h: the pipeline's step time from its schedule tables. Every pipeline rank runs
// its table (sched.h) in order with given durations per action; the simulation follows the
// rules the executor runs by (sched.h "Running a list"): a run of comm actions is posted as
// one group and completes when each of its messages has met its counterpart (the n-th message
// rank a sends to rank b meets the n-th receive b posts from a), a message taking `p2p`
// seconds from the later of its two posts. Bubbles, the zero-bubble schedules' W placement and
// the waits on transfers all come out of the tables themselves, with no closed form beside
// them. The planner predicts a step with it (plan.c); the unit-time figures of
// sched_bubble_fraction are the special case F = B = W = 1, p2p = 0.
#pragma once
#include "parallel/sched.h"

// Seconds per action of chunk c on pipeline rank r, at [r * v + c] (v: the tables'
// virtual_stages): f a forward, b a backward's input-gradient part, w its weight-gradient
// part; an unsplit backward (SCHED_ACTION_BWD) takes b + w.
typedef struct {
    const double *f, *b, *w;
    double p2p; // a pipeline message, from the later of its send and receive
} sched_times;

typedef struct {
    double makespan;  // the step: when the last rank ends its table
    double *busy;     // (pp) seconds each rank computes
    double idle_mean; // mean over ranks of (makespan - busy) / makespan
} sched_sim_result;

// Runs tables[0 .. pp-1] (sched_build's, the same schedule, v and m) together. Returns
// TRI_ERR_INTERNAL when they deadlock or a message has no counterpart (a bug in a table).
// out->busy is allocated (sched_sim_free).
tri_status sched_simulate(const sched_table *tables, int pp, const sched_times *t,
                          sched_sim_result *out);
void sched_sim_free(sched_sim_result *r);

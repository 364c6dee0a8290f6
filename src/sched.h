// sched.h: pipeline schedules as data. A pure function gives each pipeline rank its
// ordered list of actions; the executor runs the list. Tests simulate all ranks' lists
// together.
#pragma once
#include "common.h"
#include "config.h"

typedef enum {
    SCHED_ACTION_RECV_ACT = 0, // receive the input activation of (micro, chunk) from rank - 1
    SCHED_ACTION_FWD,          // forward of (micro, chunk)
    SCHED_ACTION_SEND_ACT,     // send the output activation of (micro, chunk) to rank + 1
    SCHED_ACTION_RECV_GRAD,    // receive d(output) of (micro, chunk) from rank + 1
    SCHED_ACTION_BWD,          // backward of (micro, chunk)
    SCHED_ACTION_SEND_GRAD,    // send d(input) of (micro, chunk) to rank - 1
} sched_action_kind;

typedef struct {
    sched_action_kind kind;
    int micro; // micro-batch 0..m-1
    int chunk; // model chunk (virtual stage) on this rank
} sched_action;

typedef struct {
    sched_action *actions;
    int n_actions;
    int max_in_flight; // peak micro-batches whose activations are held at once
} sched_table;

// Builds rank `rank`'s list for `schedule` over `pp` stages and `m` micro-batches with
// `virtual_stages` chunks per rank. Supports gpipe and 1f1b (virtual_stages 1); returns
// TRI_ERR_CONFIG for combinations it does not support.
tri_status sched_build(sched_table *st, schedule_kind schedule, int pp, int virtual_stages,
                       int m, int rank);
void sched_free(sched_table *st);

const char *sched_action_name(sched_action_kind k);

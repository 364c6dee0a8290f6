// sched_internal.h: between sched.c (the checks, gpipe, 1f1b, interleaved) and sched_zb.c
// (zb-h1 and zbv tables). Private to src/parallel/.
#pragma once
#include "parallel/sched.h"

// Rank `rank`'s zb-h1 or zbv table (a combination sched.c checked), training or, with
// forward_only, evaluation's; fills every field sched_build's callers read.
tri_status sched_zb_build(sched_table *st, schedule_kind schedule, int pp, int m, int rank,
                          int forward_only);
// sched_bubble_fraction for zb-h1 and zbv.
double sched_zb_bubble(schedule_kind schedule, int pp, int m);

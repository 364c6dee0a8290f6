// data_blend.h: the blend schedule: how each global batch of G samples is shared among
// weighted data sources, exactly and with an exact resume.
//
// The weights are quantised once: source i gets M_i of the G * BLEND_UNITS units of a step
// (the largest remainders of the normalised weights, so that the M_i sum to G * BLEND_UNITS
// exactly), a share of q_i = M_i / BLEND_UNITS samples per step. Every step gives it
// a_i = floor(q_i) samples, and one more in a fraction f_i = frac(q_i) of the steps: the
// R = sum f_i extra samples of a step (an integer) go to R distinct sources by a Pfair
// schedule (PD^2, Anderson and Srinivasan, with f_i as the task weights on R processors): the
// j-th extra of source i is given in its window of steps [floor((j-1)/f_i), ceil(j/f_i)), so
// after t steps it has had floor(f_i t) or ceil(f_i t) extras. Hence, for every source and
// every step t:
//   per step      a_i or a_i + 1 samples: the floor or the ceiling of its share q_i;
//   cumulatively  |samples drawn in steps [0, t) - q_i t| < 1.
// (q_i is the weight's share of G to within G / 2^20 / BLEND_UNITS; config validation keeps
// every share >= 1e-6, so q_i >= 1 / BLEND_UNITS and no source is left out.)
// The state is the step count t and each source's extras E_i; the next step is a pure
// function of (weights, G, t, E), so a checkpoint records t and E and a resume continues the
// same schedule.
//
// Within a step, the sources are interleaved in a fixed order (blend_interleave), so that
// the contiguous block of the batch that each dp replica takes holds each source in
// proportion too. Costs per step, on every rank that reads data: blend_step O(n log n),
// blend_interleave O(G n) for n sources.
#pragma once
#include "base/common.h"

// Units of a sample in the quantised shares: 2^20 (so t * BLEND_UNITS fits 64 bits for any
// step count that fits an int).
#define BLEND_UNITS (INT64_C(1) << 20)

typedef struct {
    int n;          // sources
    int G;          // samples per step
    int64_t *base;  // (n) a_i: samples every step
    int64_t *frac;  // (n) frac(q_i) in units of 1 / BLEND_UNITS
    int extras;     // R: extra samples per step, each to another source
    int64_t t;      // steps scheduled
    int64_t *extra; // (n) E_i: extras given in steps [0, t)
    int64_t early;  // extras given before their window opened (0 unless PD^2 failed)
} blend_schedule;

// The schedule of `n` sources with weights w[i] > 0 (any scale) for steps of G samples, at
// t = 0.
void blend_init(blend_schedule *b, const double *w, int n, int G);
void blend_free(blend_schedule *b);

// Sets the state to t steps done with extras E[i] each. 0 when that is a state the schedule
// can be in (0 <= E_i <= t, sum E = R t, |f_i t - E_i| < 1 for each i); else 1 with the
// first source it does not fit in *bad and the reason in why[n].
int blend_set_state(blend_schedule *b, int64_t t, const int64_t *extras, int *bad, char *why,
                    size_t n);

// The samples of each source in step t (counts[n], summing to G), and t advanced.
void blend_step(blend_schedule *b, int *counts);

// One step laid out: counts[n] (summing to G) -> for each position p of the batch, the source
// source_of[p] and which of its samples in this step it is, nth[p] (0-based). Each source is
// spread evenly over the batch: every prefix of p positions holds the floor or the ceiling of
// counts[i] p / G of its samples (a one-processor Pfair schedule: earliest deadline first).
void blend_interleave(const int *counts, int n, int G, int *source_of, int *nth);

// data_blend.c: the blend schedule (data_blend.h): quantised shares, the PD^2 choice of each
// step's extra samples, and the interleaving of sources within a step.
//
// PD^2 (J. H. Anderson and A. Srinivasan, "Mixed Pfair/ERfair scheduling of asynchronous
// periodic tasks", 2004): a task of weight f = N / D (0 < f < 1) is a sequence of subtasks
// j = 1, 2, ... with release r_j = floor((j-1)/f) and deadline d_j = ceil(j/f); a Pfair
// schedule runs each subtask in a step of [r_j, d_j), which is exactly |f t - E(t)| < 1 at
// every t. PD^2 runs, at each step, the R eligible subtasks (released, predecessor done) of
// highest priority: earlier deadline first; at equal deadlines the one whose window overlaps
// its successor's (b-bit 1: d_j > floor(j/f)) first; then, for heavy tasks (f >= 1/2), the
// later group deadline first. PD^2 is optimal: when the weights sum to R it meets every
// deadline (tests/test_data_order.c checks the bounds over many random schedules).
#include "io/data_blend.h"

#include <math.h>
#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b > 0); }

void blend_init(blend_schedule *b, const double *w, int n, int G) {
    TRI_ASSERT(n >= 1 && G >= 1);
    memset(b, 0, sizeof *b);
    b->n = n;
    b->G = G;
    b->base = xcalloc((size_t)n, sizeof(int64_t));
    b->frac = xcalloc((size_t)n, sizeof(int64_t));
    b->extra = xcalloc((size_t)n, sizeof(int64_t));
    // Normalised by the largest weight first, so that the sum cannot overflow.
    double wmax = 0.0, sum = 0.0;
    for (int i = 0; i < n; i++) {
        TRI_ASSERT(w[i] > 0 && isfinite(w[i]));
        wmax = w[i] > wmax ? w[i] : wmax;
    }
    for (int i = 0; i < n; i++) sum += w[i] / wmax;
    const int64_t units = (int64_t)G * BLEND_UNITS;
    int64_t *m = xcalloc((size_t)n, sizeof(int64_t)), given = 0;
    double *rem = xcalloc((size_t)n, sizeof(double));
    for (int i = 0; i < n; i++) {
        double ideal = w[i] / wmax / sum * (double)units;
        m[i] = (int64_t)floor(ideal);
        rem[i] = ideal - (double)m[i];
        given += m[i];
    }
    // The remaining units (fewer than n) to the largest remainders, ties by index.
    for (int64_t left = units - given; left > 0; left--) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (rem[i] >= 0 && (best < 0 || rem[i] > rem[best])) best = i;
        TRI_ASSERT(best >= 0);
        m[best]++;
        rem[best] = -1.0;
    }
    int64_t frac_sum = 0;
    for (int i = 0; i < n; i++) {
        TRI_ASSERT(m[i] >= 1);
        b->base[i] = m[i] / BLEND_UNITS;
        b->frac[i] = m[i] % BLEND_UNITS;
        frac_sum += b->frac[i];
    }
    TRI_ASSERT(frac_sum % BLEND_UNITS == 0);
    b->extras = (int)(frac_sum / BLEND_UNITS);
    free(m);
    free(rem);
}

void blend_free(blend_schedule *b) {
    free(b->base);
    free(b->frac);
    free(b->extra);
    memset(b, 0, sizeof *b);
}

int blend_set_state(blend_schedule *b, int64_t t, const int64_t *extras, int *bad, char *why,
                    size_t n) {
    int64_t sum = 0;
    *bad = -1;
    for (int i = 0; i < b->n; i++) {
        const int64_t e = extras[i], lag = b->frac[i] * t - e * BLEND_UNITS;
        if (e < 0 || e > t) {
            snprintf(why, n, "%lld extras in %lld steps (at most one a step)", (long long)e,
                     (long long)t);
        } else if (lag <= -BLEND_UNITS || lag >= BLEND_UNITS) {
            snprintf(why, n,
                     "%lld extras in %lld steps, but its share gives %.6f a step: the schedule "
                     "keeps them within one of %.3f",
                     (long long)e, (long long)t, (double)b->frac[i] / (double)BLEND_UNITS,
                     (double)b->frac[i] / (double)BLEND_UNITS * (double)t);
        } else {
            sum += e;
            continue;
        }
        *bad = i;
        return 1;
    }
    if (sum != (int64_t)b->extras * t) {
        *bad = 0;
        snprintf(why, n, "the extras sum to %lld, but %d a step for %lld steps is %lld",
                 (long long)sum, b->extras, (long long)t, (long long)b->extras * t);
        return 1;
    }
    b->t = t;
    memcpy(b->extra, extras, (size_t)b->n * sizeof(int64_t));
    return 0;
}

// PD^2's priority of source i's next subtask j = E_i + 1 at step t, packed for a sort: a
// smaller key goes first. Deadlines fit 52 bits (j <= t + 1 < 2^31, BLEND_UNITS = 2^20).
typedef struct {
    int64_t deadline, group; // group deadline negated: a later one goes first
    int successor, eligible; // b-bit negated: 1 goes first
    int source;
} blend_prio;

static blend_prio blend_priority(const blend_schedule *b, int i) {
    const int64_t D = BLEND_UNITS, N = b->frac[i], j = b->extra[i] + 1;
    blend_prio p = {.source = i};
    p.deadline = ceil_div(j * D, N);
    p.successor = -(int)(p.deadline - j * D / N);
    p.eligible = (j - 1) * D / N <= b->t ? 0 : 1; // released: 0 goes first
    if (2 * N >= D) {                             // heavy: the group deadline
        const int64_t x = ceil_div(p.deadline * (D - N), D);
        p.group = -ceil_div(x * D, D - N);
    }
    return p;
}

static int blend_prio_cmp(const void *pa, const void *pb) {
    const blend_prio *a = pa, *b = pb;
    if (a->eligible != b->eligible) return a->eligible - b->eligible;
    if (a->deadline != b->deadline) return a->deadline < b->deadline ? -1 : 1;
    if (a->successor != b->successor) return a->successor - b->successor;
    if (a->group != b->group) return a->group < b->group ? -1 : 1;
    return a->source - b->source;
}

void blend_step(blend_schedule *b, int *counts) {
    for (int i = 0; i < b->n; i++) counts[i] = (int)b->base[i];
    if (b->extras > 0) {
        blend_prio *cand = xmalloc((size_t)b->n * sizeof *cand);
        int nc = 0;
        for (int i = 0; i < b->n; i++)
            if (b->frac[i] > 0) cand[nc++] = blend_priority(b, i);
        TRI_ASSERT(nc >= b->extras);
        qsort(cand, (size_t)nc, sizeof *cand, blend_prio_cmp);
        for (int k = 0; k < b->extras; k++) {
            // An unreleased subtask is taken only when fewer than R are released, which a
            // Pfair schedule of weights summing to R never meets (counted for the tests).
            b->early += cand[k].eligible;
            counts[cand[k].source]++;
            b->extra[cand[k].source]++;
        }
        free(cand);
    }
    b->t++;
}

void blend_interleave(const int *counts, int n, int G, int *source_of, int *nth) {
    // A Pfair schedule on one processor: source i's k-th sample (k = 1, 2, ...) has the window
    // of positions [floor((k-1) G / c_i), ceil(k G / c_i)); earliest deadline first among the
    // released ones (ties by source index) meets every deadline when the counts sum to G, so
    // every prefix of p positions holds floor or ceil of c_i p / G of source i.
    int *taken = xcalloc((size_t)n, sizeof(int));
    for (int p = 0; p < G; p++) {
        int best = -1;
        int64_t best_deadline = 0;
        for (int i = 0; i < n; i++) {
            const int64_t c = counts[i], k = taken[i] + 1;
            if (taken[i] >= counts[i] || (k - 1) * G / c > p) continue;
            const int64_t deadline = ceil_div(k * G, c);
            if (best < 0 || deadline < best_deadline) best = i, best_deadline = deadline;
        }
        TRI_ASSERT(best >= 0);
        source_of[p] = best;
        nth[p] = taken[best]++;
    }
    free(taken);
}

// plan_calibrate_comm.c: the communication half of `trident plan --calibrate`, when it runs
// on two or more ranks of this host (launched as train is: mpirun -np N, srun). Every rank
// of the world forms one group (a mesh of tp = world), made as the trainer makes its comm
// (comm_create_for), and times through the comm layer what a training step calls: all-reduce,
// reduce-scatter and all-gather over the group, and send/recv between group ranks 0 and 1,
// at the message sizes of the config (plan_comm_sizes). Each op's times give, by least
// squares, t = latency + bytes x wire / bandwidth (wire: plan_wire_factor, the ring's bytes
// per link, as the time model counts them); all ops together give intra_bw and
// latency_intra. Across nodes nothing is timed: those values stay the table's estimates.
//
// Timing follows comm-test's (app/commtest.c, ct_row): a warm-up call, then `reps` calls
// between two clock reads, per call their mean; here after a barrier, three times, the
// fastest of the three counting (a shared machine's slow trials measure the neighbours).
// Every rank makes the same calls in the same order (the rep counts depend only on sizes).
#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "plan/plan_profile.h"

#define COMM_TRIALS 3
#define COMM_TARGET_BYTES ((size_t)16 << 20) // per timed batch: about 16 MB through the link
#define COMM_MAX_BYTES ((size_t)64 << 20)    // the largest message timed

static const comm_op_id MEASURED[PLAN_COMM_OPS] = {COMM_OP_ALL_REDUCE, COMM_OP_REDUCE_SCATTER,
                                                   COMM_OP_ALL_GATHER, COMM_OP_SEND};

static int reps_for(size_t bytes) {
    const size_t r = COMM_TARGET_BYTES / (bytes ? bytes : 1);
    return r < 4 ? 4 : r > 200 ? 200 : (int)r;
}

// One call of op on `elems` floats per rank (reduce-scatter: the result's; all-gather: the
// input's), or one ping-pong half between group ranks 0 and 1 for send.
static tri_status call_op(comm *c, int op_i, float *a, float *b, size_t elems, int rank, int n) {
    switch (MEASURED[op_i]) {
    case COMM_OP_ALL_REDUCE:
        return comm_all_reduce(c, COMM_GROUP_TP, a, elems * n, DTYPE_FP32, COMM_REDUCE_SUM);
    case COMM_OP_REDUCE_SCATTER:
        return comm_reduce_scatter(c, COMM_GROUP_TP, a, b, elems, DTYPE_FP32);
    case COMM_OP_ALL_GATHER: return comm_all_gather(c, COMM_GROUP_TP, a, b, elems, DTYPE_FP32);
    default: // a round trip: rank 0 sends and receives back; rank 1 the reverse
        if (rank == 0) {
            TRI_CHECK(comm_send(c, COMM_GROUP_TP, a, elems * n, DTYPE_FP32, 1));
            return comm_recv(c, COMM_GROUP_TP, b, elems * n, DTYPE_FP32, 1);
        }
        if (rank == 1) {
            TRI_CHECK(comm_recv(c, COMM_GROUP_TP, b, elems * n, DTYPE_FP32, 0));
            return comm_send(c, COMM_GROUP_TP, a, elems * n, DTYPE_FP32, 0);
        }
        return TRI_OK;
    }
}

// Seconds per call (send: one way, half the round trip) of op at `bytes` (the buffer the
// comm layer counts for it: all-reduce its buffer, reduce-scatter its send buffer,
// all-gather its receive buffer, send its message).
static tri_status time_comm(comm *c, backend *be, int op_i, size_t bytes, int rank, int n,
                            double *out) {
    const size_t elems = bytes / sizeof(float) / (size_t)n ? bytes / sizeof(float) / (size_t)n : 1;
    const size_t total = elems * (size_t)n * sizeof(float);
    float *a = be->alloc(be, total), *b = be->alloc(be, total);
    if (!a || !b) tri_out_of_host_memory(2 * total, "a communication calibration buffer");
    memset(a, 0, total), memset(b, 0, total);
    const int reps = reps_for(total);
    tri_status rc = call_op(c, op_i, a, b, elems, rank, n);
    double best = INFINITY;
    for (int t = 0; t < COMM_TRIALS && rc == TRI_OK; t++) {
        rc = comm_barrier(c, COMM_GROUP_TP);
        const double t0 = time_now_s();
        for (int r = 0; r < reps && rc == TRI_OK; r++) rc = call_op(c, op_i, a, b, elems, rank, n);
        const double s = (time_now_s() - t0) / reps;
        if (s < best) best = s;
    }
    be->free(be, a);
    be->free(be, b);
    *out = MEASURED[op_i] == COMM_OP_SEND ? best / 2 : best;
    return rc;
}

// The sizes a step of cfg sends (bytes): a small message (latency), the pipeline message and
// tp activations (micro_batch x seq_len x d_model floats, its tp share, and the whole), and
// the dp bucket; ascending, distinct, at most COMM_MAX_BYTES.
int plan_comm_sizes(const run_config *cfg, size_t out[PLAN_COMM_SIZES]) {
    const size_t act = (size_t)cfg->train.micro_batch * cfg->model.seq_len * cfg->model.d_model *
                       sizeof(float);
    const int tp = cfg->parallel.tp > 0 ? cfg->parallel.tp : 1;
    const size_t want[PLAN_COMM_SIZES] = {64, (size_t)64 << 10, act / (size_t)tp, act,
                                          (size_t)(cfg->parallel.bucket_mb * 1e6)};
    int n = 0;
    for (int i = 0; i < PLAN_COMM_SIZES; i++) {
        size_t s = want[i] > COMM_MAX_BYTES ? COMM_MAX_BYTES : want[i] < 64 ? 64 : want[i];
        int j = n;
        while (j > 0 && out[j - 1] > s) j--;
        if (j > 0 && out[j - 1] == s) continue;
        memmove(out + j + 1, out + j, (size_t)(n - j) * sizeof *out);
        out[j] = s, n++;
    }
    return n;
}

// Least squares of t = a + b x over (x, t); a clamped at 0 (then b through the origin).
static void fit_line(const double *x, const double *t, int n, double *a, double *b) {
    double sx = 0, st = 0, sxx = 0, sxt = 0;
    for (int i = 0; i < n; i++) sx += x[i], st += t[i], sxx += x[i] * x[i], sxt += x[i] * t[i];
    const double den = n * sxx - sx * sx;
    *b = den > 0 ? (n * sxt - sx * st) / den : 0;
    *a = (st - *b * sx) / n;
    if (*a < 0 || *b <= 0) *a = 0, *b = sxx > 0 ? sxt / sxx : 0;
}

tri_status plan_calibrate_comm(const run_config *cfg, comm *c, backend *be, int rank, int world,
                               plan_device *d) {
    size_t sizes[PLAN_COMM_SIZES];
    const int n_sizes = plan_comm_sizes(cfg, sizes);
    double all_x[PLAN_COMM_OPS * PLAN_COMM_SIZES], all_t[PLAN_COMM_OPS * PLAN_COMM_SIZES];
    int n_all = 0;
    for (int op = 0; op < PLAN_COMM_OPS; op++) {
        double x[PLAN_COMM_SIZES], t[PLAN_COMM_SIZES];
        // send: a message crosses one link whole; collectives as plan_wire_factor counts
        const double wire = plan_wire_factor(MEASURED[op],
                                             MEASURED[op] == COMM_OP_SEND ? 2 : world);
        for (int i = 0; i < n_sizes; i++) {
            TRI_CHECK(time_comm(c, be, op, sizes[i], rank, world, &t[i]));
            x[i] = (double)sizes[i] * wire;
            all_x[n_all] = x[i], all_t[n_all++] = t[i];
            if (rank == 0)
                LOG_INFO("calibrate: %s of %zu bytes over %d ranks: %.1f us",
                         plan_comm_op_name(MEASURED[op]), sizes[i], world, t[i] * 1e6);
        }
        double a, b;
        fit_line(x, t, n_sizes, &a, &b);
        d->comm_lat[MEASURED[op]] = a;
        d->comm_bw[MEASURED[op]] = b > 0 ? 1 / b : d->intra_bw;
    }
    d->comm_lat[COMM_OP_RECV] = d->comm_lat[COMM_OP_SEND];
    d->comm_bw[COMM_OP_RECV] = d->comm_bw[COMM_OP_SEND];
    double a, b;
    fit_line(all_x, all_t, n_all, &a, &b);
    d->latency_intra = a;
    if (b > 0) d->intra_bw = 1 / b;
    d->calib.intra_measured = 1;
    d->calib.ranks = world;
    return TRI_OK;
}

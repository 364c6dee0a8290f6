// executor.c: runs a schedule table (executor.h, sched.h for the rules of a table).
#include "parallel/executor.h"

#include <string.h>

#include "comm/flight.h"

void executor_init(executor *ex, model *m, zero_state *z, comm *cm, int overlap) {
    memset(ex, 0, sizeof *ex);
    ex->m = m, ex->z = z, ex->cm = cm, ex->overlap = overlap;
    const size_t N = (size_t)m->d.N;
    ex->inputs = xmalloc(N * sizeof(int));
    ex->targets = xmalloc(N * sizeof(int));
}

void executor_free(executor *ex) {
    free(ex->inputs);
    free(ex->targets);
    free(ex->flight);
    memset(ex, 0, sizeof *ex);
}

// Issues the comm actions [first, end) of the table as one group: both directions in flight
// at once, posted in list order (the schedule orders every group the same way on both ends
// of a pair of ranks, so messages between two ranks match in the order posted, as NCCL and a
// single MPI tag require). A received activation goes to the slot's chunk input, a received
// gradient to its residual gradient (kept apart: a group may send one slot's d(input) while
// receiving the next pair's input into the same slot). With overlap the group stays in
// flight (req) while compute goes on: it is waited for before anything touches one of its
// slots (wait_flights).
static tri_status run_p2p_group(executor *ex, const sched_table *t, int first, int end,
                                comm_request *req) {
    comm *cm = ex->cm;
    model *m = ex->m;
    const size_t count = (size_t)m->d.N_local * m->d.C;
    TRI_CHECK(comm_group_start(cm));
    for (int i = first; i < end; i++) {
        const sched_action *a = &t->actions[i];
        switch (a->kind) {
        case SCHED_ACTION_SEND_ACT:
            TRI_CHECK(comm_send(cm, COMM_GROUP_PP, model_chunk_output(m, a->slot), count,
                                DTYPE_FP32, a->peer));
            break;
        case SCHED_ACTION_RECV_ACT:
            TRI_CHECK(comm_recv(cm, COMM_GROUP_PP, model_chunk_input(m, a->slot), count, DTYPE_FP32,
                                a->peer));
            break;
        case SCHED_ACTION_SEND_GRAD:
            TRI_CHECK(comm_send(cm, COMM_GROUP_PP, model_chunk_grad(m, a->slot), count, DTYPE_FP32,
                                a->peer));
            break;
        case SCHED_ACTION_RECV_GRAD:
            TRI_CHECK(comm_recv(cm, COMM_GROUP_PP, model_chunk_grad(m, a->slot), count, DTYPE_FP32,
                                a->peer));
            break;
        default: TRI_ASSERT(0);
        }
    }
    if (ex->overlap) return comm_group_end_start(cm, req);
    req->impl = NULL;
    return comm_group_end(cm);
}

// Does any action of [first, end) use micro-batch slot `slot`?
static int actions_use_slot(const sched_table *t, int first, int end, int slot) {
    for (int i = first; i < end; i++)
        if (t->actions[i].slot == slot) return 1;
    return 0;
}

// Waits for the transfers in flight that use a slot the actions [first, end) use (all of
// them when first == end), keeping the others in flight (counted when [first, end) is a
// compute action).
static tri_status wait_flights(executor *ex, const sched_table *t, int *n, int first, int end,
                               double *waited) {
    exec_flight *f = ex->flight;
    int kept = 0;
    for (int i = 0; i < *n; i++) {
        int uses = first == end;
        for (int k = first; k < end && !uses; k++)
            uses = actions_use_slot(t, f[i].first, f[i].end, t->actions[k].slot);
        if (!uses) {
            f[kept++] = f[i];
            continue;
        }
        double t0 = time_now_s();
        TRI_CHECK(comm_wait(ex->cm, &f[i].req));
        *waited += time_now_s() - t0;
    }
    *n = kept;
    if (end == first + 1 && !sched_action_is_comm(t->actions[first].kind))
        ex->overlapped_p2p += kept;
    return TRI_OK;
}

// The V placement's turn (zbv, sched.h): the hand-over between the two chunks of the same
// micro-batch on pipeline rank pp-1 is a copy, not a message. Before the FWD of chunk 1 its
// input is chunk 0's output; before the B of chunk 0 its d(output) is chunk 1's d(input).
static void local_handover(executor *ex, const sched_action *a) {
    model *m = ex->m;
    const size_t bytes = (size_t)m->d.N_local * m->d.C * sizeof(float);
    if (a->kind == SCHED_ACTION_FWD)
        m->be->copy(m->be, model_chunk_input(m, a->slot), model_chunk_output(m, a->local_src),
                    bytes);
    else m->be->copy(m->be, model_chunk_grad(m, a->slot), model_chunk_grad(m, a->local_src), bytes);
}

// A forward, backward, or split backward (B: input gradients; W: weight gradients) action.
// Gradients accumulate in BWD and BWD_W, which the store is told about first (whether it is
// the step's last micro-batch: ZeRO reduces the buckets after it).
static tri_status run_compute(executor *ex, const sched_table *t, const sched_action *a,
                              exec_batches batches, float dloss) {
    model *m = ex->m;
    if (a->local_src >= 0) local_handover(ex, a);
    const int last_micro = a->micro == t->micro_batches - 1;
    switch (a->kind) {
    case SCHED_ACTION_FWD:
        batches.load(batches.ctx, a->micro, ex->inputs, ex->targets);
        return model_forward(m, a->slot, a->chunk, ex->inputs, ex->targets);
    case SCHED_ACTION_BWD:
        zero_backward_micro(ex->z, last_micro);
        return model_backward(m, a->slot, a->chunk, dloss);
    case SCHED_ACTION_BWD_B: return model_backward_b(m, a->slot, a->wslot, a->chunk, dloss);
    case SCHED_ACTION_BWD_W:
        zero_backward_micro(ex->z, last_micro);
        return model_backward_w(m, a->slot, a->wslot, a->chunk);
    default: TRI_ASSERT(0);
    }
    return TRI_ERR_INTERNAL;
}

static model_pass pass_of(sched_action_kind k) {
    return k == SCHED_ACTION_FWD     ? MODEL_PASS_FORWARD
           : k == SCHED_ACTION_BWD_B ? MODEL_PASS_B
           : k == SCHED_ACTION_BWD_W ? MODEL_PASS_W
                                     : MODEL_PASS_BACKWARD;
}

// The compute action after action i that reads parameters (W does not), or -1.
static int next_param_pass(const sched_table *t, int i) {
    for (int j = i + 1; j < t->n_actions; j++) {
        const sched_action_kind k = t->actions[j].kind;
        if (k == SCHED_ACTION_FWD || k == SCHED_ACTION_BWD || k == SCHED_ACTION_BWD_B) return j;
    }
    return -1;
}

tri_status executor_run(executor *ex, const sched_table *t, exec_batches batches, float dloss,
                        int prefetch, double *waited) {
    TRI_ASSERT(t->max_in_flight <= ex->m->n_slots && t->max_w_pending <= ex->m->n_wbufs);
    if (ex->cap < t->n_actions + 1) {
        free(ex->flight);
        ex->cap = t->n_actions + 1;
        ex->flight = xcalloc((size_t)ex->cap, sizeof *ex->flight);
    }
    int n_flight = 0;
    tri_status rc = TRI_OK;
    for (int i = 0; i < t->n_actions && rc == TRI_OK;) {
        const sched_action *a = &t->actions[i];
        const int end = sched_action_is_comm(a->kind) ? sched_comm_run_end(t, i) : i + 1;
        // What this group or op touches must not be in flight (parallel.overlap).
        rc = wait_flights(ex, t, &n_flight, i, end, waited);
        if (rc == TRI_OK && sched_action_is_comm(a->kind)) {
            exec_flight *f = &ex->flight[n_flight];
            *f = (exec_flight){i, end, {NULL}};
            const double t0 = time_now_s();
            flight_set_activity(FLIGHT_ACT_P2P, a->micro, a->chunk);
            rc = run_p2p_group(ex, t, i, end, &f->req);
            *waited += time_now_s() - t0;
            if (f->req.impl) n_flight++;
            i = end;
            continue;
        }
        if (rc == TRI_OK && prefetch) {
            // ZeRO-3 gathers the next parameter-reading pass's parameters while this one
            // computes.
            const int j = next_param_pass(t, i);
            if (j >= 0) zero_next_pass(ex->z, t->actions[j].chunk, pass_of(t->actions[j].kind));
            else zero_next_pass(ex->z, -1, MODEL_PASS_FORWARD);
        }
        flight_set_activity(a->kind == SCHED_ACTION_FWD ? FLIGHT_ACT_FORWARD : FLIGHT_ACT_BACKWARD,
                            a->micro, a->chunk);
        const double t0 = time_now_s();
        if (rc == TRI_OK) rc = run_compute(ex, t, a, batches, dloss);
        if (!t->forward_only) { // the step lines' pass times: training's, not evaluation's
            const int kind = a->kind == SCHED_ACTION_FWD     ? 0
                             : a->kind == SCHED_ACTION_BWD_W ? 2
                                                             : 1;
            ex->pass_s[kind] += time_now_s() - t0;
            ex->pass_n[kind]++;
        }
        comm_progress(ex->cm);
        i++;
    }
    // Every transfer still in flight completes, also after an error.
    zero_next_pass(ex->z, -1, MODEL_PASS_FORWARD); // nothing to gather ahead outside a table
    tri_status wrc = wait_flights(ex, t, &n_flight, 0, 0, waited);
    TRI_CHECK(rc);
    return wrc;
}

tri_status executor_take_loss(executor *ex, double *loss_sum) {
    *loss_sum = model_take_loss(ex->m); // the micro-batches' sums, added in order
    // Only the last stage computed the loss; every stage learns it.
    if (ex->m->d.pp > 1)
        TRI_CHECK(comm_all_reduce(ex->cm, COMM_GROUP_PP, loss_sum, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    return TRI_OK;
}

void executor_take_pass_ms(executor *ex, double out[3]) {
    for (int k = 0; k < 3; k++) {
        out[k] = ex->pass_n[k] ? 1e3 * ex->pass_s[k] / ex->pass_n[k] : 0.0;
        ex->pass_s[k] = 0.0, ex->pass_n[k] = 0;
    }
}

int executor_overlap_count(executor *ex) {
    const int n = ex->overlapped_p2p;
    ex->overlapped_p2p = 0;
    return n;
}

// sched.h: pipeline schedules as data (DESIGN.md "Pipeline schedule as data"). A pure
// function gives each pipeline rank its ordered list of actions; the executor runs the
// list. tests/test_sched.c runs all ranks' lists together in a simulator.
//
// Virtual pipeline. pp ranks, v = virtual_stages chunks per rank; chunk c of pipeline rank
// r is virtual stage s = c*pp + r (DESIGN.md "Layer placement"). The forward of
// (micro, s) needs the activation of virtual stage s-1 (rank (s-1) % pp, chunk (s-1) / pp),
// except s = 0, which reads tokens; the backward of (micro, s) needs d(output) from s+1,
// except the last virtual stage pp*v-1, which starts from the loss. With v > 1, rank 0's
// chunk c > 0 receives from rank pp-1's chunk c-1, and rank pp-1's chunk c < v-1 sends to
// rank 0's chunk c+1: activations always flow to rank (r+1) % pp, gradients to
// (r-1+pp) % pp. There is no comm action at either end of the virtual pipeline.
// zbv's V (v = 2, sched_stage_rank_chunk): stage s < pp is rank s chunk 0, stage s >= pp rank
// 2pp-1-s chunk 1, so chunk 0 flows to rank r+1 and chunk 1 to rank r-1, and the turn from
// stage pp-1 to stage pp stays on rank pp-1: no message but a copy, named by local_src (the FWD
// of chunk 1 copies chunk 0's output into its input; the BWD_B of chunk 0 copies chunk 1's
// d(input) into its d(output)).
//
// Split backward (zb-h1, zbv). BWD_B computes the input gradients (what SEND_GRAD sends and
// the stage before waits for); BWD_W, later, the weight gradients from what BWD_B kept in the
// pair's W-buffer `wslot`. A pair is B before W, and each chunk's W's run in micro-batch order
// (so gradients accumulate in the order 1f1b adds them).
//
// Running a list. Actions run in order. Every maximal run of consecutive comm actions
// (sends and receives) is ONE group: all posted together, in list order, both directions
// in flight, and the group completes when all of them are matched (Megatron's batched
// send_forward_recv_backward and friends). FWD of (micro, chunk) comes after its RECV_ACT
// and before its SEND_ACT; BWD (BWD_B) after its RECV_GRAD and before its SEND_GRAD; FWD
// before BWD. In gpipe, 1f1b and interleaved a run holds at most one action of each comm
// kind, and the d(output) a RECV_GRAD brings is consumed by the very next BWD of the list.
// The zero-bubble tables post each receive as late as it can be without delaying its
// sender, so a run may hold several receives (ordered by when their messages are due) and a
// received d(output) may wait, in its own pair's slot, behind another chunk's BWD_B.
//
// Message order. Messages between a pair of ranks match in the order issued (one MPI tag,
// NCCL's in-order p2p), so the lists are built such that the n-th message rank a sends to
// rank b is the n-th receive b posts from a: within a run, the activation-direction ops
// (SEND_ACT, RECV_ACT) come before the gradient-direction ones (SEND_GRAD, RECV_GRAD). Post
// a run in list order; do not re-sort it. Megatron's batched order (send prev, recv prev,
// send next, recv next) breaks this at pp = 2 with v > 1, where prev == next: rank 0 would
// send [grad, act] to rank 1 while rank 1 receives [act, grad] (Megatron-LM issues 750,
// 1450). The simulator checks the order with rendezvous (unbuffered) sends.
//
// Activation slots. A (micro, chunk) pair holds a slot from its first action (its RECV_ACT,
// or its FWD at virtual stage 0) through its BWD, or its BWD_W (W reads the saved
// activations). The slot carries the chunk's input, its
// saved activations, its output (sent by SEND_ACT, which precedes BWD) and the received
// d(output). Its SEND_GRAD, in the run right after its BWD, reads d(input) while the slot
// may already belong to a pair whose RECV_ACT is in that same run; that RECV_ACT writes
// the chunk input, so d(input) must live in a different buffer than the chunk input
// (model_acts.dres vs .residual). No other reuse happens within a run (tests check this).
// Pairs holding a slot at once never share it; max_in_flight is the peak number of pairs
// held, and slots run over [0, max_in_flight). Peaks, checked by the tests:
//   gpipe        m*v (every pair is held at the last forward)
//   1f1b         min(pp - rank, m)
//   interleaved  min(m*v, (pp - rank - 1)*2 + (v - 1)*pp + 1), Megatron's warm-up + 1
//   zb-h1        pp for m >= pp (1f1b's rank 0, on every rank: the deferred W's keep pairs)
//   zbv          2pp + 1 chunk pairs for m >= 2pp, 2pp + 2 on a middle rank
// and W-buffers (max_w_pending) rank + 1 (zb-h1), 2*rank + 1 (zbv). Below those m, the
// built table's own peak.
#pragma once
#include "base/common.h"

typedef enum {
    SCHEDULE_GPIPE = 0,
    SCHEDULE_1F1B = 1,
    SCHEDULE_INTERLEAVED = 2,
    SCHEDULE_ZBH1 = 3,
    SCHEDULE_ZBV = 4,
} schedule_kind;

// Previous and next are virtual stages s-1 and s+1 of the pair's stage s.
typedef enum {
    SCHED_ACTION_RECV_ACT = 0, // receive the input activation of (micro, chunk) from previous
    SCHED_ACTION_FWD,          // forward of (micro, chunk)
    SCHED_ACTION_SEND_ACT,     // send the output activation of (micro, chunk) to next
    SCHED_ACTION_RECV_GRAD,    // receive d(output) of (micro, chunk) from next
    SCHED_ACTION_BWD,          // backward of (micro, chunk)
    SCHED_ACTION_SEND_GRAD,    // send d(input) of (micro, chunk) to previous
    SCHED_ACTION_BWD_B,        // input gradient of (micro, chunk): d(input) for SEND_GRAD
    SCHED_ACTION_BWD_W,        // weight gradient of (micro, chunk); ends the pair
} sched_action_kind;

typedef struct {
    sched_action_kind kind;
    int micro; // micro-batch 0..m-1
    int chunk; // model chunk on this rank, 0..v-1
    int stage; // virtual stage chunk*pp + rank, 0..pp*v-1
    int slot;  // activation slot of the pair, in [0, max_in_flight); on all its actions
    int peer;  // comm actions: pipeline rank at the other end ((rank +- 1) % pp); else -1
    int wslot; // BWD_B and BWD_W: the pair's W-buffer in [0, max_w_pending); else -1
    // zbv, rank pp-1 only (the V's turn, no comm action): on the FWD of (micro, chunk 1) the
    // slot of (micro, chunk 0), whose output is this FWD's input; on the BWD_B of (micro,
    // chunk 0) the slot of (micro, chunk 1), whose d(input) is this BWD_B's d(output). The
    // executor copies before the action; the source pair still holds that slot. Else -1.
    int local_src;
} sched_action;

typedef struct {
    sched_action *actions;
    int n_actions;
    int max_in_flight; // peak number of (micro, chunk) pairs holding a slot at once
    int max_w_pending; // peak number of pairs between their BWD_B and BWD_W (0 without split)
    int pp, virtual_stages, micro_batches, rank;
    int forward_only; // sched_build_forward's: no backward, no gradient
} sched_table;

// The most (micro-batch, chunk) pairs a table holds, m * virtual_stages: each pair has at
// most 6 actions, so that n_actions stays an int. sched_build refuses more, and so do the
// config's rules (train.global_batch), before anything is built.
#define SCHED_MAX_PAIRS (1 << 28)

// Builds rank `rank`'s list for `schedule` over `pp` stages, `virtual_stages` chunks per
// rank and `m` micro-batches:
//   gpipe        all forwards, then all backwards; any v (pp >= 2 when v > 1) and m.
//                With v > 1 the forward order is the interleaved one below (chunk-major
//                within groups of pp micro-batches), so rank 0 need not wait for a
//                micro-batch's whole trip before its next chunk-0 forward.
//   1f1b         v = 1: min(pp - rank - 1, m) warm-up forwards, one forward and one
//                backward in turn, then the cool-down backwards; any m >= 1.
//   interleaved  v >= 2, pp >= 2, m % pp == 0: Megatron's interleaved 1F1B
//                (forward_backward_pipelining_with_interleaving). The k-th forward runs
//                chunk (k / pp) % v of micro-batch (k / (pp*v))*pp + k % pp; the k-th
//                backward chunk v-1 - (k / pp) % v of the same micro-batch;
//                (pp - rank - 1)*2 + (v - 1)*pp warm-up forwards (at most m*v).
//   zb-h1        v = 1, pp >= 2, any m: Qi et al.'s ZB-H1 (Paddle's construction). Rank r runs
//                min(pp - r, m) warm-up forwards, then r rounds of (BWD_B, FWD) with their
//                W's deferred, then (BWD_B, BWD_W, FWD) while forwards remain, then the
//                cool-down BWD_B/BWD_W pairs and the deferred W's, which fill the bubble.
//   zbv          v = 2, pp >= 2, any m: ZB-V in the V placement (torchtitan's
//                ScheduleZBVZeroBubble order): 2(pp - r) - 1 chunk-0 forwards, r rounds of
//                (F1, F0), pp - r rounds of (F1, B1, W1), then (F0, B0, W0, F1, B1, W1) while
//                forwards remain, then the cool-down; on rank pp-1 a B0 that would come
//                after the W1 of its micro-batch moves before it (the turn's d(input) is read
//                from the chunk-1 slot, which must still be held).
//                Both: the orders of compute actions above, timed as soon as possible with
//                unit times (the rank's previous action and the pair's input done), and each
//                message received in the run at the latest phase that neither delays its
//                sender's next compute nor comes after its consumer (see "Zero-bubble
//                tables" above).
// Returns TRI_ERR_CONFIG, with a message naming the key, for any other combination.
tri_status sched_build(sched_table *st, schedule_kind schedule, int pp, int virtual_stages, int m,
                       int rank);
// max_in_flight of sched_build's table for these arguments, without building it: the peaks
// above in closed form (tests/test_sched.c checks it against every table it simulates). The
// planner and the config's size rules use it, so that their cost does not grow with m.
// Needs a supported combination (sched_build's).
int64_t sched_max_in_flight(schedule_kind schedule, int pp, int virtual_stages, int m, int rank);
// max_w_pending of sched_build's table, the same way: 0 for gpipe, 1f1b and interleaved;
// zb-h1 min(r + 1, m) for m >= pp, zbv 2r + 1 for m >= 2pp; below those bounds (m < 2pp,
// so a cost bounded by pp) the table's own figure, from building it.
int64_t sched_max_w_pending(schedule_kind schedule, int pp, int virtual_stages, int m, int rank);
// Virtual stage s's pipeline rank and chunk: s % pp and s / pp; zbv's V: s < pp is rank s
// chunk 0, s >= pp is rank 2pp-1-s chunk 1. Pure; the layer placement follows it.
void sched_stage_rank_chunk(schedule_kind schedule, int pp, int virtual_stages, int s, int *rank,
                            int *chunk);
// The forward-only table of evaluation: gpipe's forward half (the same order of pairs, the
// same receive posted in the run before each forward), where a pair holds its slot from
// its first action through its SEND_ACT's run (through its FWD on the last virtual stage):
// at most 2 slots, and never more than the training table of any schedule gives the rank
// (tests/test_sched.c checks both). zbv's follows the V: micro-batch by micro-batch through
// chunk 0 then chunk 1 (FWD of chunk 1 on rank pp-1 with local_src, as in training); the
// other schedules ignore `schedule` (gpipe's placement and forward half).
tri_status sched_build_forward(sched_table *st, schedule_kind schedule, int pp, int virtual_stages,
                               int m, int rank);
void sched_free(sched_table *st);

const char *sched_action_name(sched_action_kind k);
static inline int sched_action_is_comm(sched_action_kind k) {
    return k == SCHED_ACTION_RECV_ACT || k == SCHED_ACTION_SEND_ACT ||
           k == SCHED_ACTION_RECV_GRAD || k == SCHED_ACTION_SEND_GRAD;
}
// One past the last action of the run of comm actions starting at index i (i itself if
// action i is FWD or BWD).
int sched_comm_run_end(const sched_table *st, int i);

// Idle fraction of a step with equal stages and free communication, in unit times F = B = W
// = 1 per chunk (an unsplit backward 2): gpipe, 1f1b and interleaved ((pp-1)/v) / (m +
// (pp-1)/v), which is (pp-1)/(m+pp-1) with one chunk; exact for those when v == 1 or pp
// divides m, and gpipe with v > 1 and a partial last group of micro-batches idles more.
// zb-h1 (pp-1) / (3m + pp-1) for m >= pp (the paper's (pp-1)(F+B-W) idle per rank); zbv
// (pp-1) / (6m + pp-1) for m >= 2pp (pp-1 chunk-forwards of idle per rank); below those the
// unit-time timing of the table itself (bounded cost, m < 2pp). The tests measure every
// table on the simulator.
double sched_bubble_fraction(schedule_kind schedule, int pp, int virtual_stages, int m);

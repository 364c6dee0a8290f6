// model.h: GPT-2 forward and backward for one micro-batch, through the compute backend
// and the comm interface, with Megatron tensor parallelism over the tp group.
//
// Shapes below are this rank's. N = B*T rows. Column-parallel activations are split over
// tp (3C/tp, 4C/tp, C/tp, Vp/tp columns). With sequence parallelism the residual stream and
// the LayerNorms hold only this rank's block of rows: Nl = N/tp rows [tp_rank*Nl, +Nl);
// without it Nl = N.
#pragma once
#include "backend.h"
#include "comm.h"
#include "config.h"
#include "params.h"

typedef struct {
    int L, C, NH, HS, T, B, V, Vp; // global sizes; B = micro-batch
    int tp, tp_rank;
    int sp;                        // sequence parallelism (only when tp > 1)
    int N, N_local, row0;          // rows: all, this rank's residual-stream rows, first of them
    int NH_local, C_local, C3_local, C4_local, Vp_local, vocab_start;
} model_dims;

// Activations of one micro-batch that the backward needs. One "slot" per micro-batch in
// flight (one without pipelining).
typedef struct {
    float *residual;   // (L+1, Nl, C): input of each layer, then the final residual
    float *residual2;  // (L, Nl, C): after the attention block
    float *ln1, *ln2;  // (L, N, C): LayerNorm outputs, all rows (gathered under SP)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; // (L, Nl)
    float *qkv;        // (L, N, 3C/tp)
    void *att_state;   // L * attention_state_bytes(B, T, NH/tp)
    float *atty;       // (L, N, C/tp)
    float *fch, *fch_gelu; // (L, N, 4C/tp)
    float *lnf;        // (N, C), all rows
    float *lnf_mean, *lnf_rstd; // (Nl)
    float *logits;     // (N, Vp/tp), overwritten by its gradient in the backward
    float *rowmax, *sumexp, *target_logit, *losses; // (N)
    int *inputs, *targets; // (N) on the device
} model_acts;

typedef struct {
    model_dims d;
    param_table table;
    backend *be;
    comm *cm;
    float *params;     // (table.local_numel) on the device
    float *grads;      // (table.local_numel), accumulated over micro-batches
    model_acts *slots; // one per micro-batch in flight (the schedule's bound)
    int n_slots;
    // Scratch shared by all layers and slots:
    float *dresidual;  // (Nl, C): d(loss)/d(residual stream)
    float *dln;        // (N, C): d(LayerNorm output), partial over tp before its reduction
    float *dqkv;       // (N, 3C/tp)
    float *datty;      // (N, C/tp)
    float *dfch;       // (N, 4C/tp)
    float *rows_full;  // (N, C), SP only: a row-parallel output before its reduce-scatter,
                       // or the residual gradient gathered over tp
    size_t att_state_bytes; // per layer
    size_t activation_bytes, scratch_bytes;
} model;

// Builds the table and allocates parameters, gradients and `n_slots` activation slots for
// micro-batch size B (the backend's memory). Parameters are initialised from run.seed, or
// loaded from model.init_from when set. The tp group of `cm` sets the tensor-parallel split.
tri_status model_create(model *m, const run_config *cfg, int B, int n_slots, backend *be, comm *cm);
void model_free(model *m);

// Forward of one micro-batch into activation slot `slot`: inputs/targets are host (B*T)
// token ids, the same on every tp rank. Returns the sum of the per-token losses in
// *loss_sum (host, double). With targets NULL, only the logits are computed (sampling).
tri_status model_forward(model *m, int slot, const int *inputs, const int *targets,
                         double *loss_sum);

// Backward of the micro-batch whose forward filled `slot`; gradients accumulate into
// m->grads. dloss is d(loss)/d(per-token loss): 1 / tokens in the global batch.
tri_status model_backward(model *m, int slot, float dloss);

// After the last backward of a step: under sequence parallelism each tp rank holds the
// LayerNorm gradients of its own rows only; they are summed over tp here.
tri_status model_finish_grads(model *m);

// Logits of position t of batch row 0 after model_forward (host copy of the local shard).
void model_logits_row(model *m, int slot, int t, float *out);

// Gathers the whole model's parameters (tp = 1 layout of `full_table`) on every tp rank.
// `full` is host memory of full_table->local_numel floats.
tri_status model_gather_params(model *m, const param_table *full_table, float *full);

// model.h: GPT-2 forward and backward for one micro-batch, through the compute backend
// and the comm interface. Shapes below are this rank's: with tensor parallelism the
// column-parallel activations are split over tp (3C/tp, 4C/tp, Vp/tp).
#pragma once
#include "backend.h"
#include "comm.h"
#include "config.h"
#include "params.h"

typedef struct {
    int L, C, NH, HS, T, B, V, Vp; // global sizes; B = micro-batch
    int tp, tp_rank;
    int NH_local, C3_local, C4_local, Vp_local, vocab_start;
} model_dims;

// Activations of one micro-batch that the backward needs. One "slot" per micro-batch in
// flight (one without pipelining).
typedef struct {
    float *residual;   // (L+1, N, C): input of each layer, then the final residual
    float *residual2;  // (L, N, C): after the attention block
    float *ln1, *ln2;  // (L, N, C)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; // (L, N)
    float *qkv;        // (L, N, 3C/tp)
    void *att_state;   // L * attention_state_bytes(B, T, NH/tp)
    float *atty;       // (L, N, C/tp)
    float *fch, *fch_gelu; // (L, N, 4C/tp)
    float *lnf, *lnf_mean, *lnf_rstd; // (N, C), (N), (N)
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
    // Backward scratch, shared by all layers: (N, C), (N, C), (N, 3C/tp), (N, C/tp), (N, 4C/tp)
    float *dresidual, *dln, *dqkv, *datty, *dfch;
    size_t att_state_bytes; // per layer
    size_t activation_bytes, scratch_bytes;
} model;

// Builds the table and allocates parameters, gradients and `n_slots` activation slots for
// micro-batch size B (the backend's memory). Parameters are initialised from run.seed, or loaded from
// model.init_from when set.
tri_status model_create(model *m, const run_config *cfg, int B, int n_slots, backend *be, comm *cm);
void model_free(model *m);

// Forward of one micro-batch into activation slot `slot`: inputs/targets are host (B*T)
// token ids. Returns the sum of
// the per-token losses in *loss_sum (host, double). With targets NULL, only the logits are
// computed (sampling).
tri_status model_forward(model *m, int slot, const int *inputs, const int *targets,
                         double *loss_sum);

// Backward of the micro-batch whose forward filled `slot`; gradients accumulate into
// m->grads. dloss is d(loss)/d(per-token loss): 1 / tokens in the global batch.
tri_status model_backward(model *m, int slot, float dloss);

// Logits of position t of batch row 0 after model_forward (host copy of the local shard).
void model_logits_row(model *m, int slot, int t, float *out);

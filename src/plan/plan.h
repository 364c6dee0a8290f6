// plan.h: the planner (`trident plan`). For a resolved config it predicts, without launching
// a process or allocating a model, what every rank of the job will hold and move:
//   - memory per rank by kind, byte for byte as the trainer (app/trainer.c) reports it in the run record of
//     metrics.jsonl (param, grad, master, adam, activation, grad_bucket and param_gather
//     bytes), plus the model's scratch, per pipeline stage;
//   - communication per step per group and collective, byte for byte as the comm layer counts
//     it (comm.h: all-reduce its buffer, reduce-scatter its send buffer, all-gather its
//     receive buffer, send and recv their message; a group of one counts nothing);
//   - the pipeline bubble, the model FLOPs per token, and from a device table a predicted step
//     time, tokens/s and MFU, with every assumption written out.
// Memory is the sum of the buffer specs that the model, the ZeRO layer and the optimizer
// carve (model_buffers, zero_buffers, optim_buffers): the planner has no sizing code of its
// own. Communication follows the order of calls in a training step (app/train.c's
// train_step, the executor, model_pass.c and model_layer.c, zero.c, optim.c), with the sizes
// of the model's dims and the ZeRO layer's buckets.
// tests/test_plan.sh checks every memory field and the comm bytes against real runs.
#pragma once
#include "comm/comm.h"
#include "compute/mempool.h"
#include "base/common.h"
#include "config/config.h"
#include "model/params.h"

// ---- devices ----

#define PLAN_SCALE_POINTS 8

// Where a device profile was measured (plan_profile.h): `trident plan` prints it beside the
// prediction. calibrated 0: a built-in table entry, an uncalibrated estimate.
typedef struct {
    int calibrated;
    char path[256];     // the profile file
    char host[64];      // the host it was measured on
    char date[32];      // when (UTC, ISO 8601)
    int threads;        // compute threads per rank it was measured with
    int ranks;          // processes it ran with
    int intra_measured; // intra_bw and latency_intra measured (>= 2 ranks), else estimates
    // How idle OpenMP threads waited while it measured (backend_cpu_wait_describe, without
    // " (set by trident)"); "": not recorded (an older profile). A run that waits otherwise
    // pays another cost per parallel region (README "CPU threads").
    char omp_wait[96];
    // How the compute rates change with a rank's threads (thread_scaling: a profile
    // calibrated on one rank with more than one thread): per measured thread count, the rate
    // of the two largest layer matmuls, of attention and of the elementwise passes. 0 points:
    // the rates scale linearly with the threads.
    int n_scale;
    double scale_threads[PLAN_SCALE_POINTS], scale_mm[PLAN_SCALE_POINTS],
        scale_attn[PLAN_SCALE_POINTS], scale_elem[PLAN_SCALE_POINTS];
} plan_calib;

typedef struct {
    const char *name; // what --device takes: "h100", "h200", "a100", "cpu"
    const char *description;
    double peak_bf16;     // dense bf16 FLOP/s of one device (no sparsity)
    double peak_fp32;     // dense fp32 FLOP/s (no TF32)
    double peak_tf32;     // dense TF32 tensor-core FLOP/s (no sparsity); the CPU: fp32's
    double mem_bytes;     // memory of one device (cpu: this machine's RAM / ranks on it)
    double reserve_bytes; // of it, not available to trident's buffers (runtime, comm buffers)
    double mem_bw;        // memory bandwidth of one device, bytes/s
    double intra_bw;      // per device, one direction, within a node (NVLink), bytes/s
    double inter_bw;      // per device, one direction, between nodes (InfiniBand), bytes/s
    int per_node;         // devices per node
    double latency_intra, latency_inter; // seconds per collective call
    double efficiency;       // achieved fraction of peak by a large matmul (and attention)
    double gemm_half;        // a matmul whose smallest dimension is this runs at half of that
    attn_state_kind attn;    // how the device's backend keeps attention state (backend.h)
    int cuda;                // runs the CUDA backend, whose own workspaces count too
                             // (compute/cuda_workspace.h)
    const char *driver_name; // how the driver names this part ("NVIDIA H200"); NULL: none
    int bf16_out;            // its matmuls write bf16 outputs (backend.h): CUDA yes, the CPU no
    // Time of a layer's forward, input-gradient and weight-gradient passes relative to each
    // other (the split backward of the zero-bubble schedules; B + W is the whole backward).
    double fbw[3];
    int fbw_measured; // fbw measured on this device (else an estimate from FLOP counts)
    // From a measured profile (plan_profile.h); 0 in the built-in table. Today's time model
    // reads none of them (its large-matmul rate, peak x efficiency, stands for attention,
    // and mem_bw for the optimizer): they are there for the time model to use.
    double attn_rate;        // attention forward + backward, FLOP/s (12 T C per token)
    double elem_bw;          // elementwise passes (LayerNorm, residual, GELU), bytes/s
    double matmul_rate_bf16; // a large matmul with bf16 operands, FLOP/s
    plan_calib calib;        // where it was measured; calib.calibrated 0: the table's estimate
    // Per collective within a node (indexed by comm_op_id; a recv shares its send's), from a
    // profile calibrated on 2 or more ranks: seconds per call and bytes/s of the ring's wire
    // bytes (plan_wire_factor). 0: not measured, intra_bw and latency_intra stand for it.
    double comm_lat[COMM_OP_COUNT], comm_bw[COMM_OP_COUNT];
} plan_device;

// "device numbers: calibrated on HOST at DATE with N threads (...)" or "uncalibrated
// estimate": where the device's numbers come from (plan_print.c; the plan and the search).
void plan_print_calibration(const plan_device *d, FILE *f);

// Ring algorithms: the bytes per rank's link of a collective over n ranks, per byte the comm
// layer counts for it (comm.h): an all-reduce 2(n-1)/n, a reduce-scatter or all-gather
// (n-1)/n, a send (or broadcast) 1, a receive 0 (it shares the send's time).
double plan_wire_factor(comm_op_id op, int n);
// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv"
const char *plan_comm_op_name(comm_op_id op);

// The backend traits the device's buffers follow.
static inline backend_traits plan_device_traits(const plan_device *d) {
    return (backend_traits){
        .attn = d->attn, .bf16_out = d->bf16_out, .optim_table = d->cuda, .attn_rope = d->cuda};
}

// Fills *dev with device `name` (case-insensitive). The CPU's memory, cores and hence ranks
// per node are this machine's. Returns 0, or -1 for an unknown name.
int plan_device_lookup(const char *name, int world, plan_device *dev);
// The entry of the GPU the driver names `driver_name` (backend.device_name): the SXM parts of
// the table, matched by their driver names; a PCIe or NVL variant (other peaks) or any other
// GPU is not in it. Returns 0, or -1 when none matches.
int plan_device_for_gpu(const char *driver_name, plan_device *dev);
// The dense peak of `dev` for a run of precision p (bf16, TF32 or plain fp32): the MFU
// denominator; *what names it ("bf16", "tf32", "fp32") when what is not NULL.
double plan_device_peak(const plan_device *dev, precision_kind p, const char **what);
// The device a config's system.backend implies: cuda -> h100; cpu and auto -> cpu (this
// build trains on the CPU; the planner never probes for GPUs).
const char *plan_device_default(const run_config *cfg);
// "h100, h200, a100, cpu"
const char *plan_device_names(void);

// ---- the plan of one layout ----

// Where a step spends its communication: inside the schedule (per micro-batch: tp, p2p,
// ZeRO bucket reductions and gathers) or after it (the rest of the dp reduction, norms,
// parameter all-gathers).
typedef enum { PLAN_PHASE_SCHEDULE = 0, PLAN_PHASE_STEP_END = 1, PLAN_PHASE_COUNT } plan_phase;

typedef struct {
    uint64_t bytes[PLAN_PHASE_COUNT][COMM_GROUP_COUNT][COMM_OP_COUNT];
    uint64_t calls[PLAN_PHASE_COUNT][COMM_GROUP_COUNT][COMM_OP_COUNT];
} plan_comm;

// One pipeline stage, as seen by its tp rank 0, dp rank 0.
typedef struct {
    int pp_rank;
    int64_t rank_params; // parameters held (table.local_numel)
    int n_slots;         // activation slots (the schedule's in-flight bound)
    uint64_t mem[MEM_KIND_COUNT];
    uint64_t mem_total; // the arenas: the run record's "memory_planned"
    // The compute backend's own memory outside the arenas (on a CUDA device its workspaces,
    // compute/cuda_workspace.h; 0 on the CPU): on the device (counted in `fits`), and pinned
    // host memory.
    uint64_t backend_device, backend_pinned;
    // Host memory outside the arenas (plan_host_*): its peak at start-up, and at the final
    // save (tp rank 0, dp rank 0; 0 where model.bin is not written).
    uint64_t host_startup, host_save;
    plan_comm comm;
    double model_flops; // model FLOPs of this rank per step (fwd + bwd, its tp share)
    double hw_flops;    // FLOPs it executes (recompute runs each forward twice)
    double t_compute, t_comm[PLAN_PHASE_COUNT]; // seconds per step
    // The schedule's busy time of the stage per step: compute and the communication that
    // parallel.overlap leaves exposed (all of it without overlap); and with overlap a
    // pipeline message's transfer time, which the simulator adds between stages instead.
    double t_busy, t_p2p;
    double t_p2p_busy; // of t_busy, the stage's own pipeline messages (their sender's time
                       // without overlap; 0 with it, where they are t_p2p between stages)
    double idle_sim;   // the fraction of the simulated schedule this stage waits (bubble_sim's)
    double t_optimizer;
} plan_stage;

typedef struct {
    int world, tp, pp, dp, virtual_stages, zero; // zero: the stage in effect (0 when dp == 1)
    int micro_batches;                           // per replica per step
    int64_t n_params;                            // the whole model, padding included
    double flops_per_token, tokens_per_step;
    double bubble;      // sched_bubble_fraction: the schedule's idle fraction at unit times
    double bubble_sim;  // the mean idle fraction of the tables simulated with this device's
                        // stage times and F:B:W ratios (t_schedule's)
    plan_stage *stages; // pp of them
    plan_device dev;
    double usable_bytes; // dev.mem_bytes - dev.reserve_bytes
    int fits;            // every stage's total (and backend_device) within usable_bytes
    int worst_stage;     // the stage with the most memory
    // Prediction: the schedule phase runs (m + (pp-1)/v) times the slowest stage's
    // per-micro-batch time; then the step-end communication and the optimizer.
    double t_schedule, t_step_end, t_optimizer, step_s, tokens_per_s, mfu;
    double peak_flops; // the device peak used for time and MFU
} plan_result;

// Plans the layout of `cfg`, which config_resolve_world has resolved, on `dev`. Builds only
// tables (parameters, schedules of at most a few pp micro-batches, buckets): nothing
// proportional to the model or to the micro-batches per step is allocated.
tri_status plan_compute(plan_result *p, const run_config *cfg, const plan_device *dev);
void plan_free(plan_result *p);
// The same, keeping the tables it builds in `cache` for the next call with the same model,
// tp, pp, virtual stages and dp (and schedule and micro-batches): how the search plans
// thousands of layouts quickly.
typedef struct plan_cache plan_cache;
plan_cache *plan_cache_create(void);
void plan_cache_free(plan_cache *c);
tri_status plan_compute_cached(plan_result *p, const run_config *cfg, const plan_device *dev,
                               plan_cache *cache);

// The arenas of the rank at (tp_rank, pp_rank, dp_rank) of `cfg` (resolved) with n_slots
// activation slots, on a backend of traits `bt`: config_layout.h's
// config_rank_memory, the sums of model_buffers, zero_buffers and optim_buffers, byte for
// byte what that rank's model, ZeRO layer and optimizer carve (the trainer sizes its arenas
// with it).
void plan_rank_memory(const run_config *cfg, int tp_rank, int pp_rank, int dp_rank, int n_slots,
                      backend_traits bt, uint64_t mem[MEM_KIND_COUNT]);

// Host memory a rank allocates outside its arenas (plan_host.c lists what and where): at
// start-up, for the rank whose table is pt; at the final save, for a rank whose pieces hold
// piece_elems values (model_save_piece_elems of the whole model's table; pt: any table of the
// model). Peak resident memory is about the arenas plus the larger of the two, plus the
// runtime's own.
uint64_t plan_host_startup_bytes(const run_config *cfg, const param_table *pt);
uint64_t plan_host_save_bytes(const run_config *cfg, const param_table *pt, size_t piece_elems);
// plan_compute replays a step's schedule call by call up to max_m micro-batches per step
// (default 64); beyond, it replays two smaller counts and extrapolates the communication,
// which is affine in m, so that planning costs the same for any global batch. The tests set
// it to compare the two (<= 0: the default). Returns the previous limit.
int plan_set_replay_limit(int max_m);

// Model state of a stage: param + grad + master + adam bytes.
uint64_t plan_model_state_bytes(const plan_stage *s);
// Bytes a stage moves in group g in one step (all phases and collectives): what the step
// lines' comm_bytes report for rank 0.
uint64_t plan_group_bytes(const plan_stage *s, comm_group_id g);
// Model FLOPs per token of a training step, as the trainer reports it (flops_per_token).
double plan_flops_per_token(const run_config *cfg);

// A stage's predicted step in the parts a run measures (app/train_timing.c's timing.json,
// `trident plan RUN_DIR`): compute, its passes and its optimizer; comm, the time of its tp,
// dp, embedding and norm collectives that parallel.overlap leaves exposed (in the schedule
// and at the step end); waits, the rest of the step: the bubble, the pipeline transfers and
// waiting for slower stages. compute + waits + comm = the plan's step_s.
typedef struct {
    double compute_s, waits_s, comm_s;
} plan_step_parts;
plan_step_parts plan_stage_parts(const plan_result *p, int pp_rank);

// ---- output and the command ----

// The options of `trident plan` (its command-line table is in app/main.c).
typedef struct {
    const char *device; // --device NAME; NULL: plan_device_default
    int json;           // --json: one JSON object instead of the text report
    int search;         // --search
    int top;            // --top N: layouts the search lists (default 15)
    int world_given;    // --world was passed (else the config's tp * pp * dp, dp auto as 1)
    const char *fbw;    // --fbw F:B:W: the device's forward, input-gradient and weight-gradient
                        // time ratios (e.g. a run's pass_ms); NULL: the device table's
    int calibrate;      // --calibrate: measure this machine and write a profile
    const char *out;    // --out FILE: where --calibrate writes; NULL: plan_profile_default_path
} plan_options;

// The largest world `trident check` and `plan` take (--world, or the config's tp * pp * dp).
#define PLAN_MAX_WORLD (1 << 20)

// `trident plan`: resolves cfg (loaded, not yet resolved) for `world` and prints the plan,
// or with --search the ranked layouts. `world` counts only when po->world_given.
tri_status plan_run(run_config *cfg, int world, const plan_options *po);
void plan_print_text(const plan_result *p, const run_config *cfg, FILE *f);
// `trident plan RUN_DIR` (plan_rundir.c): the prediction the run record holds for each
// pipeline stage beside what the run measured (its timing.json), as text or (po->json) JSON.
// TRI_ERR_CONFIG when `dir` holds no run record, TRI_ERR_CKPT when the record or timing.json
// is damaged (each named).
tri_status plan_rundir_run(const char *dir, const plan_options *po);
void plan_print_json(const plan_result *p, const run_config *cfg, FILE *f);

// --search: every layout of `cfg`'s model and batch on cfg's world (tp, pp, virtual
// stages, schedule, zero, micro_batch, recompute, sequence parallelism), those that fit
// ranked by predicted step time, the rest summarised by the reason they fail.
tri_status plan_search(const run_config *cfg, int world, const plan_device *dev, int top, int json,
                       FILE *f);

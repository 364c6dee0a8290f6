// checkpoint.h: sharded, atomic, optionally asynchronous checkpoints in global coordinates
// (DESIGN.md "Files": the checkpoint directory), resume on any layout, and the whole
// model read back from a checkpoint for export and sampling.
//
// What a rank stores: the parts of the parameters (fp32: they are the master weights) and
// of the Adam moments that its optimizer owns (its ZeRO pieces; at stage 0, where every dp
// replica owns everything, the dp-th part of the flat buffer as stage 1 would cut it),
// without the copies other ranks hold too (replicated tensors are stored by tp rank 0, the
// tied embedding by the first pipeline stage). Each stored region is a rectangle of a
// global tensor with its CRC-32C, so no two ranks store the same element and any layout
// can find what it needs.
//
// Writing: every rank copies its state to host memory at the step boundary (the only time
// the training loop is blocked when checkpoint.async is on), then writes
// <dir>/step_N.tmp/rank_R.bin and its index rank_R.idx and fsyncs them, in a background
// thread or inline. When every rank has finished (ckpt_commit, collective), rank 0 merges
// the indexes into manifest.yaml, seals it with its CRC-32C (its last line), fsyncs it,
// renames step_N.tmp to step_N, replaces `latest` by rename and removes all but the
// `checkpoint.keep` newest complete checkpoints.
//
// Reading checks the manifest whole (seal, fields, regions tiling every tensor and rank
// file) before a byte of a rank file is read, and each region's CRC as it is read.
#pragma once
#include "compute/backend.h"
#include "comm/comm.h"
#include "config/config.h"
#include "io/data_order.h"
#include "model/params.h"
#include "parallel/optim.h"
#include "parallel/zero.h"

// Where training stands: what a checkpoint restores besides the tensors.
typedef struct {
    int step;          // optimizer steps done
    int64_t samples;   // global sample index of the next training sample (all sources)
    int64_t tokens;    // tokens trained on
    int optim_t;       // AdamW's step counter (bias correction)
    data_cursor order; // the data order at `step` (ckpt_save copies it; ckpt_load and
                       // ckpt_verify fill it, the caller's to data_cursor_free: recorded from
                       // format version 3 on, one plain stream before)
} ckpt_progress;

// A rank's training state as the checkpoint code sees it.
typedef struct {
    const run_config *cfg;
    const param_table *pt;
    zero_state *zero; // where the parameters are and which pieces this rank owns
    optimizer *optim; // their moments and master weights
    backend *be;
    comm *cm;
    int rank, world, tp_rank;
} ckpt_state;

typedef struct ckpt_writer ckpt_writer;

tri_status ckpt_writer_create(ckpt_writer **out, const ckpt_state *s);
// The bytes of this rank's file in each checkpoint (its stored regions); their sum over the
// ranks is a checkpoint's size, less the manifest (io/rundir.h checks the free space).
uint64_t ckpt_rank_bytes(const ckpt_state *s);
// Collective over the world. Waits for (and commits) an earlier checkpoint still being
// written, copies this rank's state to host memory, then writes it: in a background thread
// when `async`, else before returning (committed too). *blocked_s: seconds the caller was
// held. A write error is TRI_ERR_CKPT on every rank.
tri_status ckpt_save(ckpt_writer *w, const ckpt_progress *p, int async, double *blocked_s);
// 1 while a background write has not been committed; ckpt_write_done() says whether this
// rank's part of it has finished (no communication).
int ckpt_pending(const ckpt_writer *w);
int ckpt_write_done(const ckpt_writer *w);
// Collective: waits for this rank's write, agrees on success over the world, and rank 0
// makes the checkpoint complete. No-op when nothing is pending.
tri_status ckpt_commit(ckpt_writer *w);
// Frees the writer; a write still in flight is finished but not committed (the trainer
// commits explicitly; it gets here with one pending only on an error path).
void ckpt_writer_free(ckpt_writer *w);

// The checkpoint directory that checkpoint.resume names: "" when training starts fresh
// (resume none; auto with no checkpoint.dir, or one that holds no checkpoint). From a
// checkpoint.dir: the checkpoint `latest` names, or, when `latest` is damaged (missing,
// empty, unreadable, naming no complete checkpoint), the newest complete step_N with a
// warning saying why. TRI_ERR_CKPT when a named checkpoint does not exist, and when step_N
// directories exist but none is complete: never a fresh start over checkpoints.
tri_status ckpt_resolve_resume(const run_config *cfg, char *path, size_t n);

// What a checkpoint recorded about the run that wrote it, for a resume to compare with its own
// config (config_resume.h) before it loads anything.
typedef struct {
    char *manifest; // the path of its manifest.yaml
    char *config;   // the manifest's `config:` block: the writer's resolved config, as YAML
    size_t config_len;
    int config_line; // where the block starts in the manifest
    int step;        // the checkpoint's step
} ckpt_recorded;

// Reads and checks the manifest of the checkpoint directory `path` whole (as ckpt_load does:
// the seal, every field, the regions; not the rank files) and keeps what `r` holds. One
// process, no comm. TRI_ERR_CKPT with the file and field named when it is damaged.
tri_status ckpt_read_recorded(const char *path, ckpt_recorded *r);
void ckpt_recorded_free(ckpt_recorded *r);

// Collective: restores parameters, Adam moments and progress from the checkpoint directory
// `path` into the state of this rank, whatever layout wrote it. Every rank returns the same
// status; on an error nothing of `s` has been changed except partly loaded device buffers.
tri_status ckpt_load(const char *path, const ckpt_state *s, ckpt_progress *p);

// Whether `path` is a checkpoint directory (holds manifest.yaml) or a checkpoint.dir
// holding a complete checkpoint; in the second case `resolved` gets the one `latest` names,
// or the newest complete one when `latest` is damaged (a warning says why).
int ckpt_is_checkpoint(const char *path, char *resolved, size_t n);

// Checks a whole checkpoint without loading it (one process, no comm): the manifest (its
// checksum, every field, the regions' tiling), the rank files' sizes and every region's
// CRC. *p gets its progress. TRI_ERR_CKPT, with the file and field named, when anything is
// wrong.
tri_status ckpt_verify(const char *path, ckpt_progress *p);

// The whole model of a checkpoint, tensor by tensor (one process, no comm): open fills the
// model keys of `cfg` (which holds config_defaults()) from the manifest and builds `full`
// (params_build_full; the reader keeps a pointer to it, and frees it on an error); read puts
// entry i of `full`, whole, into dst (its local_numel floats). The reader holds the regions of
// one tensor at a time.
typedef struct ckpt_model_reader ckpt_model_reader;
tri_status ckpt_model_open(const char *path, run_config *cfg, param_table *full,
                           ckpt_model_reader **out);
tri_status ckpt_model_read(ckpt_model_reader *r, int i, float *dst);
void ckpt_model_close(ckpt_model_reader *r);

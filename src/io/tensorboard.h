// tensorboard.h: TensorBoard event files (`log.tensorboard: DIR`), written by rank 0 beside
// metrics.jsonl, so that `tensorboard --logdir DIR` shows a run while it trains.
//
// Every scalar is a field of metrics.jsonl under the same name (nested fields joined by
// '/': comm_bytes/tp), at the same step and with the same value rounded to float32, so the
// two never disagree: a step line gives loss, lr, grad_norm, tokens, step_ms, tokens_per_s,
// mfu (when known), mem_peak_bytes, comm_bytes/{tp,pp,dp} and, on a pipelined run, bubble
// and bubble_formula; an evaluation gives val_loss (val_loss/NAME for a named set).
//
// File format: TFRecord framing (uint64 length, uint32 masked CRC-32C of the length, the
// bytes, uint32 masked CRC-32C of the bytes; all little-endian) of tensorboard.Event
// protobuf messages encoded here by hand. The first event names the file version
// ("brain.Event:2"); the second is SessionLog START at the first step this process trains,
// which makes TensorBoard drop what earlier files of the directory hold from that step on
// (a resumed run rewrites those steps, as metrics.jsonl does).
//
// Errors: a directory or file that cannot be created fails tb_open (exit 4, the key and
// path named). A write that fails later prints one warning naming the file and stops the
// TensorBoard output for the rest of the run; training and metrics.jsonl go on.
#pragma once
#include "base/common.h"
#include "io/metrics.h"

typedef struct {
    FILE *f;    // NULL: not open (log.tensorboard unset, not rank 0, or a write failed)
    char *path; // the event file
} tb_log;

// Creates `dir` (mkdir -p) and a new event file in it named
// events.out.tfevents.<unix time>.<host>, with a time later than any event file already
// there so that the names sort in the order the runs wrote them (TensorBoard reads a
// directory's files in name order). `first_step` is the first step this process trains
// (1, or the resumed checkpoint's step + 1).
tri_status tb_open(tb_log *tb, const char *dir, int first_step);

// The scalars of one step line (the fields metrics_write_step writes).
void tb_write_step(tb_log *tb, const metrics_step *s);
// An evaluation: tag val_loss, or val_loss/NAME for a named validation set (name != NULL).
void tb_write_eval(tb_log *tb, int step, const char *name, double val_loss);

void tb_close(tb_log *tb);

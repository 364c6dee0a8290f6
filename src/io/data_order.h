// data_order.h: the order in which training reads data.train (DESIGN.md "Token stream
// order"): its sources, the blend schedule that shares each global batch among them
// (io/data_blend.h), each source's shuffled order (io/data.h: data_permute), and the cursor
// that a checkpoint records and a resume continues.
//
// Step s takes G = train.global_batch samples. The blend schedule gives source i counts_i of
// them, spread over the batch's positions by blend_interleave; dp replica r takes positions
// [r G/dp, (r+1) G/dp) and splits them into micro-batches in order (DESIGN.md). The k-th
// sample of source i in step s is that source's sample number c = c_i(s) + k, where c_i(s)
// counts the samples drawn from it before step s. With data.shuffle, c is plain sample
// data_permute(n_i, key_i, c / n_i, c % n_i) of the source's n_i samples (key_i from run.seed
// and the source's place in the list: a new order every epoch); without, plain sample
// c mod n_i. With one source (data.train a string) c_0(s) = s G and step s takes samples
// [s G, (s+1) G): DESIGN.md's plain stream, bit for bit with shuffle off. The schedule is a
// pure function of the step and the cursor, so every layout reads the same batches, and a
// resume on any layout continues them.
#pragma once
#include "config/config.h"
#include "io/data.h"
#include "io/data_blend.h"

// One source in a cursor.
typedef struct {
    char *path;
    double weight;          // as configured (the shares are the weights normalised)
    int64_t samples;        // drawn before the cursor's step
    int64_t origin_samples; // drawn before the schedule's origin step
    int64_t extras;         // the schedule's extra samples since the origin (data_blend.h)
} data_cursor_source;

// Where the data order stands at a step boundary: what a checkpoint records (manifest
// version 3: data_order and data_sources) and a resume continues.
typedef struct {
    int recorded;        // 0: from a checkpoint written before data.shuffle existed: one
                         // stream in plain order, sources[0].samples its global sample index
    int shuffle;         // data.shuffle
    uint64_t seed;       // run.seed: the permutations' seed
    int global_batch;    // G, the batch the schedule runs with since origin_step
    int64_t step;        // steps done
    int64_t origin_step; // where the schedule began: 0, or a resume that changed G or the
                         // sources (checkpoint.resume_changes: allow)
    int64_t retired;     // samples drawn from sources no longer in data.train (such a resume):
                         // with the sources' samples they sum to the global sample index
    int n_sources;
    data_cursor_source *sources;
} data_cursor;

void data_cursor_free(data_cursor *c);

// The differences between the data order a checkpoint recorded and the one `cfg` asks for
// (data.shuffle, the seed of a shuffled order, data.train's sources and their shares), one
// "key: ... in the checkpoint, ... in the config" line each, into out[n]. Returns how many.
// A checkpoint from before data.shuffle (!recorded) continues in plain order whatever
// data.shuffle says: only its source is compared.
int data_order_compare(const data_cursor *c, const run_config *cfg, char *out, size_t n);

typedef struct {
    data_stream stream;
    char *path;
    double weight, share; // as configured; normalised
    uint64_t key;         // of its permutation (run.seed, its place in the list)
    int64_t samples;      // drawn before step `step` of the order
    int64_t origin_samples;
    int noted_epoch2; // the line that its second epoch began was printed
} data_order_source;

typedef struct {
    data_order_source *src;
    int n_sources;
    int listed; // data.train is a list (a blend), not a single glob
    int shuffle;
    uint64_t seed;
    int T, G;
    blend_schedule sched; // its t is step - origin_step
    int64_t origin_step;
    int64_t retired; // samples drawn from sources a resume left out (data_cursor's)
    int64_t step;    // the step that the samples count up to, and whose counts follow
    int counted;     // counts holds step `step`'s samples of each source (blend_step ran)
    int *counts;     // (n_sources)
    int64_t spread;  // the step whose positions source_of and nth hold (-1: none)
    int *source_of;  // (G) each batch position's source (a blend only)
    int *nth;        // (G) and which of that source's samples in the step it is
    int notes;       // rank 0: a line when a source's second epoch begins
} data_order;

// Opens every source of data.train (data_open: each file checked; messages name
// data.train, or data.train[i].path for a list) for a schedule of G samples a step, at
// step 0. The string form needs G samples in its shards (a batch), each source of a list as
// many as its largest count in a step. TRI_ERR_DATA on a bad file.
tri_status data_order_open(data_order *o, const config_data_sources *train, int shuffle,
                           uint64_t seed, int T, int vocab_size, int G);
void data_order_close(data_order *o);

// Continues the order that cursor `c` recorded at step c->step (after data_order_compare
// found no difference, or checkpoint.resume_changes: allow took them). The same sources,
// shares and G continue the schedule exactly; otherwise it begins anew at c->step, each
// source with the samples drawn from the same path before. A cursor from before
// data.shuffle (!recorded) continues its plain stream: shuffle off, its global index.
// TRI_ERR_CKPT when the cursor cannot be a state of the schedule (a damaged manifest).
tri_status data_order_resume(data_order *o, const data_cursor *c, const char *ckpt_path);

// Fills inputs/targets (B, T) with the samples at positions [pos, pos + B) of step `step`'s
// global batch. Steps go forward only (the order is laid out step by step).
void data_order_batch(data_order *o, int64_t step, int pos, int B, int *inputs, int *targets);

// The cursor at the boundary before step `step` (>= the last step laid out), for a
// checkpoint. `out` is the caller's to data_cursor_free.
void data_order_cursor(data_order *o, int64_t step, data_cursor *out);
// Samples drawn before step `step`: from all sources, and from those a resume left out.
int64_t data_order_samples(data_order *o, int64_t step);

// Rank 0's start-up lines: each source's shards, tokens, samples, steps per epoch and the
// epochs that `steps` steps make; a warning when that is more than one.
void data_order_describe(const data_order *o, int steps);
// The run record's "data_train" list: each source's path, weight, share (of the samples
// drawn: its weight normalised, as the schedule quantises it), shards, tokens, samples and the
// epochs that `steps` steps make of it, as a JSON array.
void data_order_json(const data_order *o, int steps, FILE *f);

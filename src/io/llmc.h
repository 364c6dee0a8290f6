// llmc.h: llm.c GPT-2 model files (DESIGN.md "Files"): a rank's slices read out of one, and
// one written piece by piece. Nothing here holds a whole model: a reader preads only the
// rows (or, for a column split, the row segments) of the shard it fills, through at most
// LLMC_IO_BYTES of staging; a writer pwrites each piece it is given at its place in the file.
#pragma once
#include "base/common.h"
#include "config/config.h"
#include "model/params.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION_FP32 3
#define LLMC_VERSION_BF16 5
#define LLMC_HEADER_BYTES 1024
// A read's staging: at most this many bytes (a row wider than it is read in segments).
#define LLMC_IO_BYTES ((size_t)4 << 20)

// Bounds on a header's dims (words 2..7), far beyond any GPT-2, so that a crafted header is
// refused before any size is computed from it; every size is then computed in checked
// 64-bit arithmetic and must equal the file's.
#define LLMC_MAX_SEQ_LEN (1 << 24)
#define LLMC_MAX_VOCAB (1 << 26)
#define LLMC_MAX_LAYERS (1 << 16)
#define LLMC_MAX_D_MODEL (1 << 20)

// An llm.c model file, open, whose header has been checked: magic and version, every dim
// within its bound, d_model a multiple of n_head, V <= Vp, and the file exactly
// LLMC_HEADER_BYTES + numel * (4 or 2) bytes.
typedef struct {
    char path[4096];
    int fd;      // -1 when closed
    int version; // LLMC_VERSION_FP32 (fp32 values) or LLMC_VERSION_BF16 (bf16)
    int maxT, V, L, NH, C, Vp;
    int64_t numel;   // values after the header
    size_t io_bytes; // the staging bound of a read: LLMC_IO_BYTES (a test lowers it to
                     // exercise every read path on a small model)
} llmc_file;

// Opens and checks `path`. Errors name the file and the field and return TRI_ERR_CKPT.
tri_status llmc_open(llmc_file *f, const char *path);
void llmc_close(llmc_file *f);

// Checks the file's shape against the config's model keys; a difference names both values
// and the key (TRI_ERR_CKPT).
tri_status llmc_check_config(const llmc_file *f, const run_config *cfg);

// Sets the model keys of cfg from the file: n_layer, n_head, d_model, seq_len, vocab_size,
// and vocab_pad_to = Vp, so that a tp = 1 table of cfg pads the vocabulary as the file does.
void llmc_config_from_file(const llmc_file *f, run_config *cfg);

// Entry i of table pt as this rank holds it (pt->entries[i].local_numel floats, row-major
// local shape) into dst, reading only those elements. Padded vocabulary rows are zero
// whatever the file's padding. A non-finite value is TRI_ERR_CKPT naming the tensor and the
// element.
tri_status llmc_read_entry(const llmc_file *f, const param_table *pt, int i, float *dst);
// Every entry of pt into `local` (pt->local_numel floats, table layout): this rank's shard.
tri_status llmc_read_params(const llmc_file *f, const param_table *pt, float *local);
// The most staging those reads allocate at once (an fp32 file's; a bf16 file's is half).
size_t llmc_read_stage_bytes(const param_table *pt);

// Writing: the header first, then the tensors in any order and in pieces, each pwritten at its
// place; PATH.tmp is synced and renamed to PATH only when every value has been written.
typedef struct {
    char path[4096], tmp[4112];
    int fd;
    int maxT, L, C, Vp;
    int64_t numel, written; // values the file holds, values put so far
} llmc_writer;

// Creates PATH.tmp holding the header of the model whose whole (tp = 1) table is `full`
// (params_build_full: its vocabulary padding is the file's Vp), with seq_len maxT, vocabulary
// V and NH heads. TRI_ERR_CKPT (named) when it cannot.
tri_status llmc_writer_open(llmc_writer *w, const char *path, const param_table *full, int maxT,
                            int V, int NH);
// Values [first, first + n) of entry e of the writer's table (row-major, global shape).
tri_status llmc_writer_put(llmc_writer *w, const param_entry *e, size_t first, const float *data,
                           size_t n);
// commit: fsync, close and rename to PATH (TRI_ERR_CKPT named on failure; every value must
// have been put). Without commit, or on a failure, PATH.tmp is removed and PATH untouched.
tri_status llmc_writer_close(llmc_writer *w, int commit);

// The whole model at once, from host memory (`global`: the full parameters in the layout of
// the tp = 1 table pt): for tools and tests with a small model in hand.
tri_status llmc_write(const char *path, const param_table *pt, const float *global, int maxT, int V,
                      int NH);

// Where the llm.c format fits a run's final model: model.bin is written (streamed through
// rank 0) when the model's fp32 size is at most LLMC_SAVE_MAX_BYTES (every GPT-2 size; llm.c
// loads a model file whole into one process), or when the run has no checkpoint.dir (then
// model.bin is its only output). Above it, the final checkpoint is the output and
// `trident export CKPT --format llmc` converts it.
#define LLMC_SAVE_MAX_BYTES ((int64_t)8 << 30)
int llmc_save_wanted(const param_table *full, const run_config *cfg);

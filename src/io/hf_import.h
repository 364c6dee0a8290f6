// hf_import.h: a rank's slices of a Hugging Face model (model.init_from DIR) and the name
// mapping between trident's parameter table and HF's tensors, both ways (export uses it too).
//
// The mapping works on global rows of trident's (out, in) entries: each maps to one HF tensor
// and row (GPT-2's Conv1D weights are stored (in, out): there the entry's row is the HF
// tensor's column). A rank reads, for each run of its local rows that are consecutive global
// rows of one HF tensor, only that block (a strided sub-block for column splits and for the
// transposed tensors), through a staging buffer of at most HF_IO_BYTES (and as much again for
// a transpose) that `trident plan` counts (hf_read_stage_bytes).
#pragma once
#include "base/common.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/params.h"

#define HF_IO_BYTES ((size_t)4 << 20)

// Where global row `row` of a table entry comes from.
typedef struct {
    char name[96];   // the HF tensor ("transformer.h.3.attn.c_attn.weight")
    int64_t row;     // its row (transpose: its column) holding the entry's row
    int64_t count;   // entry rows from `row` on that map to consecutive rows of this tensor
    int64_t hf_rows; // the tensor's rows (transpose: columns) HF has; -1: at least `row + count`
    int transpose;   // HF stores the tensor (in, out): entry (r, c) is HF (c, r)
    int zero;        // padded vocabulary rows: zeros, read from nowhere
} hf_src;

// The source of global row `row` of entry e (its table name, global shape) in the HF model h.
// -1 when the entry has no HF counterpart (a name this mapping does not know).
int hf_map_row(const hf_config *h, const param_entry *e, int64_t row, hf_src *s);

// The HF name of tensor `name` with GPT-2's "transformer." prefix dropped, as older hub
// checkpoints store it (the reader tries both); `name` itself when it has no such prefix.
const char *hf_unprefixed(const char *name);

// Entry i of table pt as this rank holds it (local_numel floats, row-major local shape) into
// dst. A missing tensor, a shape other than the config's, a short read or a non-finite value
// names the file and the tensor (TRI_ERR_CKPT).
tri_status hf_read_entry(const st_model *m, const hf_config *h, const param_table *pt, int i,
                         float *dst);
// The most staging hf_read_entry allocates at once.
size_t hf_read_stage_bytes(const param_table *pt);

// params.h: the parameter table. Every parameter is declared once here: global name,
// global shape, how TP splits it, its layer and whether weight decay applies. Local
// shapes, buffer offsets, ZeRO shard ranges, checkpoint regions and the planner's byte
// counts are all derived from this table, never written out twice.
#pragma once
#include "base/common.h"
#include "model/model_config.h"

typedef enum {
    SPLIT_REPLICATED = 0, // every tp rank holds the whole tensor (LayerNorm, row-parallel bias)
    SPLIT_ROWS,           // column-parallel: output rows split; row_blocks blocks split alike
    SPLIT_COLS,           // row-parallel: input columns split
    SPLIT_VOCAB,          // vocabulary rows split (embedding, tied LM head)
} param_split;

typedef enum { INIT_NORMAL = 0, INIT_ZEROS, INIT_ONES } param_init;

// Where a parameter lives in the model: the embeddings (first chunk of stage 0), a
// transformer layer, or the final LayerNorm (last chunk of stage pp-1).
#define PARAM_LAYER_EMBED (-1)
#define PARAM_LAYER_FINAL (-2)

typedef struct {
    char name[32];       // "wte", "h3.qkvw", "lnfw"
    int ndim;            // 1 or 2
    int64_t global_rows; // (rows, cols) of the whole tensor; 1-d: (n, 1)
    int64_t global_cols;
    param_split split;
    int row_blocks; // SPLIT_ROWS: the rows form this many blocks, each split alike over tp
                    // (qkv: 3, Llama's gate|up: 2)
    // SPLIT_ROWS blocks of unequal size (Llama's qkv with n_kv_head < n_head: q NH*HS rows, k
    // and v NKV*HS each): their global rows; all 0 when the blocks are equal.
    int64_t block_rows[3];
    int layer;     // 0..L-1, PARAM_LAYER_EMBED or PARAM_LAYER_FINAL
    int decay;     // weight decay applies (matrices and embeddings)
    int matmul;    // a layer's matmul weight (under bf16 the matmuls read it as it
                   // is; the other entries are widened to fp32 for their ops)
    int layernorm; // a LayerNorm weight or bias (sequence parallelism sums its
                   // gradient over tp)
    param_init init;
    double init_std;    // INIT_NORMAL
    int64_t valid_rows; // rows that are real (vocab_size for wte; padded rows are 0)
    // Derived for this rank (tp rank, tp size):
    int64_t local_rows, local_cols;
    int64_t local_numel;
    size_t offset; // elements from the start of this rank's parameter buffer
} param_entry;

enum {
    PARAM_LN1W = 0,
    PARAM_LN1B,
    PARAM_QKVW,
    PARAM_QKVB,
    PARAM_ATTPROJW,
    PARAM_ATTPROJB,
    PARAM_LN2W,
    PARAM_LN2B,
    PARAM_FCW,
    PARAM_FCB,
    PARAM_FCPROJW,
    PARAM_FCPROJB,
    PARAM_PER_LAYER
};

// A Llama layer's entries (model.arch llama), in table order (no biases).
enum {
    LLAMA_LN1W = 0, // RMSNorm before attention
    LLAMA_QKVW,     // rows [q (NH*HS) | k (NKV*HS) | v (NKV*HS)], each block split over tp by heads
    LLAMA_ATTPROJW, // o_proj, row-parallel
    LLAMA_LN2W,     // RMSNorm before the MLP
    LLAMA_FCW,      // rows [gate (F) | up (F)], each block split over tp
    LLAMA_FCPROJW,  // down_proj, row-parallel
    LLAMA_PER_LAYER
};

typedef struct {
    // The entries this rank holds, in model order: wte and wpe (pipeline stage 0), the
    // layers of its chunks, then lnfw, lnfb and (pp > 1) the LM head's copy of wte (last
    // stage).
    param_entry *entries;
    int n_entries;
    int n_layer;
    int layer_entries; // entries of every layer, in the same order in each (a
                       // transformer block: PARAM_PER_LAYER for GPT-2)
    int tp, tp_rank;
    int pp, pp_rank, virtual_stages;
    int *layer_first;         // (n_layer): index of the layer's first entry, -1 when not held
    int wte, wpe, lnfw, lnfb; // entry indices, -1 when not held (llama: no wpe, no lnfb)
    int wte_is_copy;          // this rank's wte is the last stage's tied copy (pp > 1)
    int lm_head;              // the untied LM head (llama, tie_embeddings false; last stage),
                              // else -1
    int tied;                 // the LM head reads wte
    int wte_shared;       // the tied wte lives on two pipeline stages (the first, and the last as
                          // wte_is_copy): the embedding group sums its gradient. Not under the V
                          // placement, whose rank 0 holds both ends
    int vplace;           // model_shard's: the V placement of zbv
    size_t local_numel;   // elements in this rank's parameter buffer
    int64_t global_numel; // elements of the whole model, padding included
} param_table;

// What params_build would make of (mc, sh), in closed form and 64-bit checked arithmetic,
// without building anything: how a caller (the config's size rules) bounds a table before
// asking for it. Assumes the shapes the config's rules ensure (tp divides the split
// dimensions, pp * virtual_stages divides n_layer).
typedef struct {
    int64_t entries;      // table entries (n_entries)
    int64_t layers;       // transformer layers held
    int64_t local_numel;  // elements of the shard (local_numel)
    int64_t global_numel; // elements of the whole model, padding included (global_numel)
} params_size;
// 0, or -1 when a count passes INT64_MAX (*out is then partial).
int params_size_of(const model_config *mc, const model_shard *sh, params_size *out);

// Builds the table of the model `mc` as the shard `sh` holds it. Its sizes must fit
// (params_size_of: entries at most INT_MAX), else this asserts.
void params_build(param_table *pt, const model_config *mc, const model_shard *sh);
// The whole model in one table (tp = 1, every layer): the layout of exports, with the
// vocabulary padded as a run on vocab_tp ranks pads it (model_padded_vocab).
void params_build_full(param_table *pt, const model_config *mc, int vocab_tp);
void params_free(param_table *pt);

// First global layer of chunk `chunk` of pipeline rank `pp_rank` (DESIGN.md layer placement:
// layers [s*Lc, (s+1)*Lc) of virtual stage s = model_shard_stage, Lc = n_layer / (pp * v)),
// and Lc.
int params_chunk_first_layer(const param_table *pt, int chunk);
int params_chunk_layers(const param_table *pt);

// Entry indices of named parameters.
int params_wte(const param_table *pt);
int params_wpe(const param_table *pt);
int params_layer(const param_table *pt, int layer, int which); // which: PARAM_LN1W..
int params_lnfw(const param_table *pt);
int params_lnfb(const param_table *pt);
// The weight the LM head multiplies by: lm_head when untied, else wte.
int params_head(const param_table *pt);
int params_find(const param_table *pt, const char *name); // -1 when absent

// Mixed precision (model.c) widens each entry's bf16 parameters into an fp32 staging buffer
// when an op reads them, and accumulates bf16 gradients in one: a layer's entries share one
// region (one layer is computed at a time), the embeddings and the final LayerNorm have a
// region each (the embedding and the LM head read two at once). With matmul_weights 0 the
// layers' four matmul weights are left out (the bf16 matmuls read them as they are; their
// off[] is SIZE_MAX). Fills off[entry] (when not NULL) and returns the buffer's elements.
size_t params_stage_layout(const param_table *pt, size_t *off, int matmul_weights);

// Global row-major element index of local element (r, c) of entry e on this rank.
int64_t params_global_index(const param_table *pt, const param_entry *e, int64_t r, int64_t c);

// Initial value of global element `index` of parameter `name`: a pure function of
// (seed, name, index), so that every layout starts from the same global model and each
// rank initialises only its own shard.
float params_init_value(uint64_t seed, const param_entry *e, int64_t global_index);

// Fills host buffer `local` (pt->local_numel floats) with this rank's initial values.
void params_init_host(const param_table *pt, uint64_t seed, float *local);

// Copies this rank's shard of entry e out of a full global tensor (row-major, global
// shape), or scatters the local shard into it (used by llm.c import and export).
void params_slice_from_global(const param_table *pt, const param_entry *e, const float *global,
                              float *local);
void params_place_into_global(const param_table *pt, const param_entry *e, const float *local,
                              float *global);

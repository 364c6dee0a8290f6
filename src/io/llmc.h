// llmc.h: llm.c GPT-2 model files (DESIGN.md "Files"), import and export.
#pragma once
#include "base/common.h"
#include "config/config.h"
#include "model/params.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION_FP32 3
#define LLMC_VERSION_BF16 5

typedef struct {
    int version, maxT, V, L, NH, C, Vp;
    float *data; // every tensor as fp32, back to back in llm.c's order
    size_t numel;
} llmc_model;

// Reads a version 3 (fp32) or 5 (bf16) file. Errors name the file and the problem and
// return TRI_ERR_CKPT.
tri_status llmc_read(const char *path, llmc_model *out);
void llmc_free(llmc_model *f);

// Checks the file's shape against the config; a difference names both values and the key.
tri_status llmc_check_config(const llmc_model *f, const run_config *cfg, const char *path);

// Sets the model keys of cfg (n_layer, n_head, d_model, seq_len, vocab_size) from the file.
void llmc_config_from_file(const llmc_model *f, run_config *cfg);

// Copies this rank's shard of every parameter out of the file into `local` (host,
// pt->local_numel floats). Padded vocabulary rows are zero whatever the file's Vp.
void llmc_load_params(const llmc_model *f, const param_table *pt, float *local);

// The llm.c file image (in memory) of the model whose full (tp = 1) parameters are `global`.
void llmc_from_params(llmc_model *out, const param_table *pt, const float *global, int maxT, int V,
                      int NH);

// Writes the model whose full (tp = 1) parameters are `global` (laid out by the tp = 1
// table `pt`) as an llm.c fp32 file. Written to PATH.tmp and renamed.
tri_status llmc_write(const char *path, const param_table *pt, const float *global, int maxT, int V,
                      int NH);

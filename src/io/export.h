// export.h: loading a trained model from a run directory or model file, and writing it
// as an llm.c model file or as Hugging Face GPT-2 safetensors.
#pragma once
#include "base/common.h"
#include "io/llmc.h"

// Resolves RUN_OR_FILE: a checkpoint directory (step_N, or a checkpoint.dir: its newest
// checkpoint), a run directory (its model.bin) or an llm.c model file. Reads it.
tri_status export_load(const char *run_or_file, llmc_model *out, char *path_out, size_t path_n);

tri_status export_llmc(const llmc_model *f, const char *out_path);

// Hugging Face GPT-2 names and layouts (Conv1D weights stored (in, out)), fp32, the
// vocabulary unpadded, so that transformers' GPT2LMHeadModel loads it.
tri_status export_safetensors(const llmc_model *f, const char *out_path);

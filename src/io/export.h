// export.h: a trained model read out of a run directory, a checkpoint, an llm.c model file or
// a Hugging Face model directory tensor by tensor (export_source), and written as an llm.c model file, as Hugging Face
// GPT-2 safetensors, or as a Hugging Face model directory. A conversion holds one tensor at a time (the largest: wte, Vp x C), never
// the whole model (DESIGN.md's scale rule).
#pragma once
#include "base/common.h"
#include "io/checkpoint.h"
#include "io/hf_import.h"
#include "io/llmc.h"

typedef struct {
    char path[4096];        // what is read: the llm.c file, checkpoint or Hugging Face directory
    run_config cfg;         // config_defaults() with the source's model keys
    param_table full;       // the whole model (tp = 1), its vocabulary padded as the source's
    llmc_file lf;           // an llm.c file source (lf.fd >= 0), or
    ckpt_model_reader *ckr; // a checkpoint, or
    int hf;                 // a Hugging Face model directory:
    hf_config hf_cfg;       //   its config.json (what an hf export writes back)
    st_model hf_model;      //   its safetensors, read an entry at a time (hf_read_entry)
} export_source;

// Resolves RUN_OR_FILE: a checkpoint directory (step_N, or a checkpoint.dir: its newest
// checkpoint), a Hugging Face model directory (config.json + model.safetensors or the sharded
// index), a run directory (its model.bin) or an llm.c model file, and opens it. Errors name
// the file (TRI_ERR_CKPT); a Hugging Face config.json trident refuses, as model.init_from does,
// names the key (TRI_ERR_CONFIG). A Hugging Face source's cfg is config.json's model keys over
// the defaults (hf_config_sets); its seq_len is the model's positions for GPT-2 (the whole wpe)
// and at most EXPORT_HF_WINDOW of them for a Llama (no table depends on it: it is the sample's
// window, and its export writes config.json's own max_position_embeddings back); its
// data.tokenizer is DIR/tokenizer.json when there is one.
#define EXPORT_HF_WINDOW 1024
tri_status export_open(export_source *s, const char *run_or_file);
// Entry i of s->full, whole (local_numel floats, row-major). A non-finite value is
// TRI_ERR_CKPT naming the tensor and the element.
tri_status export_read_entry(export_source *s, int i, float *dst);
void export_close(export_source *s);

// `trident export`: SOURCE as an llm.c fp32 model file, or as Hugging Face GPT-2 names and
// layouts (Conv1D weights stored (in, out)), fp32, the vocabulary unpadded, so that
// transformers' GPT2LMHeadModel loads it. Written to OUT.tmp and renamed.
tri_status export_llmc(export_source *s, const char *out_path);
tri_status export_safetensors(export_source *s, const char *out_path);
// A Hugging Face model directory (hf_export.c): config.json, generation_config.json,
// model.safetensors or, past max_shard_bytes, model-0000K-of-0000N.safetensors shards and
// model.safetensors.index.json, and the run's tokenizer.json with a tokenizer_config.json when
// `source` recorded one (data.tokenizer). Each file is written to NAME.tmp and renamed.
#define EXPORT_HF_SHARD_BYTES ((uint64_t)5000000000) // transformers' default, "5GB"
tri_status export_hf(export_source *s, const char *source, const char *dir,
                     uint64_t max_shard_bytes);
// Opens SOURCE, converts it to `format` ("llmc", "safetensors" or "hf"; max_shard_bytes for
// hf) and says so on stdout.
tri_status export_run(const char *run_or_file, const char *format, const char *out_path,
                      uint64_t max_shard_bytes);

// hf_config.h: a Hugging Face model directory's config.json (GPT2LMHeadModel and
// LlamaForCausalLM), read into the model keys it implies and written back out on export.
//
// model.init_from naming a directory with config.json makes config.json the source of the
// architecture: hf_config_load applies its model keys over the YAML's defaults, says once which
// it changed, and refuses (exit 2, both values named) one the YAML or a --set gave otherwise.
// What trident cannot compute as HF does is refused with the config.json key named (exit 2):
// rope_scaling, attention_bias / mlp_bias, sliding_window, another activation, a head_dim that
// is not hidden_size / num_attention_heads, an untied GPT-2, GPT-2's n_inner != 4 * n_embd.
#pragma once
#include "base/common.h"
#include "config/config.h"

typedef struct {
    int llama; // LlamaForCausalLM; else GPT2LMHeadModel
    int n_layer, n_head, n_kv_head, d_model;
    int max_pos;    // n_positions / max_position_embeddings: seq_len may be at most this
    int vocab_size; // HF's, unpadded
    int ffn_hidden; // llama: intermediate_size (gpt2: 4 * d_model)
    int tie;        // tie_word_embeddings
    double rope_theta, norm_eps;
    int bos_id, eos_id; // -1 when config.json has none
} hf_config;

// Whether `path` is a directory holding config.json.
int hf_is_model_dir(const char *path);

// config.json's text (path names it in messages) into h. A malformed file or a missing or
// mistyped key: TRI_ERR_CKPT naming the file and the key; a value trident refuses (above):
// TRI_ERR_CONFIG naming the key and the value.
tri_status hf_config_parse(hf_config *h, const char *path, const char *text, size_t n);
// DIR/config.json, read and parsed (at most 1 MiB).
tri_status hf_config_read(hf_config *h, const char *dir);

// The model keys h implies, as --set overrides ("model.n_layer=12"), into sets[max][96];
// returns their count.
#define HF_SETS_MAX 16
int hf_config_sets(const hf_config *h, char sets[][96], int max);

// config_load (config.h), then, when model.init_from is a Hugging Face directory, config.json's
// model keys applied as above and the whole config checked again with them (a refusal there
// names config.json too: its keys reach config_load as --set lines). A model.seq_len beyond
// config.json's positions is refused (exit 2).
tri_status hf_config_load(run_config *cfg, const char *path, int n_set, char **sets);

// config.json and generation_config.json of the model `h` into dir (exit 4 named on failure).
tri_status hf_config_write(const char *dir, const hf_config *h);

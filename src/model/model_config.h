// model_config.h: the model's shape (the YAML's `model` section, config.h's run_config.model)
// and which part of it one rank holds. The model layer reads nothing else of the run config:
// the config layer above composes these (config.h), so the model can be built and tested
// without a YAML file.
#pragma once
#include <string.h>

#include "base/common.h"

// The keys that 0 or -1 leave to a rule hold their resolved values by the time the model sees
// them (config_resolve_model, at config_load): n_kv_head >= 1, ffn_hidden >= 1,
// tie_embeddings 0 or 1.
typedef struct {
    char *arch; // "gpt2" or "llama"
    int n_layer, n_head, d_model, seq_len;
    int vocab_size, vocab_pad_to;
    char *init_from;     // llm.c model file or NULL: read by the caller (io/llmc.h), not here
    int n_kv_head;       // key/value heads (grouped-query attention); gpt2: n_head
    int ffn_hidden;      // the MLP's hidden width F; gpt2: 4 * d_model
    int ffn_multiple_of; // the Llama rule's rounding of F (model_llama_ffn_rule)
    int tie_embeddings;  // the LM head reads wte (gpt2: always); llama: else its own lm_head
    double rope_theta;   // RoPE's base (llama)
    double norm_eps;     // RMSNorm's eps (llama); gpt2's LayerNorm has its fixed 1e-5
} model_config;

static inline int model_arch_is_llama(const model_config *mc) {
    return mc->arch && !strcmp(mc->arch, "llama");
}

// The Llama rule for the SwiGLU width of d_model C: floor(2 * 4C / 3), rounded up to a multiple
// of `multiple_of` (Meta's reference code and Hugging Face's configs). In long long: it may
// pass an int for d_model values an int holds (the config's rules refuse those).
static inline long long model_llama_ffn_rule(long long C, long long multiple_of) {
    const long long h = 2 * (4 * C) / 3;
    return (h + multiple_of - 1) / multiple_of * multiple_of;
}

// The part of the model a rank holds (DESIGN.md "Layer placement"): tp rank `tp_rank` of `tp`
// of the layers of pipeline rank `pp_rank` of `pp`, in `virtual_stages` chunks. vplace: the V
// placement of schedule zbv (virtual_stages 2): chunk 0 of rank r is virtual stage r, chunk 1
// virtual stage 2pp-1-r, so the embedding and the loss are both on rank 0.
typedef struct {
    int tp, tp_rank;
    int pp, pp_rank;
    int virtual_stages;
    int vplace;
} model_shard;

// Virtual stage of chunk `chunk` of the shard's pipeline rank, 0 .. pp*v-1: chunk*pp + rank,
// or under the V placement rank (chunk 0) and 2pp-1-rank (chunk 1).
static inline int model_shard_stage(const model_shard *sh, int chunk) {
    if (sh->pp == 1) return chunk;
    return sh->vplace && chunk == 1 ? 2 * sh->pp - 1 - sh->pp_rank : chunk * sh->pp + sh->pp_rank;
}
// Whether the shard holds the embeddings (virtual stage 0) / the final norm, the LM head and
// the loss (the last virtual stage).
static inline int model_shard_first(const model_shard *sh) { return sh->pp_rank == 0; }
static inline int model_shard_last(const model_shard *sh) {
    return sh->vplace ? sh->pp_rank == 0 : sh->pp_rank == sh->pp - 1;
}

// The vocabulary padded to a multiple of vocab_pad_to * tp (DESIGN.md "Model"), in long long:
// the product and the rounded size can pass INT_MAX for valid int keys (the config's rule
// refuses those), and as the int the model uses.
static inline long long model_padded_vocab_ll(const model_config *mc, int tp) {
    long long mult = (long long)mc->vocab_pad_to * tp;
    return (mc->vocab_size + mult - 1) / mult * mult;
}
static inline int model_padded_vocab(const model_config *mc, int tp) {
    return (int)model_padded_vocab_ll(mc, tp);
}

// model_config.h: the model's shape (the YAML's `model` section, config.h's run_config.model)
// and which part of it one rank holds. The model layer reads nothing else of the run config:
// the config layer above composes these (config.h), so the model can be built and tested
// without a YAML file.
#pragma once
#include "base/common.h"

typedef struct {
    char *arch; // "gpt2"
    int n_layer, n_head, d_model, seq_len;
    int vocab_size, vocab_pad_to;
    char *init_from; // llm.c model file or NULL: read by the caller (io/llmc.h), not here
} model_config;

// The part of the model a rank holds (DESIGN.md "Layer placement"): tp rank `tp_rank` of `tp`
// of the layers of pipeline rank `pp_rank` of `pp`, in `virtual_stages` chunks.
typedef struct {
    int tp, tp_rank;
    int pp, pp_rank;
    int virtual_stages;
} model_shard;

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

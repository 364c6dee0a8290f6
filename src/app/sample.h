// sample.h: text generation from a trained model.
#pragma once
#include "base/common.h"

typedef struct {
    const char *run_or_file; // run directory (its model.bin) or llm.c model file
    const char *prompt;      // text: encoded by the tokenizer, or as bytes (vocabulary 256)
    const char *tokenizer;   // tokenizer.json; NULL: the run's data.tokenizer, if recorded
    int tokens;              // tokens to generate
    double temperature;      // 0: greedy
    uint64_t seed;
    int threads;
} sample_options;

// With a tokenizer (opt->tokenizer, or the data.tokenizer recorded with the run), the prompt
// is encoded after the end-of-text token that starts every training document, and the
// generated tokens are decoded; without one, a model of vocabulary 256 reads and writes
// bytes, any other writes token ids and refuses a prompt (exit 2).
tri_status sample_run(const sample_options *opt);

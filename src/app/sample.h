// sample.h: text generation from a trained model.
#pragma once
#include "base/common.h"

typedef struct {
    const char *run_or_file; // run directory (its model.bin) or llm.c model file
    const char *prompt;      // text; byte-level tokens when the vocabulary is 256
    int tokens;              // tokens to generate
    double temperature;      // 0: greedy
    uint64_t seed;
    int threads;
} sample_options;

tri_status sample_run(const sample_options *opt);

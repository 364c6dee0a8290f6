// tokenize.h: `trident tokenize`: text and JSON-lines files into llm.c token shards with a
// Hugging Face byte-level BPE tokenizer (io/tokenizer.h).
#pragma once
#include "app/cli.h"
#include "base/common.h"

typedef struct {
    const char *tokenizer; // tokenizer.json
    const char *out;       // PREFIX: PREFIX_train_000.bin, ..., PREFIX_val_000.bin
    const char *eot;       // the end-of-text token's text; NULL: tokenizer_default_eot
    double val_fraction;   // the last part of the input (by bytes) that goes to val shards
    int64_t shard_tokens;  // tokens per shard (the last one of each split holds the rest)
    int threads;           // 0: every core
    const char *const *inputs;
    int n_inputs;
} tokenize_options;

// Exit codes: 2 usage, tokenizer.json, --eot, shards already there; 3 an input file (unreadable,
// invalid UTF-8, a JSON line that is not an object with a "text" string); 4 an output shard.
tri_status tokenize_run(const tokenize_options *opt);

// `trident tokenize ARGS...`: parses the arguments (TOKENIZE_CLI: its options and --help)
// and runs.
int tokenize_main(int argc, char **argv);
extern const cli_command TOKENIZE_CLI;

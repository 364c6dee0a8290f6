// train.h: the training loop of DESIGN.md "How one step flows", and evaluation.
#pragma once
#include "common.h"
#include "config.h"

// Trains per cfg (resolved for a world of one in this build). Writes metrics.jsonl and the
// final model as <out_dir>/model.bin (llm.c format).
tri_status train_run(run_config *cfg);

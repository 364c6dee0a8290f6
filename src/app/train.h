// train.h: the training loop of DESIGN.md "How one step flows", and evaluation.
#pragma once
#include "base/common.h"
#include "config/config.h"

#include "comm/launch.h"

// Trains per cfg on the processes `li` describes (a world of one, or every rank of an
// srun/mpirun job). Resolves the world, creates the comm backend of the mesh, trains;
// rank 0 writes metrics.jsonl and the final model as <out_dir>/model.bin (llm.c format).
tri_status train_run(run_config *cfg, launch_info *li);

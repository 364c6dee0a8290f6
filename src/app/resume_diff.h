// resume_diff.h: before a resume loads anything, the differences between the config the
// checkpoint recorded and this run's (config/config_resume.h), printed each with what it does,
// and the decision (README "Checkpoints and resume", "Resuming"):
//   - free differences (layout, steps, evaluation, logging, checkpoints, system): the run
//     goes on, each listed as "resume: KEY FROM -> TO: EFFECT";
//   - guarded ones (model hyper-parameters, optimizer, global batch, data, precision, seed):
//     refused with exit 2, every one listed, unless checkpoint.resume_changes: allow, which
//     lists each as a warning and goes on;
//   - fixed ones (the model's shape: the checkpoint's tensors cannot fit): refused with exit
//     4 whatever checkpoint.resume_changes says.
// The list goes into the run record (metrics.jsonl's first line) as "resume_changes".
#pragma once
#include "comm/comm.h"
#include "config/config.h"

// Collective over the world (cm is not used when world is 1): every rank reads the
// checkpoint's manifest and decides alike (the worst status over the ranks is returned by
// all); rank 0 prints. TRI_OK, TRI_ERR_CONFIG (guarded changes refused), TRI_ERR_CKPT (a fixed
// change, or a damaged manifest). On TRI_OK *record_json (malloc'd) is the run record's
// fragment `,"resume_changes":[...]`.
tri_status resume_check(const char *ckpt, const run_config *cfg, comm *cm, int world,
                        char **record_json);

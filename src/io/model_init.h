// model_init.h: where a run's initial parameters come from, entry by entry (the ZeRO layer's
// zero_init_fn): model.init_from (an llm.c model file or a Hugging Face model directory, of
// which each rank reads only the values its shard holds) or, without it, run.seed (params.h's counter-based initialisation,
// a pure function of the seed and each element's global index).
#pragma once
#include "comm/comm.h"
#include "config/config.h"
#include "io/hf_import.h"
#include "io/llmc.h"
#include "model/params.h"

typedef struct {
    const run_config *cfg;
    const param_table *pt; // the rank's table
    llmc_file file;        // model.init_from, open (file.fd >= 0)
    int hf;                // model.init_from is a Hugging Face directory (io/hf_import.h)
    hf_config hf_cfg;      // its config.json
    st_model hf_model;     // its safetensors
} model_init;

// Opens model.init_from when it is set and checks its header against the config; a rank
// that cannot names the file and the problem. TRI_ERR_CKPT when it does not fit.
tri_status model_init_open(model_init *mi, const run_config *cfg, const param_table *pt);
// zero_init_fn: entry i as this rank holds it (local_numel floats) into dst. A non-finite
// value of the file is TRI_ERR_CKPT, named (the tensor and the element) by this rank.
tri_status model_init_entry(void *mi, int i, float *dst);
void model_init_close(model_init *mi);

// Every rank's status, agreed over the world of `cm` (collective; the worst code): the
// ranks read different parts of a model file, and each must learn what another found.
tri_status model_init_agree(comm *cm, tri_status rc);

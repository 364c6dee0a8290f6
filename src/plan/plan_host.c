// plan_host.c: host memory a rank allocates outside its arenas (plan.h), at the two moments it
// peaks, from the sizes the allocating code uses:
//   start-up (parallel/zero.c load_params): the initial parameters go into the ZeRO layer's
//     buffers entry by entry through one host buffer as large as the rank's largest entry
//     (fp32) and, under bf16, its rounding (2 bytes a value); while an entry is read,
//     model.init_from's reader adds its staging (llmc_read_stage_bytes for an llm.c file,
//     hf_read_stage_bytes for a Hugging Face directory);
//   the final save (app/train.c save_model), where model.bin is written (llmc_save_wanted):
//     a piece of the model and its staging (two of model_save_piece_elems fp32), and under
//     bf16 the ZeRO layer's bf16 copy of what it widens (zero.c params_to_host: a piece).
// Not counted: the runtime (libraries, the CPU backend's threads, MPI), the token shards'
// mapped pages, a resume's reading and the checkpoint writer's host image (io/checkpoint.c).
#include "model/model.h"
#include "io/hf_import.h"
#include "io/llmc.h"
#include "plan/plan.h"

uint64_t plan_host_startup_bytes(const run_config *cfg, const param_table *pt) {
    // Every ZeRO stage goes entry by entry (at ZeRO-3 an entry's piece is cut from it).
    uint64_t most = 1;
    for (int i = 0; i < pt->n_entries; i++)
        most = (uint64_t)pt->entries[i].local_numel > most ? (uint64_t)pt->entries[i].local_numel
                                                           : most;
    uint64_t bytes = most * sizeof(float);
    if (cfg->train.precision == DTYPE_BF16) bytes += most * sizeof(uint16_t);
    if (cfg->model.init_from)
        bytes += hf_is_model_dir(cfg->model.init_from) ? hf_read_stage_bytes(pt)
                                                       : llmc_read_stage_bytes(pt);
    return bytes;
}

uint64_t plan_host_save_bytes(const run_config *cfg, const param_table *pt, size_t piece_elems) {
    if (!llmc_save_wanted(pt, cfg)) return 0;
    uint64_t bytes = 2 * (uint64_t)piece_elems * sizeof(float);
    if (cfg->train.precision == DTYPE_BF16) bytes += (uint64_t)piece_elems * sizeof(uint16_t) + 1;
    return bytes;
}

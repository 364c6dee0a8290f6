// ref_dump: writes what tests/ref_gpt2.py compares against an independent PyTorch GPT-2.
//   ref_dump CONFIG OUTDIR [STEPS]
// OUTDIR/init.bin    the initial model (llm.c file; GPT-2 only: llm.c's format has no Llama)
// OUTDIR/grads.bin   the gradients of optimizer step 0 (all micro-batches), as an llm.c
//                    file laid out like the parameters (GPT-2 only)
// OUTDIR/logits.bin  float32 (micro_batch * T, Vp) logits of micro-batch 0 of step 0
// OUTDIR/loss.txt    the mean loss of step 0
// OUTDIR/tokens.bin  int32 inputs then targets (global_batch, T) of each of STEPS steps
#include <stdio.h>
#include <string.h>

#include "compute/backend.h"
#include "comm/comm.h"
#include "config/config.h"
#include "io/data_order.h"
#include "io/hf_config.h"
#include "io/llmc.h"
#include "io/model_init.h"
#include "config/config_layout.h"
#include "model/model.h"
#include "parallel/zero.h"

static int write_file(const char *dir, const char *name, const void *data, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "ref_dump: cannot write %s\n", path);
        return 1;
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    backend_cpu_prepare_process(argv, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: ref_dump CONFIG OUTDIR [STEPS]\n");
        return 2;
    }
    log_init();
    const char *dir = argv[2];
    const int steps = argc > 3 ? atoi(argv[3]) : 10;
    run_config cfg;
    config_defaults(&cfg);
    if (hf_config_load(&cfg, argv[1], 0, NULL) || config_resolve_world(&cfg, 1)) return 2;
    const int B = cfg.train.micro_batch, T = cfg.model.seq_len, GB = cfg.train.global_batch;
    const int n_micro = config_micro_batches(&cfg);
    backend *be;
    comm *cm;
    model m;
    zero_state *z;
    data_order ds; // the trainer's order of data.train (tests/configs/ref.yaml: plain)
    if (backend_cpu_create(&be, cfg.system.threads) || comm_self_create(&cm, NULL)) return 1;
    // One process, fp32: the model and a ZeRO layer of one replica holding its parameters
    // (from model.init_from or run.seed, as a run starts) and gradients.
    const model_layout ml = config_model_layout(&cfg, 0, 0, 1, backend_traits_of(be));
    if (model_create(&m, &cfg.model, &ml, be, cm, NULL)) return 1;
    size_t bytes = m.table.local_numel * sizeof(float);
    float *host = xmalloc(bytes);
    model_init mi;
    if (model_init_open(&mi, &cfg, &m.table)) return 1;
    const zero_config zc = config_zero_config(&cfg, 0);
    if (zero_create(&z, &zc, &m, model_init_entry, &mi, be, cm, NULL) ||
        data_order_open(&ds, &cfg.data.train, cfg.data.shuffle, cfg.run.seed, T,
                        cfg.model.vocab_size, GB))
        return 1;
    model_init_close(&mi);
    if (zero_local_params(z, host)) return 1; // the initial model as the run holds it
    char path[4096];
    const int llmc = !model_arch_is_llama(&cfg.model);
    snprintf(path, sizeof path, "%s/init.bin", dir);
    if (llmc && llmc_write(path, &m.table, host, T, m.d.V, m.d.NH)) return 1;

    int *inputs = xmalloc((size_t)B * T * sizeof(int)),
        *targets = xmalloc((size_t)B * T * sizeof(int));
    double loss_sum = 0.0;
    for (int micro = 0; micro < n_micro; micro++) {
        data_order_batch(&ds, 0, (int)data_micro_batch_start(0, GB, 1, 0, micro, B), B, inputs,
                         targets);
        if (model_forward(&m, 0, 0, inputs, targets)) return 1;
        loss_sum += model_take_loss(&m);
        if (micro == 0) {
            size_t lbytes = (size_t)B * T * m.d.Vp_local * sizeof(float);
            float *logits = xmalloc(lbytes);
            be->copy_to_host(be, logits, m.slots[0].logits, lbytes);
            if (write_file(dir, "logits.bin", logits, lbytes)) return 1;
            free(logits);
        }
        if (model_backward(&m, 0, 0, (float)(1.0 / ((double)GB * T)))) return 1;
    }
    be->copy_to_host(be, host, zero_full_grads(z), bytes);
    snprintf(path, sizeof path, "%s/grads.bin", dir);
    if (llmc && llmc_write(path, &m.table, host, T, m.d.V, m.d.NH)) return 1;
    char loss_text[64];
    int n = snprintf(loss_text, sizeof loss_text, "%.9g\n", loss_sum / ((double)GB * T));
    if (write_file(dir, "loss.txt", loss_text, (size_t)n)) return 1;

    size_t per_step = (size_t)GB * T;
    int *tokens = xmalloc(2 * per_step * (size_t)steps * sizeof(int));
    for (int s = 0; s < steps; s++) {
        int *in = tokens + 2 * per_step * s, *tg = in + per_step;
        data_order_batch(&ds, s, 0, GB, in, tg);
    }
    if (write_file(dir, "tokens.bin", tokens, 2 * per_step * (size_t)steps * sizeof(int))) return 1;
    printf("ref_dump: wrote %s (loss %.6f)\n", dir, loss_sum / ((double)GB * T));
    free(tokens), free(inputs), free(targets), free(host);
    data_order_close(&ds);
    zero_free(z);
    model_free(&m);
    be->destroy(be);
    comm_destroy(cm);
    config_free(&cfg);
    return 0;
}

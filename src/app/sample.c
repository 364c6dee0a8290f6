// sample.c: autoregressive sampling with the training model's forward pass. The context
// is the last seq_len tokens; each new token reruns the forward over the window (no KV
// cache: sampling is a check of a trained run, not a serving path).
#include "app/sample.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "compute/backend.h"
#include "comm/comm.h"
#include "config/config.h"
#include "io/export.h"
#include "io/json.h"
#include "io/run_record.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "parallel/zero.h"

static uint64_t rng_next(uint64_t *state) { // splitmix64
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int pick_token(const float *logits, int V, double temperature, uint64_t *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((logits[i] - logits[best]) / temperature);
    double u = (double)(rng_next(rng) >> 11) / 9007199254740992.0 * sum, acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += exp((logits[i] - logits[best]) / temperature);
        if (u < acc) return i;
    }
    return best;
}

// Writes a generated token: its bytes (tokenizer), the byte itself (byte-level model) or
// <id>. Returns 0 when the tokenizer has no token of that id (nothing is written).
static int emit(int token, int byte_level, const tokenizer *tk) {
    int known = 1;
    if (tk) {
        size_t len;
        const uint8_t *bytes = tokenizer_decode(tk, (uint32_t)token, &len);
        if (bytes) fwrite(bytes, 1, len, stdout);
        known = bytes != NULL;
    } else if (byte_level) {
        putchar(token);
    } else {
        printf("<%d>", token);
    }
    fflush(stdout);
    return known;
}

// The tokenizer to use: --tokenizer, else the source's own (a Hugging Face directory's
// tokenizer.json: export_open's data.tokenizer), else the one recorded with the run
// (data.tokenizer). *tk stays NULL when there is none.
static tri_status open_tokenizer(const sample_options *opt, const export_source *src,
                                 tokenizer **tk) {
    *tk = NULL;
    char recorded[4096];
    const char *path = opt->tokenizer ? opt->tokenizer : src->cfg.data.tokenizer;
    if (!path &&
        run_record_config_string(opt->run_or_file, "data", "tokenizer", recorded, sizeof recorded))
        path = recorded;
    if (!path) return TRI_OK;
    tri_status rc = tokenizer_load(path, tk);
    if (rc != TRI_OK && !opt->tokenizer)
        LOG_HINT("%s is the %s; pass --tokenizer FILE to use another", path,
                 src->hf ? "model directory's tokenizer" : "run's data.tokenizer");
    return rc;
}

// The context a sample starts from: [end of text] + the prompt's ids (the last T of them).
static tri_status encode_prompt(const tokenizer *tk, const char *prompt, int V, tok_ids *ids) {
    size_t bad;
    if (!json_utf8_valid((const uint8_t *)prompt, strlen(prompt), &bad)) {
        LOG_ERROR("sample: --prompt is not valid UTF-8 (byte %zu)", bad);
        LOG_HINT("pass the prompt as UTF-8 text");
        return TRI_ERR_CONFIG;
    }
    int64_t eot = tokenizer_default_eot(tk);
    if (eot >= 0) tok_ids_push(ids, (uint32_t)eot);
    tok_encoder *enc = tok_encoder_new(tk);
    tok_encode(enc, prompt, strlen(prompt), ids);
    tok_encoder_free(enc);
    if (ids->n == 0) tok_ids_push(ids, 0);
    for (size_t i = 0; i < ids->n; i++) {
        if (ids->ids[i] >= (uint32_t)V) {
            LOG_ERROR("sample: the tokenizer gives token id %u, outside the model's vocabulary "
                      "of %d",
                      ids->ids[i], V);
            LOG_HINT("use the tokenizer the model was trained with (--tokenizer FILE)");
            return TRI_ERR_CONFIG;
        }
    }
    return TRI_OK;
}

// Refuses a model whose sampling would not fit this machine's memory (a crafted or odd file
// can be small on disk yet ask for a large model: attention keeps NH x seq_len^2 floats per
// layer): its buffers (the same specs the model and its ZeRO store carve).
static tri_status check_fits(const export_source *src, const model_layout *ml,
                             const zero_config *zc) {
    mem_specs specs = {0};
    zero_layout zl;
    zero_layout_build(&zl, zc, &src->full);
    model_buffers(&specs, &src->cfg.model, ml, &src->full, NULL);
    zero_buffers(&specs, zc, &zl, &src->full, NULL);
    uint64_t kinds[MEM_KIND_COUNT], need = 0;
    mem_specs_totals(&specs, kinds);
    for (int k = 0; k < MEM_KIND_COUNT; k++) need += kinds[k];
    mem_specs_free(&specs);
    zero_layout_free(&zl);
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have <= 0 || (double)need <= have) return TRI_OK;
    LOG_ERROR("%s: sampling this model (seq_len %d, d_model %d, %d layers, %d heads) needs %.2f "
              "GB of memory, more than this machine's %.2f GB",
              src->path, src->cfg.model.seq_len, src->cfg.model.d_model, src->cfg.model.n_layer,
              src->cfg.model.n_head, need / 1e9, have / 1e9);
    LOG_HINT("sample on a machine with more memory; check that the file is the model you meant");
    return TRI_ERR_CKPT;
}

// zero_init_fn: the model's parameters, tensor by tensor, out of the file or checkpoint.
static tri_status read_entry(void *src, int i, float *dst) {
    return export_read_entry(src, i, dst);
}

tri_status sample_run(const sample_options *opt) {
    export_source src;
    TRI_CHECK(export_open(&src, opt->run_or_file));
    const run_config *cfg = &src.cfg;
    const int T = cfg->model.seq_len, V = cfg->model.vocab_size;
    const int byte_level = V == 256;
    const char *prompt = opt->prompt ? opt->prompt : "";
    tokenizer *tk = NULL;
    tok_ids prompt_ids = {0};
    tri_status rc = open_tokenizer(opt, &src, &tk);
    if (rc == TRI_OK && tk) rc = encode_prompt(tk, prompt, V, &prompt_ids);
    if (rc == TRI_OK && !tk && !byte_level && *prompt) {
        LOG_ERROR("sample: the model's vocabulary (%d) is not byte-level and no tokenizer is "
                  "known, so the prompt cannot be encoded",
                  V);
        LOG_HINT("pass --tokenizer tokenizer.json (or set data.tokenizer in the run's config)");
        rc = TRI_ERR_CONFIG;
    }
    if (rc != TRI_OK) {
        tok_ids_free(&prompt_ids);
        tokenizer_free(tk);
        export_close(&src);
        return rc;
    }

    backend *be = NULL;
    comm *cm = NULL;
    model m;
    memset(&m, 0, sizeof m);
    zero_state *store = NULL;
    TRI_CHECK_GOTO(comm_self_create(&cm, NULL), rc, done);
    TRI_CHECK_GOTO(backend_cpu_create(&be, opt->threads), rc, done);
    // One process, one micro-batch of one sequence, fp32: the model, and a ZeRO layer of one
    // replica holding the file's (or checkpoint's) parameters. The source's table (tp = 1,
    // padded as the source) is the model's.
    const model_layout ml = {
        .shard = {.tp = 1, .tp_rank = 0, .pp = 1, .pp_rank = 0, .virtual_stages = 1},
        .micro_batch = 1,
        .n_slots = 1,
        .recompute = RECOMPUTE_NONE,
        .precision = DTYPE_FP32,
        .grad_dtype = DTYPE_FP32,
        .attn_state = be->attn_state};
    const zero_config zc = {.stage = 0,
                            .dp = 1,
                            .dp_rank = 0,
                            .param_dtype = DTYPE_FP32,
                            .grad_dtype = DTYPE_FP32,
                            .reduce_dtype = DTYPE_FP32};
    TRI_CHECK_GOTO(check_fits(&src, &ml, &zc), rc, done);
    TRI_CHECK_GOTO(model_create(&m, &cfg->model, &ml, be, cm, NULL), rc, done);
    TRI_ASSERT(m.table.n_entries == src.full.n_entries &&
               m.table.local_numel == src.full.local_numel);
    TRI_CHECK_GOTO(zero_create(&store, &zc, &m, read_entry, &src, be, cm, NULL), rc, done);

    int *context = xcalloc((size_t)T, sizeof(int));
    float *logits = xmalloc((size_t)m.d.Vp_local * sizeof(float));
    int n = 0, unknown = 0;
    if (tk) {
        size_t skip = prompt_ids.n > (size_t)T ? prompt_ids.n - (size_t)T : 0;
        for (size_t i = skip; i < prompt_ids.n; i++) context[n++] = (int)prompt_ids.ids[i];
    } else if (byte_level) {
        for (const unsigned char *p = (const unsigned char *)prompt; *p; p++) {
            if (n == T) { // keep the last T bytes of a long prompt
                memmove(context, context + 1, (size_t)(T - 1) * sizeof(int));
                n--;
            }
            context[n++] = *p;
        }
    }
    if (n == 0) context[n++] = byte_level ? '\n' : 0;
    if (byte_level || tk) fputs(prompt, stdout);
    uint64_t rng = opt->seed;
    for (int i = 0; i < opt->tokens; i++) {
        TRI_CHECK_GOTO(model_forward(&m, 0, 0, context, NULL), rc, free_buffers);
        model_logits_row(&m, 0, n - 1, logits);
        int token = pick_token(logits, V, opt->temperature, &rng);
        unknown += !emit(token, byte_level, tk);
        if (n == T) {
            memmove(context, context + 1, (size_t)(T - 1) * sizeof(int));
            n--;
        }
        context[n++] = token;
    }
    putchar('\n');
    if (unknown)
        LOG_WARN("sample: %d generated token(s) have ids the tokenizer has no token for (the "
                 "model's vocabulary %d is larger than the tokenizer's %u); nothing was written "
                 "for them",
                 unknown, V, tokenizer_n_ids(tk));
    rc = TRI_OK;
free_buffers:
    free(context);
    free(logits);
done:
    tok_ids_free(&prompt_ids);
    tokenizer_free(tk);
    zero_free(store);
    model_free(&m);
    if (be) be->destroy(be);
    if (cm) comm_destroy(cm);
    export_close(&src);
    return rc;
}

// hf_import.c: see hf_import.h.
#include "io/hf_import.h"

#include <stdlib.h>
#include <string.h>

// GPT-2's per-layer entries (params.c's names) and HF's: (entry, HF suffix, transposed).
static const struct {
    const char *entry, *hf;
    int transpose;
} GPT2_LAYER[] = {
    {"ln1w", "ln_1.weight", 0},
    {"ln1b", "ln_1.bias", 0},
    {"qkvw", "attn.c_attn.weight", 1},
    {"qkvb", "attn.c_attn.bias", 0},
    {"attprojw", "attn.c_proj.weight", 1},
    {"attprojb", "attn.c_proj.bias", 0},
    {"ln2w", "ln_2.weight", 0},
    {"ln2b", "ln_2.bias", 0},
    {"fcw", "mlp.c_fc.weight", 1},
    {"fcb", "mlp.c_fc.bias", 0},
    {"fcprojw", "mlp.c_proj.weight", 1},
    {"fcprojb", "mlp.c_proj.bias", 0},
};

// The Llama contract's per-layer entries with one HF tensor each (qkvw and fcw are row blocks
// of several: hf_map_row).
static const struct {
    const char *entry, *hf;
} LLAMA_LAYER[] = {
    {"ln1w", "input_layernorm.weight"},
    {"attprojw", "self_attn.o_proj.weight"},
    {"ln2w", "post_attention_layernorm.weight"},
    {"fcprojw", "mlp.down_proj.weight"},
};

const char *hf_unprefixed(const char *name) {
    return strncmp(name, "transformer.", 12) ? name : name + 12;
}

// The whole entry is one HF tensor of the same orientation (or its transpose).
static void whole(hf_src *s, const param_entry *e, int64_t row, int transpose) {
    s->row = row, s->count = e->global_rows - row, s->hf_rows = e->global_rows;
    s->transpose = transpose;
}

static int map_gpt2(const hf_config *h, const param_entry *e, int64_t row, hf_src *s) {
    int layer = -1, used = 0;
    if (!strcmp(e->name, "wte")) {
        snprintf(s->name, sizeof s->name, "transformer.wte.weight");
        whole(s, e, row, 0);
        s->hf_rows = h->vocab_size;
        if (row >= h->vocab_size) s->zero = 1;
        else s->count = h->vocab_size - row;
        return 0;
    }
    if (!strcmp(e->name, "wpe")) { // HF may have more positions than the run's seq_len
        snprintf(s->name, sizeof s->name, "transformer.wpe.weight");
        whole(s, e, row, 0);
        s->hf_rows = -1;
        return 0;
    }
    if (!strcmp(e->name, "lnfw") || !strcmp(e->name, "lnfb")) {
        snprintf(s->name, sizeof s->name, "transformer.ln_f.%s",
                 e->name[3] == 'w' ? "weight" : "bias");
        whole(s, e, row, 0);
        return 0;
    }
    if (sscanf(e->name, "h%d.%n", &layer, &used) != 1 || layer < 0) return -1;
    for (size_t k = 0; k < sizeof GPT2_LAYER / sizeof GPT2_LAYER[0]; k++)
        if (!strcmp(e->name + used, GPT2_LAYER[k].entry)) {
            snprintf(s->name, sizeof s->name, "transformer.h.%d.%s", layer, GPT2_LAYER[k].hf);
            whole(s, e, row, GPT2_LAYER[k].transpose);
            return 0;
        }
    return -1;
}

// Rows [row, ...) of a fused entry whose row blocks are the HF tensors `names` of `rows` rows.
static void block(hf_src *s, int64_t row, int layer, const char *const *names, const int64_t *rows,
                  int n) {
    int64_t first = 0;
    int k = 0;
    while (k < n - 1 && row >= first + rows[k]) first += rows[k++];
    snprintf(s->name, sizeof s->name, "model.layers.%d.%s", layer, names[k]);
    s->row = row - first, s->count = rows[k] - s->row, s->hf_rows = rows[k];
}

static int map_llama(const hf_config *h, const param_entry *e, int64_t row, hf_src *s) {
    int layer = -1, used = 0;
    if (!strcmp(e->name, "wte") || !strcmp(e->name, "lm_head")) {
        snprintf(s->name, sizeof s->name, "%s",
                 e->name[0] == 'w' ? "model.embed_tokens.weight" : "lm_head.weight");
        whole(s, e, row, 0);
        s->hf_rows = h->vocab_size;
        if (row >= h->vocab_size) s->zero = 1;
        else s->count = h->vocab_size - row;
        return 0;
    }
    if (!strcmp(e->name, "lnfw")) {
        snprintf(s->name, sizeof s->name, "model.norm.weight");
        whole(s, e, row, 0);
        return 0;
    }
    if (sscanf(e->name, "h%d.%n", &layer, &used) != 1 || layer < 0) return -1;
    const char *what = e->name + used;
    const int64_t hs = h->d_model / h->n_head;
    if (!strcmp(what, "qkvw")) { // rows: q (NH*HS) | k (NKV*HS) | v (NKV*HS)
        static const char *const names[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                            "self_attn.v_proj.weight"};
        const int64_t rows[] = {h->n_head * hs, h->n_kv_head * hs, h->n_kv_head * hs};
        block(s, row, layer, names, rows, 3);
        return 0;
    }
    if (!strcmp(what, "fcw")) { // rows: gate (F) | up (F)
        static const char *const names[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
        const int64_t rows[] = {h->ffn_hidden, h->ffn_hidden};
        block(s, row, layer, names, rows, 2);
        return 0;
    }
    for (size_t k = 0; k < sizeof LLAMA_LAYER / sizeof LLAMA_LAYER[0]; k++)
        if (!strcmp(what, LLAMA_LAYER[k].entry)) {
            snprintf(s->name, sizeof s->name, "model.layers.%d.%s", layer, LLAMA_LAYER[k].hf);
            whole(s, e, row, 0);
            return 0;
        }
    return -1;
}

int hf_map_row(const hf_config *h, const param_entry *e, int64_t row, hf_src *s) {
    memset(s, 0, sizeof *s);
    TRI_ASSERT(row >= 0 && row < e->global_rows);
    return h->llama ? map_llama(h, e, row, s) : map_gpt2(h, e, row, s);
}

size_t hf_read_stage_bytes(const param_table *pt) {
    size_t most = 0;
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        size_t n = ((size_t)e->local_numel + (size_t)e->global_cols) * sizeof(float);
        n = n < HF_IO_BYTES ? n : HF_IO_BYTES;
        most = n > most ? n : most;
    }
    return 2 * most; // the raw values and, for a transpose, the block before it
}

// The tensor of s and its file, its shape checked against what entry e needs.
static tri_status find(const st_model *m, const param_entry *e, const hf_src *s, const st_file **f,
                       const st_tensor **t) {
    *t = st_model_find(m, s->name, f);
    if (!*t && hf_unprefixed(s->name) != s->name) *t = st_model_find(m, hf_unprefixed(s->name), f);
    if (!*t) {
        LOG_ERROR("%s: no tensor %s (trident's %s)", m->n_names ? m->dir : m->files[0].path,
                  s->name, e->name);
        LOG_HINT("the directory's weights are not the model its config.json describes, or a "
                 "shard is missing");
        return TRI_ERR_CKPT;
    }
    // (rows, cols) as HF stores them.
    const int64_t want_cols = s->transpose ? s->hf_rows : e->ndim == 2 ? e->global_cols : 1;
    const int64_t want_rows = s->transpose ? e->global_cols : s->hf_rows;
    const int one_d = e->ndim == 1;
    int ok = (*t)->cols == want_cols && (one_d ? (*t)->ndim == 1 : (*t)->ndim == 2);
    if (want_rows >= 0) ok = ok && (*t)->rows == want_rows;
    else ok = ok && (*t)->rows >= s->row + s->count;
    if (ok) return TRI_OK;
    LOG_ERROR("%s: tensor %s has shape (%lld, %lld), but trident's %s needs (%lld, %lld)%s",
              (*f)->path, s->name, (long long)(*t)->rows, (long long)(*t)->cols, e->name,
              (long long)(want_rows >= 0 ? want_rows : s->row + s->count), (long long)want_cols,
              want_rows >= 0 ? "" : " or more rows");
    LOG_HINT("the weights do not match config.json; write the model again (save_pretrained)");
    return TRI_ERR_CKPT;
}

typedef struct {
    void *stage;
    float *tmp;
    size_t stage_bytes, tmp_n;
} buffers;

// Entry rows [row, row + n) x columns [col, col + lc) from the HF tensor (rows at s->row) into
// dst (n x lc).
static tri_status read_rows(const st_file *f, const st_tensor *t, const hf_src *s, int64_t n,
                            int64_t col, int64_t lc, float *dst, buffers *b) {
    if (!s->transpose)
        return st_read_block(f, t, s->row, n, col, lc, dst, b->stage, b->stage_bytes);
    // HF rows [col, col + lc) x columns [s->row, s->row + n), transposed, in blocks of at most
    // tmp_n values.
    const int64_t tn = (int64_t)b->tmp_n;
    const int64_t nc = n < tn ? n : tn;             // HF columns per block
    const int64_t nr = tn / nc < lc ? tn / nc : lc; // HF rows per block
    for (int64_t c0 = 0; c0 < n; c0 += nc)
        for (int64_t r0 = 0; r0 < lc; r0 += nr) {
            const int64_t cc = n - c0 < nc ? n - c0 : nc, rr = lc - r0 < nr ? lc - r0 : nr;
            TRI_CHECK(st_read_block(f, t, col + r0, rr, s->row + c0, cc, b->tmp, b->stage,
                                    b->stage_bytes));
            for (int64_t i = 0; i < rr; i++)
                for (int64_t j = 0; j < cc; j++) dst[(c0 + j) * lc + r0 + i] = b->tmp[i * cc + j];
        }
    return TRI_OK;
}

static void global_row(const param_table *pt, const param_entry *e, int64_t r, int64_t *row,
                       int64_t *col) {
    const int64_t g = params_global_index(pt, e, r, 0);
    *row = g / e->global_cols, *col = g % e->global_cols;
}

tri_status hf_read_entry(const st_model *m, const hf_config *h, const param_table *pt, int i,
                         float *dst) {
    const param_entry *e = &pt->entries[i];
    const int64_t lc = e->local_cols;
    size_t half = ((size_t)e->local_numel + (size_t)e->global_cols) * sizeof(float);
    half = half < HF_IO_BYTES ? half : HF_IO_BYTES;
    buffers b = {.stage_bytes = half, .tmp_n = half / sizeof(float)};
    b.stage = xmalloc(half);
    b.tmp = xmalloc(half);
    tri_status rc = TRI_OK;
    for (int64_t r = 0; r < e->local_rows && rc == TRI_OK;) {
        int64_t row, col;
        global_row(pt, e, r, &row, &col);
        hf_src s;
        if (hf_map_row(h, e, row, &s) != 0) {
            LOG_ERROR("%s: trident's tensor %s has no Hugging Face counterpart", m->dir, e->name);
            rc = TRI_ERR_CKPT;
            break;
        }
        int64_t n = 1; // local rows that are consecutive global rows of one HF tensor
        for (; r + n < e->local_rows && n < s.count; n++) {
            int64_t next_row, next_col;
            global_row(pt, e, r + n, &next_row, &next_col);
            if (next_row != row + n || next_col != col) break;
        }
        if (s.zero) {
            memset(dst + r * lc, 0, (size_t)(n * lc) * sizeof(float));
        } else {
            const st_file *f = NULL;
            const st_tensor *t = NULL;
            rc = find(m, e, &s, &f, &t);
            if (rc == TRI_OK) rc = read_rows(f, t, &s, n, col, lc, dst + r * lc, &b);
        }
        r += n;
    }
    free(b.stage);
    free(b.tmp);
    return rc;
}

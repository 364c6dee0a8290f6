// params.c: the parameter table and its counter-based initialisation.
#include "model/params.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "base/checked.h"

static void add_entry(param_table *pt, int *n, const char *name, int ndim, int64_t rows,
                      int64_t cols, param_split split, int row_blocks, int layer, param_init init,
                      double std) {
    param_entry *e = &pt->entries[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->ndim = ndim;
    e->global_rows = rows;
    e->global_cols = cols;
    e->split = split;
    e->row_blocks = row_blocks;
    e->layer = layer;
    e->decay = ndim == 2;
    e->matmul = ndim == 2 && layer >= 0; // a block's matrices are its linear layers
    const char *base = strchr(name, '.') ? strchr(name, '.') + 1 : name; // "h3.ln1w" -> "ln1w"
    e->layernorm = !strncmp(base, "ln", 2);
    e->init = init;
    e->init_std = std;
    e->valid_rows = rows;
}

// Whether the shard's pipeline rank holds global layer l.
static int holds_layer(const model_config *mc, const model_shard *sh, int l) {
    const int Lc = mc->n_layer / (sh->pp * sh->virtual_stages);
    for (int c = 0; c < sh->virtual_stages; c++)
        if (l / Lc == model_shard_stage(sh, c)) return 1;
    return 0;
}

// A transformer layer's entries, in table order: shape (rows_c * C, cols_c * C; cols_c 0 is
// one column), split, row blocks, init (std: 1 the layer's, 2 the residual projections').
// The table (build) and its closed-form sizes (params_size_of) both read this list.
typedef struct {
    const char *suffix;
    int ndim, rows_c, cols_c;
    param_split split;
    int row_blocks;
    param_init init;
    int std_kind; // 0: none, 1: std, 2: proj_std
} layer_entry_spec;

static const layer_entry_spec LAYER_SPEC[PARAM_PER_LAYER] = {
    [PARAM_LN1W] = {"ln1w", 1, 1, 0, SPLIT_REPLICATED, 1, INIT_ONES, 0},
    [PARAM_LN1B] = {"ln1b", 1, 1, 0, SPLIT_REPLICATED, 1, INIT_ZEROS, 0},
    [PARAM_QKVW] = {"qkvw", 2, 3, 1, SPLIT_ROWS, 3, INIT_NORMAL, 1},
    [PARAM_QKVB] = {"qkvb", 1, 3, 0, SPLIT_ROWS, 3, INIT_ZEROS, 0},
    [PARAM_ATTPROJW] = {"attprojw", 2, 1, 1, SPLIT_COLS, 1, INIT_NORMAL, 2},
    [PARAM_ATTPROJB] = {"attprojb", 1, 1, 0, SPLIT_REPLICATED, 1, INIT_ZEROS, 0},
    [PARAM_LN2W] = {"ln2w", 1, 1, 0, SPLIT_REPLICATED, 1, INIT_ONES, 0},
    [PARAM_LN2B] = {"ln2b", 1, 1, 0, SPLIT_REPLICATED, 1, INIT_ZEROS, 0},
    [PARAM_FCW] = {"fcw", 2, 4, 1, SPLIT_ROWS, 1, INIT_NORMAL, 1},
    [PARAM_FCB] = {"fcb", 1, 4, 0, SPLIT_ROWS, 1, INIT_ZEROS, 0},
    [PARAM_FCPROJW] = {"fcprojw", 2, 1, 4, SPLIT_COLS, 1, INIT_NORMAL, 2},
    [PARAM_FCPROJB] = {"fcprojb", 1, 1, 0, SPLIT_REPLICATED, 1, INIT_ZEROS, 0},
};

// Elements of one tp rank's share of a (rows, cols) tensor split `split` over tp ranks; -1
// when the product passes INT64_MAX.
static int64_t local_numel_of(int64_t rows, int64_t cols, param_split split, int tp) {
    if (split == SPLIT_ROWS || split == SPLIT_VOCAB) rows /= tp;
    else if (split == SPLIT_COLS) cols /= tp;
    int64_t n;
    return ck_mul_i64(rows, cols, &n) ? n : -1;
}

// A layer entry's global shape for d_model C (C < 2^31: 4 * C fits in 64 bits).
static void layer_entry_shape(const layer_entry_spec *s, int64_t C, int64_t *rows, int64_t *cols) {
    *cols = s->cols_c ? (int64_t)s->cols_c * C : 1;
    *rows = (int64_t)s->rows_c * C;
}

// A Llama layer's entries (contract of issue 18, Hugging Face's LlamaForCausalLM): global
// shape (rows, cols), split, row blocks, init (std_kind as LAYER_SPEC's), for d_model C, q rows
// QR = NH*HS, k and v rows KR = NKV*HS each, MLP width F.
typedef struct {
    const char *suffix;
    int64_t rows, cols;
    param_split split;
    int row_blocks;
    param_init init;
    int std_kind;
} llama_entry;

static void llama_layer_spec(const model_config *mc, llama_entry out[LLAMA_PER_LAYER]) {
    const int64_t C = mc->d_model, HS = C / mc->n_head, F = mc->ffn_hidden;
    const int64_t QR = (int64_t)mc->n_head * HS, KR = (int64_t)mc->n_kv_head * HS;
    out[LLAMA_LN1W] = (llama_entry){"ln1w", C, 1, SPLIT_REPLICATED, 1, INIT_ONES, 0};
    out[LLAMA_QKVW] = (llama_entry){"qkvw", QR + 2 * KR, C, SPLIT_ROWS, 3, INIT_NORMAL, 1};
    out[LLAMA_ATTPROJW] = (llama_entry){"attprojw", C, QR, SPLIT_COLS, 1, INIT_NORMAL, 2};
    out[LLAMA_LN2W] = (llama_entry){"ln2w", C, 1, SPLIT_REPLICATED, 1, INIT_ONES, 0};
    out[LLAMA_FCW] = (llama_entry){"fcw", 2 * F, C, SPLIT_ROWS, 2, INIT_NORMAL, 1};
    out[LLAMA_FCPROJW] = (llama_entry){"fcprojw", C, F, SPLIT_COLS, 1, INIT_NORMAL, 2};
}

// size_of for llama: wte on the first stage (no wpe), LLAMA_PER_LAYER entries a layer, lnfw and
// the untied lm_head (or, tied with pp > 1, wte's copy) on the last.
static int size_of_llama(const model_config *mc, const model_shard *sh, int64_t Vp,
                         params_size *out) {
    const int64_t L = mc->n_layer, C = mc->d_model;
    const int tp = sh->tp, pp = sh->pp;
    const int first = model_shard_first(sh), last = model_shard_last(sh);
    const int tied = mc->tie_embeddings != 0;
    TRI_ASSERT(mc->n_kv_head >= 1 && mc->ffn_hidden >= 1); // resolved (config_resolve_model)
    llama_entry spec[LLAMA_PER_LAYER];
    llama_layer_spec(mc, spec);
    int64_t layer_local = 0, layer_global = 0, n;
    for (int k = 0; k < LLAMA_PER_LAYER; k++) {
        const int64_t local = local_numel_of(spec[k].rows, spec[k].cols, spec[k].split, tp);
        if (local < 0 || !ck_add_i64(layer_local, local, &layer_local) ||
            !ck_mul_i64(spec[k].rows, spec[k].cols, &n) ||
            !ck_add_i64(layer_global, n, &layer_global))
            return -1;
    }
    const int64_t held = pp == 1 ? L : L / ((int64_t)pp * sh->virtual_stages) * sh->virtual_stages;
    const int64_t wte_local = local_numel_of(Vp, C, SPLIT_VOCAB, tp);
    int64_t local = 0, global = 0;
    if (wte_local < 0 || !ck_mul_i64(held, layer_local, &local)) return -1;
    if (first && !ck_add_i64(local, wte_local, &local)) return -1;
    if (last && !ck_add_i64(local, C, &local)) return -1;
    const int head_copy = last && (!tied || !first); // lm_head, or wte's tied copy
    if (head_copy && !ck_add_i64(local, wte_local, &local)) return -1;
    if (!ck_mul_i64(Vp, C, &n) || !ck_mul_i64(L, layer_global, &global) ||
        !ck_add_i64(global, n, &global) || !ck_add_i64(global, C, &global) ||
        (!tied && !ck_add_i64(global, n, &global)))
        return -1;
    out->entries = (first ? 1 : 0) + held * LLAMA_PER_LAYER + (last ? 1 : 0) + head_copy;
    out->layers = held;
    out->local_numel = local;
    out->global_numel = global;
    return 0;
}

// params_size_of with the vocabulary padded to Vp rows (params_build_full pads for the tp of
// a run, not for its own tp of 1).
static int size_of(const model_config *mc, const model_shard *sh, int64_t Vp, params_size *out) {
    memset(out, 0, sizeof *out);
    if (model_arch_is_llama(mc)) return size_of_llama(mc, sh, Vp, out);
    const int64_t L = mc->n_layer, C = mc->d_model, T = mc->seq_len;
    const int tp = sh->tp, pp = sh->pp;
    const int first = model_shard_first(sh), last = model_shard_last(sh);
    TRI_ASSERT(L >= 1 && C >= 1 && T >= 1 && tp >= 1 && pp >= 1 && sh->virtual_stages >= 1);
    int64_t layer_local = 0, layer_global = 0, n;
    for (int k = 0; k < PARAM_PER_LAYER; k++) {
        int64_t rows, cols;
        layer_entry_shape(&LAYER_SPEC[k], C, &rows, &cols);
        const int64_t local = local_numel_of(rows, cols, LAYER_SPEC[k].split, tp);
        if (local < 0 || !ck_add_i64(layer_local, local, &layer_local) ||
            !ck_mul_i64(rows, cols, &n) || !ck_add_i64(layer_global, n, &layer_global))
            return -1;
    }
    // Layers held: all of them without pipelining, else v chunks of L / (pp * v).
    const int64_t held = pp == 1 ? L : L / ((int64_t)pp * sh->virtual_stages) * sh->virtual_stages;
    const int64_t wte_local = local_numel_of(Vp, C, SPLIT_VOCAB, tp), wpe = T * C;
    int64_t local = 0, global = 0;
    if (wte_local < 0 || !ck_mul_i64(held, layer_local, &local)) return -1;
    if (first && !ck_add_i64(local, wte_local, &local)) return -1;
    if (first && !ck_add_i64(local, wpe, &local)) return -1;
    if (last && !ck_add_i64(local, 2 * C, &local)) return -1;
    if (last && !first && !ck_add_i64(local, wte_local, &local)) return -1;
    if (!ck_mul_i64(Vp, C, &n) || !ck_mul_i64(L, layer_global, &global) ||
        !ck_add_i64(global, n, &global) || !ck_add_i64(global, wpe + 2 * C, &global))
        return -1;
    out->entries = (first ? 2 : 0) + held * PARAM_PER_LAYER + (last ? 2 : 0) + (last && !first);
    out->layers = held;
    out->local_numel = local;
    out->global_numel = global;
    return 0;
}

int params_size_of(const model_config *mc, const model_shard *sh, params_size *out) {
    return size_of(mc, sh, model_padded_vocab_ll(mc, sh->tp), out);
}

// The entries of a Llama shard into pt (layer_first, wte, lnfw, lm_head set); returns their
// count. Names and layouts: the contract of issue 18 (README "Llama").
static int build_llama(param_table *pt, const model_config *mc, const model_shard *sh, int Vp,
                       double std, double proj_std) {
    const int L = mc->n_layer, C = mc->d_model, pp = sh->pp;
    const int first = model_shard_first(sh), last = model_shard_last(sh);
    llama_entry spec[LLAMA_PER_LAYER];
    llama_layer_spec(mc, spec);
    pt->layer_entries = LLAMA_PER_LAYER;
    pt->tied = mc->tie_embeddings != 0;
    int n = 0;
    if (first) {
        pt->wte = n;
        add_entry(pt, &n, "wte", 2, Vp, C, SPLIT_VOCAB, 1, PARAM_LAYER_EMBED, INIT_NORMAL, std);
        pt->entries[pt->wte].valid_rows = mc->vocab_size;
    }
    for (int l = 0; l < L; l++) {
        pt->layer_first[l] = -1;
        if (pp > 1 && !holds_layer(mc, sh, l)) continue;
        pt->layer_first[l] = n;
        for (int k = 0; k < LLAMA_PER_LAYER; k++) {
            const llama_entry *s = &spec[k];
            char name[32];
            snprintf(name, sizeof name, "h%d.%s", l, s->suffix);
            add_entry(pt, &n, name, s->cols == 1 ? 1 : 2, s->rows, s->cols, s->split, s->row_blocks,
                      l, s->init,
                      s->std_kind == 1   ? std
                      : s->std_kind == 2 ? proj_std
                                         : 0);
        }
        if (mc->n_kv_head != mc->n_head) { // q | k | v of unequal heights
            param_entry *q = &pt->entries[pt->layer_first[l] + LLAMA_QKVW];
            const int64_t HS = C / mc->n_head;
            q->block_rows[0] = (int64_t)mc->n_head * HS;
            q->block_rows[1] = q->block_rows[2] = (int64_t)mc->n_kv_head * HS;
        }
    }
    if (last) {
        pt->lnfw = n;
        add_entry(pt, &n, "lnfw", 1, C, 1, SPLIT_REPLICATED, 1, PARAM_LAYER_FINAL, INIT_ONES, 0);
        if (!pt->tied) { // Hugging Face's lm_head.weight
            pt->lm_head = n;
            add_entry(pt, &n, "lm_head", 2, Vp, C, SPLIT_VOCAB, 1, PARAM_LAYER_FINAL, INIT_NORMAL,
                      std);
            pt->entries[pt->lm_head].valid_rows = mc->vocab_size;
        } else if (!first) { // tied as GPT-2's: a copy of wte, its gradient summed
            pt->wte = n;
            pt->wte_is_copy = 1;
            add_entry(pt, &n, "wte", 2, Vp, C, SPLIT_VOCAB, 1, PARAM_LAYER_FINAL, INIT_NORMAL, std);
            pt->entries[pt->wte].valid_rows = mc->vocab_size;
        }
    }
    return n;
}

// The table of shard `sh` with the vocabulary padded to Vp rows.
static void build(param_table *pt, const model_config *mc, const model_shard *sh, int Vp) {
    const int L = mc->n_layer, C = mc->d_model, T = mc->seq_len;
    const int tp = sh->tp, tp_rank = sh->tp_rank, pp = sh->pp, pp_rank = sh->pp_rank;
    const int first = model_shard_first(sh), last = model_shard_last(sh);
    // The config's rules keep every size in range (config_resolve_world); a table past them
    // is a caller's bug, caught here before anything is allocated.
    params_size size;
    TRI_ASSERT(size_of(mc, sh, Vp, &size) == 0 && size.entries <= INT_MAX);
    memset(pt, 0, sizeof *pt);
    pt->n_layer = L;
    pt->layer_entries = PARAM_PER_LAYER;
    pt->tp = tp, pt->tp_rank = tp_rank;
    pt->pp = pp, pt->pp_rank = pp_rank;
    pt->virtual_stages = pp == 1 ? 1 : sh->virtual_stages;
    pt->vplace = pp > 1 && sh->vplace;
    pt->entries = xcalloc_for((size_t)size.entries, sizeof(param_entry), "the parameter table");
    pt->layer_first = xcalloc_for((size_t)L, sizeof(int), "the parameter table");
    pt->wte = pt->wpe = pt->lnfw = pt->lnfb = pt->lm_head = -1;
    pt->tied = 1;

    const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * L); // residual projections
    int n = 0;
    if (model_arch_is_llama(mc)) {
        n = build_llama(pt, mc, sh, Vp, std, proj_std);
    } else if (first) {
        pt->wte = n;
        add_entry(pt, &n, "wte", 2, Vp, C, SPLIT_VOCAB, 1, PARAM_LAYER_EMBED, INIT_NORMAL, std);
        pt->entries[pt->wte].valid_rows = mc->vocab_size;
        pt->wpe = n;
        add_entry(pt, &n, "wpe", 2, T, C, SPLIT_REPLICATED, 1, PARAM_LAYER_EMBED, INIT_NORMAL, std);
    }
    for (int l = 0; l < L && !model_arch_is_llama(mc); l++) {
        pt->layer_first[l] = -1;
        if (pp > 1 && !holds_layer(mc, sh, l)) continue;
        pt->layer_first[l] = n;
        for (int k = 0; k < PARAM_PER_LAYER; k++) {
            const layer_entry_spec *s = &LAYER_SPEC[k];
            char name[32];
            int64_t rows, cols;
            snprintf(name, sizeof name, "h%d.%s", l, s->suffix);
            layer_entry_shape(s, C, &rows, &cols);
            add_entry(pt, &n, name, s->ndim, rows, cols, s->split, s->row_blocks, l, s->init,
                      s->std_kind == 1   ? std
                      : s->std_kind == 2 ? proj_std
                                         : 0);
        }
    }
    if (last && !model_arch_is_llama(mc)) {
        pt->lnfw = n;
        add_entry(pt, &n, "lnfw", 1, C, 1, SPLIT_REPLICATED, 1, PARAM_LAYER_FINAL, INIT_ONES, 0);
        pt->lnfb = n;
        add_entry(pt, &n, "lnfb", 1, C, 1, SPLIT_REPLICATED, 1, PARAM_LAYER_FINAL, INIT_ZEROS, 0);
        if (!first) { // the tied LM head: a copy of wte, kept equal by summing the gradients
            pt->wte = n;
            pt->wte_is_copy = 1;
            add_entry(pt, &n, "wte", 2, Vp, C, SPLIT_VOCAB, 1, PARAM_LAYER_FINAL, INIT_NORMAL, std);
            pt->entries[pt->wte].valid_rows = mc->vocab_size;
        }
    }
    TRI_ASSERT(n == size.entries);
    pt->n_entries = n;
    pt->wte_shared = pp > 1 && pt->tied && pt->wte >= 0 && !(first && last);

    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        param_entry *e = &pt->entries[i];
        e->local_rows = e->global_rows;
        e->local_cols = e->global_cols;
        if (e->split == SPLIT_ROWS || e->split == SPLIT_VOCAB) {
            TRI_ASSERT(e->global_rows % ((int64_t)tp * e->row_blocks) == 0 || e->block_rows[0]);
            for (int b = 0; b < 3; b++) TRI_ASSERT(e->block_rows[b] % tp == 0);
            e->local_rows = e->global_rows / tp;
        } else if (e->split == SPLIT_COLS) {
            TRI_ASSERT(e->global_cols % tp == 0);
            e->local_cols = e->global_cols / tp;
        }
        e->local_numel = e->local_rows * e->local_cols;
        e->offset = offset;
        offset += (size_t)e->local_numel;
    }
    TRI_ASSERT(offset == (size_t)size.local_numel);
    pt->local_numel = offset;
    pt->global_numel = size.global_numel; // the whole model's size, whatever this rank holds
}

void params_build(param_table *pt, const model_config *mc, const model_shard *sh) {
    build(pt, mc, sh, model_padded_vocab(mc, sh->tp));
}

void params_build_full(param_table *pt, const model_config *mc, int vocab_tp) {
    const model_shard whole = {.tp = 1, .tp_rank = 0, .pp = 1, .pp_rank = 0, .virtual_stages = 1};
    build(pt, mc, &whole, model_padded_vocab(mc, vocab_tp));
}

void params_free(param_table *pt) {
    free(pt->entries);
    free(pt->layer_first);
    memset(pt, 0, sizeof *pt);
}

int params_chunk_layers(const param_table *pt) {
    return pt->n_layer / (pt->pp * pt->virtual_stages);
}

int params_chunk_first_layer(const param_table *pt, int chunk) {
    const model_shard sh = {.tp = pt->tp,
                            .tp_rank = pt->tp_rank,
                            .pp = pt->pp,
                            .pp_rank = pt->pp_rank,
                            .virtual_stages = pt->virtual_stages,
                            .vplace = pt->vplace};
    return model_shard_stage(&sh, chunk) * params_chunk_layers(pt);
}

int params_wte(const param_table *pt) { return pt->wte; }
int params_wpe(const param_table *pt) { return pt->wpe; }
int params_layer(const param_table *pt, int layer, int which) {
    TRI_ASSERT(layer >= 0 && layer < pt->n_layer && which >= 0 && which < pt->layer_entries);
    TRI_ASSERT(pt->layer_first[layer] >= 0);
    return pt->layer_first[layer] + which;
}
int params_lnfw(const param_table *pt) { return pt->lnfw; }
int params_lnfb(const param_table *pt) { return pt->lnfb; }
int params_head(const param_table *pt) { return pt->lm_head >= 0 ? pt->lm_head : pt->wte; }

int params_find(const param_table *pt, const char *name) {
    for (int i = 0; i < pt->n_entries; i++)
        if (!strcmp(pt->entries[i].name, name)) return i;
    return -1;
}

size_t params_stage_layout(const param_table *pt, size_t *off, int matmul_weights) {
    size_t layer_max = 0, rest = 0;
    for (int l = 0; l < pt->n_layer; l++) {
        int first = pt->layer_first[l];
        if (first < 0) continue;
        size_t n = 0; // the layer's staged entries, packed in order
        for (int k = 0; k < pt->layer_entries; k++) {
            const int skip = !matmul_weights && pt->entries[first + k].matmul;
            if (off) off[first + k] = skip ? SIZE_MAX : n;
            if (!skip) n += (size_t)pt->entries[first + k].local_numel;
        }
        layer_max = n > layer_max ? n : layer_max;
    }
    for (int i = 0; i < pt->n_entries; i++) {
        if (pt->entries[i].layer >= 0) continue;
        if (off) off[i] = layer_max + rest;
        rest += (size_t)pt->entries[i].local_numel;
    }
    return layer_max + rest;
}

int64_t params_global_index(const param_table *pt, const param_entry *e, int64_t r, int64_t c) {
    int64_t gr = r, gc = c;
    switch (e->split) {
    case SPLIT_REPLICATED: break;
    case SPLIT_VOCAB: gr = pt->tp_rank * e->local_rows + r; break;
    case SPLIT_ROWS: {
        if (e->block_rows[0]) { // unequal blocks: find r's block by the local heights
            int64_t lo = 0, glo = 0;
            int b = 0;
            while (r >= lo + e->block_rows[b] / pt->tp) {
                lo += e->block_rows[b] / pt->tp;
                glo += e->block_rows[b];
                b++;
            }
            gr = glo + pt->tp_rank * (e->block_rows[b] / pt->tp) + (r - lo);
            break;
        }
        // Each of the row_blocks blocks (q, k, v) is split alike, so a rank owns whole
        // heads of each: local block b, row i -> global block b, row tp_rank*bl + i.
        int64_t block_local = e->local_rows / e->row_blocks;
        int64_t block_global = e->global_rows / e->row_blocks;
        int64_t b = r / block_local, i = r % block_local;
        gr = b * block_global + pt->tp_rank * block_local + i;
        break;
    }
    case SPLIT_COLS: gc = pt->tp_rank * e->local_cols + c; break;
    }
    return gr * e->global_cols + gc;
}

// splitmix64's finaliser: a bijective mix with full avalanche.
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ULL; // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

float params_init_value(uint64_t seed, const param_entry *e, int64_t global_index) {
    int64_t row = global_index / e->global_cols;
    if (row >= e->valid_rows) return 0.0f; // padded vocabulary rows stay zero
    switch (e->init) {
    case INIT_ZEROS: return 0.0f;
    case INIT_ONES: return 1.0f;
    case INIT_NORMAL: break;
    }
    // Box-Muller on two 32-bit uniforms drawn from one counter-based 64-bit hash.
    uint64_t h = mix64(mix64(seed ^ hash_name(e->name)) +
                       (uint64_t)global_index * 0x9e3779b97f4a7c15ULL);
    double u1 = ((double)(h >> 32) + 0.5) / 4294967296.0;
    double u2 = ((double)(h & 0xffffffffu) + 0.5) / 4294967296.0;
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    return (float)(e->init_std * z);
}

void params_init_host(const param_table *pt, uint64_t seed, float *local) {
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        float *dst = local + e->offset;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < e->local_rows; r++)
            for (int64_t c = 0; c < e->local_cols; c++)
                dst[r * e->local_cols + c] = params_init_value(seed, e,
                                                               params_global_index(pt, e, r, c));
    }
}

void params_slice_from_global(const param_table *pt, const param_entry *e, const float *global,
                              float *local) {
    for (int64_t r = 0; r < e->local_rows; r++)
        for (int64_t c = 0; c < e->local_cols; c++)
            local[r * e->local_cols + c] = global[params_global_index(pt, e, r, c)];
}

void params_place_into_global(const param_table *pt, const param_entry *e, const float *local,
                              float *global) {
    for (int64_t r = 0; r < e->local_rows; r++)
        for (int64_t c = 0; c < e->local_cols; c++)
            global[params_global_index(pt, e, r, c)] = local[r * e->local_cols + c];
}

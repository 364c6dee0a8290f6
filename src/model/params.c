// params.c: the parameter table and its counter-based initialisation.
#include "model/params.h"

#include <math.h>
#include <string.h>

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
    return (l / Lc) % sh->pp == sh->pp_rank; // virtual stage l / Lc = c * pp + r
}

// The table of shard `sh` with the vocabulary padded to Vp rows.
static void build(param_table *pt, const model_config *mc, const model_shard *sh, int Vp) {
    const int L = mc->n_layer, C = mc->d_model, T = mc->seq_len;
    const int tp = sh->tp, tp_rank = sh->tp_rank, pp = sh->pp, pp_rank = sh->pp_rank;
    const int first = pp_rank == 0, last = pp_rank == pp - 1;
    memset(pt, 0, sizeof *pt);
    pt->n_layer = L;
    pt->layer_entries = PARAM_PER_LAYER;
    pt->tp = tp, pt->tp_rank = tp_rank;
    pt->pp = pp, pt->pp_rank = pp_rank;
    pt->virtual_stages = pp == 1 ? 1 : sh->virtual_stages;
    pt->entries = xcalloc((size_t)(3 + L * PARAM_PER_LAYER + 2), sizeof(param_entry));
    pt->layer_first = xcalloc((size_t)L, sizeof(int));
    pt->wte = pt->wpe = pt->lnfw = pt->lnfb = -1;

    const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * L); // residual projections
    int n = 0;
    if (first) {
        pt->wte = n;
        add_entry(pt, &n, "wte", 2, Vp, C, SPLIT_VOCAB, 1, PARAM_LAYER_EMBED, INIT_NORMAL, std);
        pt->entries[pt->wte].valid_rows = mc->vocab_size;
        pt->wpe = n;
        add_entry(pt, &n, "wpe", 2, T, C, SPLIT_REPLICATED, 1, PARAM_LAYER_EMBED, INIT_NORMAL, std);
    }
    for (int l = 0; l < L; l++) {
        pt->layer_first[l] = -1;
        if (pp > 1 && !holds_layer(mc, sh, l)) continue;
        pt->layer_first[l] = n;
        char name[32];
#define LAYER_ENTRY(suffix, ndim, rows, cols, split, blocks, init, s)                              \
    snprintf(name, sizeof name, "h%d." suffix, l);                                                 \
    add_entry(pt, &n, name, ndim, rows, cols, split, blocks, l, init, s)
        LAYER_ENTRY("ln1w", 1, C, 1, SPLIT_REPLICATED, 1, INIT_ONES, 0);
        LAYER_ENTRY("ln1b", 1, C, 1, SPLIT_REPLICATED, 1, INIT_ZEROS, 0);
        LAYER_ENTRY("qkvw", 2, 3 * C, C, SPLIT_ROWS, 3, INIT_NORMAL, std);
        LAYER_ENTRY("qkvb", 1, 3 * C, 1, SPLIT_ROWS, 3, INIT_ZEROS, 0);
        LAYER_ENTRY("attprojw", 2, C, C, SPLIT_COLS, 1, INIT_NORMAL, proj_std);
        LAYER_ENTRY("attprojb", 1, C, 1, SPLIT_REPLICATED, 1, INIT_ZEROS, 0);
        LAYER_ENTRY("ln2w", 1, C, 1, SPLIT_REPLICATED, 1, INIT_ONES, 0);
        LAYER_ENTRY("ln2b", 1, C, 1, SPLIT_REPLICATED, 1, INIT_ZEROS, 0);
        LAYER_ENTRY("fcw", 2, 4 * C, C, SPLIT_ROWS, 1, INIT_NORMAL, std);
        LAYER_ENTRY("fcb", 1, 4 * C, 1, SPLIT_ROWS, 1, INIT_ZEROS, 0);
        LAYER_ENTRY("fcprojw", 2, C, 4 * C, SPLIT_COLS, 1, INIT_NORMAL, proj_std);
        LAYER_ENTRY("fcprojb", 1, C, 1, SPLIT_REPLICATED, 1, INIT_ZEROS, 0);
#undef LAYER_ENTRY
    }
    if (last) {
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
    pt->n_entries = n;

    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        param_entry *e = &pt->entries[i];
        e->local_rows = e->global_rows;
        e->local_cols = e->global_cols;
        if (e->split == SPLIT_ROWS || e->split == SPLIT_VOCAB) {
            TRI_ASSERT(e->global_rows % ((int64_t)tp * e->row_blocks) == 0);
            e->local_rows = e->global_rows / tp;
        } else if (e->split == SPLIT_COLS) {
            TRI_ASSERT(e->global_cols % tp == 0);
            e->local_cols = e->global_cols / tp;
        }
        e->local_numel = e->local_rows * e->local_cols;
        e->offset = offset;
        offset += (size_t)e->local_numel;
    }
    pt->local_numel = offset;
    // The whole model's size, whatever this rank holds.
    pt->global_numel = (int64_t)Vp * C + (int64_t)T * C + 2 * (int64_t)C +
                       (int64_t)L * (12 * (int64_t)C * C + 13 * (int64_t)C);
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
    return (chunk * pt->pp + pt->pp_rank) * params_chunk_layers(pt);
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

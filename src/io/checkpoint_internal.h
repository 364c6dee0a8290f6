// checkpoint_internal.h: what the checkpoint writer (checkpoint.c), the manifest's reader and
// checker (checkpoint_manifest.c) and the loader (checkpoint_read.c) share: the kinds of
// stored state, regions as rectangles of global tensors, the spans of a rank's state in
// device memory, the manifest as read, paths and the agreement of ranks.
#pragma once
#include <stdarg.h>
#include <stdio.h>

#include <yaml.h>

#include "io/checkpoint.h"

#define CKPT_FORMAT "trident-checkpoint"
#define PATH_BYTES 4352 // every path buffer here; checkpoint.dir is limited to 4000 bytes
// The manifest's format version. 1: the first format. 2: version 1 with a last line
// `manifest_crc32c: 0x........`, the CRC-32C of every byte before that line. 3: version 2
// with the data order (data_order and data_sources: checkpoint_order.c). A reader takes
// every version from 1 to CKPT_VERSION and refuses any other, naming it.
#define CKPT_VERSION 3
#define CKPT_SEAL_KEY "manifest_crc32c"

typedef enum { KIND_PARAM = 0, KIND_MASTER, KIND_ADAM_M, KIND_ADAM_V, KIND_COUNT } ckpt_kind;
extern const char *const ckpt_kind_names[KIND_COUNT]; // "param", "master", "adam_m", "adam_v"

// A rectangle of a global (rows, cols) tensor.
typedef struct {
    int64_t row, col, rows, cols;
} rect;

// Calls fn for the rectangles that local elements [a, b) of entry e (row-major, relative
// to the entry) cover, in order. Each rectangle's elements are contiguous in local order:
// either one partial row, or whole local rows that map to consecutive global rows at the
// same columns. `at` is the rectangle's first element, relative to a.
typedef void (*rect_fn)(void *ctx, rect r, size_t at);
void ckpt_entry_rects(const param_table *pt, const param_entry *e, size_t a, size_t b, rect_fn fn,
                      void *ctx);

// What this rank stores or needs: a span of (entry, kind) in device memory.
typedef struct {
    int entry;
    size_t lo, hi; // flat local offsets in the table layout
    ckpt_kind kind;
    void *dev;   // device address of element lo
    size_t elem; // its bytes: 4 (fp32), or 2 for bf16 parameters
} span;

// Where elements [lo, hi) of a piece live for `kind`, and their size.
span ckpt_piece_span(const ckpt_state *s, const zero_piece *pc, ckpt_kind kind, size_t lo,
                     size_t hi);

// Every rank's status, agreed: the worst (largest) code over the world.
tri_status ckpt_agree(comm *cm, tri_status rc);

// "step_%08d" exactly (a complete checkpoint's directory name); *step gets N.
int ckpt_is_step_name(const char *name, int *step);

// ---- the manifest (checkpoint_manifest.c) ----

// One stored region: a rectangle of (tensor, kind) at a byte offset of a rank file.
typedef struct {
    int tensor; // index into the manifest's tensors
    ckpt_kind kind;
    int elem; // bytes per element: 4 (f32) or 2 (bf16)
    rect r;
    int file;
    uint64_t offset;
    uint32_t crc;
    int line; // of manifest.yaml, for messages
} region;

typedef struct {
    char name[32];
    int64_t rows, cols;
    int line; // of manifest.yaml
} tensor_info;

// A manifest that manifest_read() has checked: every field in range, every (tensor, kind)
// tiled exactly once by its regions (param or master, adam_m, adam_v for each tensor), each
// rank file tiled exactly by the regions in it. What it has not checked: the rank files on
// disk (ckpt_check_files) and the regions' CRCs (read as they are loaded).
typedef struct {
    char dir[PATH_BYTES], path[PATH_BYTES]; // the checkpoint, its manifest.yaml
    int version;
    int tp; // mesh.tp of the writer (its vocabulary padding)
    int step, optim_t;
    int64_t samples, tokens;
    int n_layer, n_head, d_model, seq_len, vocab_size, vocab_pad_to;
    // config.model's architecture keys (model_config's; a manifest from before them: gpt2's).
    int llama, n_kv_head, ffn_hidden, ffn_multiple_of, tie_embeddings;
    double rope_theta, norm_eps;
    tensor_info *tensors;
    int *by_name; // tensor indexes sorted by name
    int n_tensors;
    char (*files)[64];
    int64_t *file_bytes;
    int n_files;
    region *regions;
    int n_regions;
    char *config_yaml; // the `config:` block (the resolved config), from line config_line
    size_t config_len;
    int config_line;
    data_cursor order; // version 3: the recorded data order; before: one plain stream
} manifest;

// Reads and checks <dir>/manifest.yaml. Errors name the file, the line and the field, and
// are TRI_ERR_CKPT; on an error `m` holds nothing to free.
tri_status manifest_read(manifest *m, const char *dir);
void manifest_free(manifest *m);
// The index of tensor `name` in m->tensors, or -1.
int manifest_find_tensor(const manifest *m, const char *name);
// The model that config.model of a checkpoint describes (arch a static string, init_from NULL).
void manifest_model_config(const manifest *m, model_config *mc);
// The seal of version 2 for the manifest text `text` (n bytes, every line ended by '\n'):
// the line "manifest_crc32c: 0x........\n" (into `line`, at least 32 bytes) that follows it.
void manifest_seal(const char *text, size_t n, char *line, size_t cap);
// The last line of text must be the seal: *body where it starts (the bytes it covers end
// there), *crc the value it records; 0 when there is no well-formed seal line.
int manifest_find_seal(const char *text, size_t n, size_t *body, uint32_t *crc);
// The value of the first line "KEY: VALUE" at column 0 of text, into out; 0 when none fits.
int manifest_scan_key(const char *text, size_t n, const char *key, char *out, size_t cap);

// ---- the data order (checkpoint_order.c) ----

// The lines "data_order: {...}" and "data_sources:" with one line per source, for cursor c.
void manifest_write_data_order(FILE *f, const data_cursor *c);
// Reads m->order (m's version, step and samples already read): version 3's data_order and
// data_sources, each field checked against the manifest's samples and step, the config it
// records (run.seed, train.global_batch, data.shuffle, data.train) and the blend schedule;
// before version 3, config.data.train's one stream in plain order at m->samples. 0, or 1
// with the problem in why[n] and its line in *line.
int manifest_read_data_order(yaml_document_t *d, yaml_node_t *root, manifest *m, char *why,
                             size_t n, int *line);

// ---- paths ----

// snprintf into a PATH_BYTES buffer (paths are bounded by the checkpoint.dir limit).
__attribute__((format(printf, 2, 3))) static inline void pathf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, PATH_BYTES, fmt, ap);
    va_end(ap);
}

static inline void path_join(char *out, const char *dir, const char *name) {
    pathf(out, "%s/%s", dir, name);
}

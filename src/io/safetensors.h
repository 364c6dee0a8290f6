// safetensors.h: Hugging Face's safetensors files (DESIGN.md "Files"), read a block at a time
// and written a tensor at a time; and a model directory's set of them (model.safetensors, or
// the shards a model.safetensors.index.json names). Nothing here holds a whole tensor: a read
// preads the rows (or row segments) it is asked for through a caller's bounded staging.
//
// The format: 8 bytes little-endian N, N bytes of JSON {"__metadata__": {str: str},
// NAME: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}, then the data;
// offsets are relative to the byte after the header.
#pragma once
#include "base/common.h"

// A header longer than this is refused before it is read (safetensors' own limit is 100 MB).
#define ST_HEADER_MAX ((uint64_t)100 << 20)
// Dimensions of a tensor's shape (HF's weights have 1 or 2; a scalar has 0).
#define ST_MAX_DIMS 8

typedef enum { ST_F32 = 0, ST_BF16, ST_F16 } st_dtype;

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t rows, cols;  // shape as a matrix: (shape[0], product of the rest); 1-d: (n, 1)
    uint64_t begin, end; // absolute byte offsets in the file
} st_tensor;

// An open file whose header passed every check: the length within ST_HEADER_MAX and the file,
// valid JSON, each tensor's dtype known and shape non-negative, end - begin = numel x dtype
// size (checked arithmetic), every range inside the file, no two ranges overlapping, no name
// twice. A failed check names the file and the tensor (TRI_ERR_CKPT).
typedef struct {
    char path[4096];
    int fd; // -1 when closed
    int64_t size;
    st_tensor *t; // sorted by name
    int n;
} st_file;

tri_status st_open(st_file *f, const char *path);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name); // NULL when absent
size_t st_dtype_size(st_dtype d);
const char *st_dtype_name(st_dtype d);

// Rows [row0, row0 + rows) x columns [col0, col0 + cols) of tensor t as a matrix into fp32
// dst (rows x cols, row-major), through `stage` (stage_bytes, at least one element; a row
// segment wider than it is read in pieces). BF16 and F16 are widened. A short read or a
// non-finite value names the file, the tensor and the element (TRI_ERR_CKPT).
tri_status st_read_block(const st_file *f, const st_tensor *t, int64_t row0, int64_t rows,
                         int64_t col0, int64_t cols, float *dst, void *stage, size_t stage_bytes);

// A Hugging Face model directory's weights: DIR/model.safetensors, or the files DIR/
// model.safetensors.index.json's weight_map names (plain file names in DIR; each listed
// tensor must be in its file).
typedef struct {
    char dir[4096];
    st_file *files;
    int n_files;
    // weight_map, sorted by name: tensor -> file index (one file: none, every lookup there)
    char **names;
    int *file_of;
    int n_names;
} st_model;

// Whether DIR holds model.safetensors or model.safetensors.index.json.
int st_model_present(const char *dir);
tri_status st_model_open(st_model *m, const char *dir);
void st_model_close(st_model *m);
// The tensor `name` and its file; NULL (nothing logged) when the model lacks it.
const st_tensor *st_model_find(const st_model *m, const char *name, const st_file **file);

// Writing: the header (every tensor's name, dtype F32 and shape, in order) first, then the
// tensors' values in the same order, streamed; PATH.tmp is synced and renamed to PATH by
// st_writer_close(commit) once every value has been put.
typedef struct {
    char path[4096], tmp[4112];
    int fd;
    uint64_t expected, written; // data bytes
} st_writer;

typedef struct {
    const char *name;
    int64_t shape[2]; // shape[1] == 0: 1-d
} st_out_tensor;

tri_status st_writer_open(st_writer *w, const char *path, const st_out_tensor *t, int n);
tri_status st_writer_put(st_writer *w, const float *v, size_t n);
tri_status st_writer_close(st_writer *w, int commit);
// Data bytes of tensor t as st_writer writes it (fp32).
uint64_t st_out_bytes(const st_out_tensor *t);

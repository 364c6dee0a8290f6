// data.h: llm.c token shards, DESIGN.md's plain token stream order, and the permutation
// that shuffles it.
//
// Plain order: shards matching a glob are read in sorted name order. Within a shard, sample
// k covers tokens [k*T, k*T + T + 1) (inputs the first T, targets shifted by one); a shard
// yields (ntok - 1) / T samples; after the last shard the stream starts again at the first.
// The global sample index counts samples from the start of training and is the only
// cursor state: every layout reads the same stream.
//
// Shuffled order (data.shuffle, io/data_order.h puts it together): sample i of a source of n
// samples is plain sample data_permute(n, key, i / n, i % n): epoch i / n visits every
// sample once, in an order of its own. The permutation is a pure function of (key, epoch,
// position), computed in a few integer operations per sample with no table: a keyed Feistel
// network (6 rounds of splitmix64's finaliser) on the smallest even power of two >= n,
// cycle-walked back into [0, n) (the walk ends: x < n lies on its own cycle; the domain is
// at most 4n, so it takes under 4 rounds on average). Shard order is not permuted separately:
// the permutation runs over the samples of all shards concatenated, so every sample of every
// shard can come at any position of an epoch already, and a second permutation of shard
// order would only relabel it.
#pragma once
#include "base/common.h"

typedef struct {
    char *path;
    int token_bytes; // 2 (uint16, version 1) or 4 (uint32, version 7)
    int64_t ntok;
    int64_t n_samples;    // (ntok - 1) / T
    int64_t first_sample; // cumulative sample index of this shard's sample 0
    void *map;            // mmap of the whole file
    size_t map_bytes;
} data_shard;

typedef struct {
    data_shard *shards;
    int n_shards;
    int T;
    int64_t n_samples; // one pass over all shards
    int64_t n_tokens;  // in all shards
} data_stream;

// Opens every shard matching `pattern` (a glob) for sequences of length T. Checks each
// file: magic/version, exact size 1024 + ntok * token size, every token < vocab_size, at
// least one sample overall (and `min_samples` in total). Errors name the file and the
// problem, add a HINT line, and return TRI_ERR_DATA. `what` names the config key
// ("data.train") in messages.
tri_status data_open(data_stream *ds, const char *pattern, int T, int vocab_size,
                     int64_t min_samples, const char *what);

// Copies global sample `index` (wrapping around the stream) into inputs[T], targets[T].
void data_sample(const data_stream *ds, int64_t index, int *inputs, int *targets);

// Fills inputs/targets (B, T) with samples first, first+1, ..., first+B-1.
void data_batch(const data_stream *ds, int64_t first, int B, int *inputs, int *targets);

// Global sample index of micro-batch `micro` of dp replica `dp_rank` in optimizer step
// `step` (0-based): step * global_batch + dp_rank * (global_batch / dp) + micro * micro_batch.
int64_t data_micro_batch_start(int64_t step, int global_batch, int dp, int dp_rank, int micro,
                               int micro_batch);

void data_close(data_stream *ds);

// Position `i` (< n) of epoch `epoch` of the shuffled order of n samples under `key`: a
// bijection of [0, n) for every (key, epoch), different for different keys and epochs.
uint64_t data_permute(uint64_t n, uint64_t key, uint64_t epoch, uint64_t i);

// Writes an llm.c token shard: uint16 tokens (version 1) when every token < 65536 and
// !force_u32, else uint32 (version 7). Returns TRI_ERR_DATA on an I/O error.
tri_status data_write_shard(const char *path, const uint32_t *tokens, int64_t ntok, int force_u32);

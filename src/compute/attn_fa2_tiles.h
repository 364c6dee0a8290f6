// attn_fa2_tiles.h: the tiling of the CUDA backend's FlashAttention-2 kernels
// (cuda/compute/backend_cuda_attn_fa2*.cu), written once for them and for the host model of
// their algorithm (tests/fa2_model.h) that tests/test_ops_attn.c checks against the
// double-precision references: block and tile sizes, the tiles and the 16-column chunks of a
// tile each warp computes, and the causal mask. Plain C, also compiled by nvcc for the device.
//
// A thread block is FA2_WARPS warps and owns FA2_BLOCK rows of one head: queries in the
// forward and the dQ pass, keys in the dK/dV pass; warp w owns rows [16 w, 16 w + 16) of them
// (one m16 row of MMA fragments). The other side streams through shared memory in tiles of
// FA2_TILE rows. FA2_BLOCK == FA2_TILE and both are multiples of 16, so tile boundaries fall on
// block boundaries: the only tile that the causal mask cuts is the diagonal one (the last key
// tile of a query block, the first query tile of a key block), and in every tile a block
// visits, each of its rows sees at least one key (the tile's first), so the online softmax's
// running maximum is finite after the first tile.
#pragma once

#ifdef __CUDACC__
#define FA2_FN __host__ __device__ static inline
#else
#define FA2_FN static inline
#endif

#define FA2_BLOCK 64 // rows a block owns
#define FA2_TILE 64  // rows of a streamed tile
#define FA2_WARPS 4
#define FA2_WROWS 16 // rows per warp
#define FA2_CHUNK 16 // columns per MMA k-step: the unit in which masked columns are skipped
#define FA2_LOG2E 1.4426950408889634f

// The causal mask: query q sees key k.
FA2_FN int fa2_visible(int q, int k) { return k <= q; }

// Forward and dQ pass: the key tiles of the query block at q0 (a multiple of FA2_BLOCK) are
// k0 = 0, FA2_TILE, ..., q0: this many.
FA2_FN int fa2_key_tiles(int q0) { return q0 / FA2_TILE + 1; }

// ... and of key tile k0, the warp whose rows start at row0 computes chunks [0, n): those
// holding a key <= its last row; every later column is masked for all 16 rows. (Keys past T
// never pass the mask of a row < T, and rows past T are never stored.)
FA2_FN int fa2_key_chunks(int row0, int k0) {
    const int n = (row0 + FA2_WROWS - k0 + FA2_CHUNK - 1) / FA2_CHUNK;
    return n < FA2_TILE / FA2_CHUNK ? n : FA2_TILE / FA2_CHUNK;
}

// dK/dV pass: the query tiles of the key block at k0 are q0 = k0, k0 + FA2_TILE, ... < T.
FA2_FN int fa2_first_query_tile(int k0) { return k0; }

// ... and of query tile q0, the warp whose keys start at key0 computes chunks [lo, hi): lo is
// the first holding a query >= its first key, hi ends the queries < T.
FA2_FN int fa2_query_chunk_lo(int key0, int q0) {
    const int lo = (key0 - q0) / FA2_CHUNK; // truncated: 0 for key0 < q0 + FA2_CHUNK
    return lo > 0 ? lo : 0;
}
FA2_FN int fa2_query_chunk_hi(int q0, int T) {
    const int n = T - q0 < FA2_TILE ? T - q0 : FA2_TILE;
    return (n + FA2_CHUNK - 1) / FA2_CHUNK;
}

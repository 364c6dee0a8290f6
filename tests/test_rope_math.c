// test_rope_math.c: src/compute/rope_math.h, the RoPE math that the CUDA attention kernels
// rotate q and k by as they load them (backend.attn_rope), against the CPU backend's rope_fwd
// and rope_bwd, which the model runs where the attention does not rotate. No GPU here: what
// this proves is the table (the same double angles, rounded once) and the index math the
// kernels are written with, applied on the host in the three ways the kernels apply them:
//   - element by element (the fp32 kernels' att_load: each element from its own value and its
//     pair partner's, by rope_pair / rope_partner / rope_rotated);
//   - eight at a time (the v1 tensor-core and FA2 kernels' cuda_rope_bf16x8: a chunk of 8 at a
//     multiple of 8 and its partner chunk HS/2 away, one side test for the chunk, the chunk's
//     table entries consecutive), here without the bf16 rounding those add;
//   - on the FA2 backward's accumulator fragments (fa2_unrope_acc: column 8 dn + 2 t + i % 2 of
//     a lane pairs with fragment dn + HS/16 of the same lane): every column reached once, its
//     partner the other half's.
// Shapes: NH / NKV multi-head and grouped-query (NKV 1 and NH / 2), head sizes 2 to 128 incl.
// HS / 2 odd, T past one tile, thetas 1e4 and Llama 3's 5e5. Each result equals the CPU's bit
// for bit (both compiled without FMA contraction, -std=c11; a device's FMA may move the last
// bit: the GPU op table allows for that, tests/op_cases.h).
#include "compute/backend.h"
#include "compute/rope_math.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int B, T, NH, NKV, HS;
    float theta;
} shape;

// A deterministic fill in [-2, 2).
static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (4.0 / 16777216.0) - 2.0);
    }
}

// The rotation (dir 1) or its inverse of the q and k heads of qkv into y, element by element
// (chunk 0) or in chunks of 8 (chunk 8; HS a multiple of 16), by the header alone.
static void header_rope(float *y, const float *x, const float *tab, const shape *s, float dir,
                        int chunk) {
    const int HS = s->HS;
    const size_t ld = (size_t)(s->NH + 2 * s->NKV) * HS;
    memcpy(y, x, (size_t)s->B * s->T * ld * sizeof(float));
    for (size_t row = 0; row < (size_t)s->B * s->T; row++) {
        const int t = (int)(row % s->T);
        for (int h = 0; h < s->NH + s->NKV; h++) {
            const float *xr = x + row * ld + (size_t)h * HS;
            float *yr = y + row * ld + (size_t)h * HS;
            if (!chunk) {
                for (int d = 0; d < HS; d++) {
                    const float *cs = tab + rope_at(t, rope_pair(d, HS), HS);
                    yr[d] = rope_rotated(xr[d], xr[rope_partner(d, HS)], cs[0], cs[1], d, HS, dir);
                }
                continue;
            }
            for (int d = 0; d < HS; d += 8) { // as cuda_rope_bf16x8 does, less its rounding
                const float *cs = tab + rope_at(t, rope_pair(d, HS), HS);
                const float *px = xr + d, *py = xr + rope_partner(d, HS);
                for (int k = 0; k < 8; k++)
                    yr[d + k] = rope_rotated(px[k], py[k], cs[2 * k], cs[2 * k + 1], d, HS, dir);
            }
        }
    }
}

// The FA2 backward's unrotation of a 16 x HS accumulator held as m16n8 C fragments, mirrored
// on the host: lane 4 g + t's acc[dn][i] is row g + 8 (i / 2), column 8 dn + 2 t + i % 2;
// fa2_unrope_acc pairs acc[dn][i] (dn < HS/16) with acc[dn + HS/16][i]. Returns whether every
// column of every row was reached exactly once with its partner in the other half, and applies
// the unrotation of rows (positions row0 + r) of g16 (16 x HS, row-major) in place.
static int fragment_unrope(float *g16, const float *tab, int row0, int HS) {
    int *seen = calloc((size_t)16 * HS, sizeof(int)), ok = 1;
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int dn = 0; dn < HS / 16; dn++)
            for (int i = 0; i < 4; i++) {
                const int r = g + 8 * (i >> 1), c = 8 * dn + 2 * t + (i & 1);
                const int c2 = 8 * (dn + HS / 16) + 2 * t + (i & 1);
                ok &= c < HS / 2 && c2 == rope_partner(c, HS) && rope_pair(c2, HS) == c;
                seen[r * HS + c]++, seen[r * HS + c2]++;
                const float *cs = tab + rope_at(row0 + r, c, HS);
                const float u = g16[r * HS + c], v = g16[r * HS + c2];
                g16[r * HS + c] = rope_rotated(u, v, cs[0], cs[1], c, HS, -1.0f);
                g16[r * HS + c2] = rope_rotated(v, u, cs[0], cs[1], c2, HS, -1.0f);
            }
    }
    for (int k = 0; k < 16 * HS; k++) ok &= seen[k] == 1;
    free(seen);
    return ok;
}

static int same_bits(const float *a, const float *b, size_t n, size_t *at) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float))) {
            *at = i;
            return 0;
        }
    return 1;
}

static void check_shape(backend *cpu, const shape *s) {
    const size_t ld = (size_t)(s->NH + 2 * s->NKV) * s->HS, n = (size_t)s->B * s->T * ld;
    float *x = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
    float *got = malloc(n * sizeof(float));
    float *tab = malloc(rope_table_floats(s->T, s->HS) * sizeof(float));
    rope_table_fill(tab, s->T, s->HS, (double)s->theta);
    fill(x, n, (unsigned)(s->T * 131 + s->HS));
    char name[160];
    for (int dir = 1; dir >= -1; dir -= 2) {
        memcpy(ref, x, n * sizeof(float));
        if (dir > 0) cpu->rope_fwd(cpu, ref, s->B, s->T, s->NH, s->NKV, s->HS, s->theta);
        else cpu->rope_bwd(cpu, ref, s->B, s->T, s->NH, s->NKV, s->HS, s->theta);
        for (int chunk = 0; chunk <= (s->HS % 16 == 0 ? 8 : 0); chunk += 8) {
            header_rope(got, x, tab, s, (float)dir, chunk);
            size_t at = 0;
            snprintf(name, sizeof name,
                     "rope_math %s %s = cpu rope_%s B=%d T=%d NH=%d NKV=%d HS=%d theta=%g",
                     dir > 0 ? "rotation" : "inverse", chunk ? "by chunks of 8" : "by element",
                     dir > 0 ? "fwd" : "bwd", s->B, s->T, s->NH, s->NKV, s->HS, (double)s->theta);
            const int same = same_bits(got, ref, n, &at); // before the message reads `at`
            TEST_CHECK(same, name, "element %zu: %.9g vs the cpu's %.9g", at, (double)got[at],
                       (double)ref[at]);
        }
    }
    // The FA2 fragments: 16 rows of a q head's gradient from position row0 (rows past T left
    // out, as the kernel leaves them), against rope_bwd on the same rows.
    if (s->HS % 16 == 0 && s->T >= 16) {
        const int row0 = s->T - 16, HS = s->HS;
        float *g16 = malloc((size_t)16 * HS * sizeof(float));
        memcpy(ref, x, n * sizeof(float));
        cpu->rope_bwd(cpu, ref, s->B, s->T, s->NH, s->NKV, s->HS, s->theta);
        for (int r = 0; r < 16; r++) memcpy(g16 + r * HS, x + (size_t)(row0 + r) * ld, HS * 4);
        const int layout = fragment_unrope(g16, tab, row0, HS);
        int same = 1;
        for (int r = 0; r < 16; r++)
            same &= !memcmp(g16 + r * HS, ref + (size_t)(row0 + r) * ld, HS * sizeof(float));
        snprintf(name, sizeof name, "rope_math FA2 fragment unrotation = cpu rope_bwd HS=%d T=%d",
                 HS, s->T);
        TEST_CHECK(layout && same, name, "%s",
                   !layout ? "a column missed or paired twice" : "values differ from the cpu's");
        free(g16);
    }
    free(x), free(ref), free(got), free(tab);
}

int main(void) {
    log_init();
    backend *cpu;
    if (backend_cpu_create(&cpu, 1) != TRI_OK) return 1;
    const shape shapes[] = {
        {2, 7, 4, 2, 6, 10000.0f},    {2, 19, 3, 3, 2, 10000.0f},    {1, 70, 4, 1, 16, 10000.0f},
        {2, 77, 8, 4, 64, 10000.0f},  {1, 130, 9, 3, 64, 10000.0f},  {1, 100, 6, 3, 48, 10000.0f},
        {1, 67, 4, 2, 80, 10000.0f},  {1, 64, 4, 1, 128, 500000.0f}, {1, 300, 8, 2, 128, 500000.0f},
        {1, 33, 2, 1, 10, 500000.0f},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_shape(cpu, &shapes[i]);
    // The index rules the chunked kernels rely on, for every head size they take (multiples
    // of 16 to 128): the 8 elements of a chunk share its side of HS/2, their partners and
    // table pairs are consecutive.
    int ok = 1;
    for (int HS = 16; HS <= 128; HS += 16)
        for (int d = 0; d < HS; d += 8)
            for (int k = 0; k < 8; k++)
                ok &= ((d + k < HS / 2) == (d < HS / 2)) &&
                      rope_partner(d + k, HS) == rope_partner(d, HS) + k &&
                      rope_pair(d + k, HS) == rope_pair(d, HS) + k &&
                      rope_at(7, rope_pair(d + k, HS), HS) ==
                          rope_at(7, rope_pair(d, HS), HS) + 2 * (size_t)k;
    TEST_CHECK(ok, "rope_math chunks of 8 keep one side, consecutive partners and table pairs",
               "a head size breaks it");
    cpu->destroy(cpu);
    TEST_EXIT();
}

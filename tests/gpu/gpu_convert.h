// gpu_convert.h: the bf16 conversion ops of a backend (to_bf16, from_bf16, add_to_bf16)
// against src/base/bf16.h bit for bit (issue 17: the device's conversion kernels, which every
// bf16 run goes through). Included by tests/gpu/test_gpu_ops.c; test_conversions(b, tag) is
// the entry point, on the CUDA backend (or a CPU backend in its place, --self-test).
//
// The inputs are chosen by structure, not drawn at random: every one of the 65536 upper
// halves of a float with the lower halves that decide its rounding (0, the smallest, a tie,
// just below and above a tie, the largest, and two random ones): ties to even at odd and even
// bf16 values, denormals, infinities, overflow to infinity, negative zero, and NaNs whose
// payload lies only in the lower half (which truncation would turn into infinities). from_bf16
// takes all 65536 bf16 values; add_to_bf16 every bf16 value plus an addend that lands the sum
// on a tie, one near the value, a denormal one and random bits.
//
// The rule: a value that is no NaN converts to bf16.h's bits exactly; a NaN converts to a NaN
// (to_bf16 and add_to_bf16: a quiet one, bf16.h's promise). NaN payloads are not data and
// differ between implementations (CUDA's software path returns 0x7fff for every NaN, bf16.h
// keeps the sign and the upper payload), so their bits are counted and printed, not checked.
// Each op also runs on a sub-range that starts one element in (a misaligned pointer) and
// stops short of a multiple of any vector width, and must leave the elements around it as
// they were.
#pragma once
#include "../ops_ref.h"
#include "../testlib.h"
#include "base/bf16.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CONV_LOWS 8 // lower halves per upper half of the to_bf16 inputs

static uint32_t conv_bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float conv_float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static int conv_is_nan16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu); }
static int conv_is_nan32(uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu); }

// splitmix64: the random lower halves and addends, the same on every backend.
static uint64_t conv_rng = 0x9E3779B97F4A7C15ULL;
static uint32_t conv_rand32(void) {
    uint64_t z = (conv_rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

// What one op's results were: wrong non-NaN bits, NaNs that came out as no (quiet) NaN, NaN
// payloads other than bf16.h's (reported only), and elements outside the range that moved.
typedef struct {
    size_t n, wrong, bad_nan, nan_in, other_payload, outside;
    size_t first; // the first wrong element (n when none)
} conv_tally;

static void conv_report(const char *op, const char *range, const conv_tally *t, const char *example,
                        const char *tag) {
    char name[200];
    snprintf(name, sizeof name, "%s against bf16.h bit for bit, %s%s", op, range, tag);
    TEST_CHECK(!t->wrong && !t->bad_nan && !t->outside, name,
               "%zu of %zu values differ, %zu NaNs came out as no %sNaN, %zu elements outside "
               "the range changed%s%s",
               t->wrong, t->n, t->bad_nan, strcmp(op, "from_bf16") ? "quiet " : "", t->outside,
               t->first < t->n ? "; first: " : "", t->first < t->n ? example : "");
    if (t->other_payload)
        printf("# %s, %s: %zu of %zu NaN inputs give NaN bits other than bf16.h's (allowed: "
               "payloads are not data)\n",
               op, range, t->other_payload, t->nan_in);
}

// Runs to_bf16 on x[lo, hi) (n floats in all) and checks every element of the result.
static void conv_to_bf16(backend *b, const float *x, size_t n, size_t lo, size_t hi,
                         const char *range, const char *tag) {
    float *dx = b->alloc(b, n * sizeof(float));
    uint16_t *dh = b->alloc(b, n * sizeof(uint16_t)), *got = xmalloc(n * sizeof(uint16_t));
    TRI_ASSERT(dx && dh);
    uint16_t *fill = xmalloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) fill[i] = 0x5a5a; // must survive outside [lo, hi)
    b->copy_to_device(b, dx, x, n * sizeof(float));
    b->copy_to_device(b, dh, fill, n * sizeof(uint16_t));
    b->to_bf16(b, dh + lo, dx + lo, hi - lo);
    b->copy_to_host(b, got, dh, n * sizeof(uint16_t));
    conv_tally t = {.n = n, .first = n};
    char example[96] = "";
    for (size_t i = 0; i < n; i++) {
        if (i < lo || i >= hi) {
            t.outside += got[i] != 0x5a5a;
            continue;
        }
        const uint32_t u = conv_bits_of(x[i]);
        const uint16_t want = bf16_from_f32(x[i]);
        int bad;
        if (conv_is_nan32(u)) {
            t.nan_in++;
            t.other_payload += got[i] != want;
            bad = !conv_is_nan16(got[i]) || !(got[i] & 0x0040u);
            t.bad_nan += bad;
        } else {
            bad = got[i] != want;
            t.wrong += bad;
        }
        if (bad && t.first == n) {
            t.first = i;
            snprintf(example, sizeof example, "0x%08x -> 0x%04x, bf16.h 0x%04x", (unsigned)u,
                     (unsigned)got[i], (unsigned)want);
        }
    }
    conv_report("to_bf16", range, &t, example, tag);
    b->free(b, dx), b->free(b, dh);
    free(got), free(fill);
}

// Runs from_bf16 on h[lo, hi) and checks every element of the result.
static void conv_from_bf16(backend *b, const uint16_t *h, size_t n, size_t lo, size_t hi,
                           const char *range, const char *tag) {
    uint16_t *dh = b->alloc(b, n * sizeof(uint16_t));
    float *dx = b->alloc(b, n * sizeof(float)), *got = xmalloc(n * sizeof(float));
    TRI_ASSERT(dx && dh);
    float *fill = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) fill[i] = 1234.5f;
    b->copy_to_device(b, dh, h, n * sizeof(uint16_t));
    b->copy_to_device(b, dx, fill, n * sizeof(float));
    b->from_bf16(b, dx + lo, dh + lo, hi - lo);
    b->copy_to_host(b, got, dx, n * sizeof(float));
    conv_tally t = {.n = n, .first = n};
    char example[96] = "";
    for (size_t i = 0; i < n; i++) {
        const uint32_t g = conv_bits_of(got[i]), want = conv_bits_of(bf16_to_f32(h[i]));
        if (i < lo || i >= hi) {
            t.outside += g != conv_bits_of(1234.5f);
            continue;
        }
        int bad;
        if (conv_is_nan16(h[i])) {
            t.nan_in++;
            t.other_payload += g != want;
            bad = !conv_is_nan32(g);
            t.bad_nan += bad;
        } else {
            bad = g != want;
            t.wrong += bad;
        }
        if (bad && t.first == n) {
            t.first = i;
            snprintf(example, sizeof example, "0x%04x -> 0x%08x, bf16.h 0x%08x", (unsigned)h[i],
                     (unsigned)g, (unsigned)want);
        }
    }
    conv_report("from_bf16", range, &t, example, tag);
    b->free(b, dx), b->free(b, dh);
    free(got), free(fill);
}

// Runs add_to_bf16 (acc[i] = round(acc[i] + x[i])) on [lo, hi) and checks every element.
static void conv_add_to_bf16(backend *b, const uint16_t *acc, const float *x, size_t n, size_t lo,
                             size_t hi, const char *range, const char *tag) {
    uint16_t *dh = b->alloc(b, n * sizeof(uint16_t)), *got = xmalloc(n * sizeof(uint16_t));
    float *dx = b->alloc(b, n * sizeof(float));
    TRI_ASSERT(dx && dh);
    b->copy_to_device(b, dh, acc, n * sizeof(uint16_t));
    b->copy_to_device(b, dx, x, n * sizeof(float));
    b->add_to_bf16(b, dh + lo, dx + lo, hi - lo);
    b->copy_to_host(b, got, dh, n * sizeof(uint16_t));
    conv_tally t = {.n = n, .first = n};
    char example[128] = "";
    for (size_t i = 0; i < n; i++) {
        if (i < lo || i >= hi) {
            t.outside += got[i] != acc[i];
            continue;
        }
        const float sum = bf16_to_f32(acc[i]) + x[i]; // fp32, round to nearest: the device's
        const uint16_t want = bf16_from_f32(sum);
        int bad;
        if (conv_is_nan32(conv_bits_of(sum))) {
            t.nan_in++;
            t.other_payload += got[i] != want;
            bad = !conv_is_nan16(got[i]) || !(got[i] & 0x0040u);
            t.bad_nan += bad;
        } else {
            bad = got[i] != want;
            t.wrong += bad;
        }
        if (bad && t.first == n) {
            t.first = i;
            snprintf(example, sizeof example, "0x%04x + 0x%08x -> 0x%04x, bf16.h 0x%04x",
                     (unsigned)acc[i], (unsigned)conv_bits_of(x[i]), (unsigned)got[i],
                     (unsigned)want);
        }
    }
    conv_report("add_to_bf16", range, &t, example, tag);
    b->free(b, dx), b->free(b, dh);
    free(got);
}

static void test_conversions(backend *b, const char *tag) {
    conv_rng = 0x9E3779B97F4A7C15ULL;
    // to_bf16: every upper half with the lower halves that decide its rounding
    const size_t n32 = (size_t)65536 * CONV_LOWS;
    float *x = xmalloc(n32 * sizeof(float));
    for (uint32_t hi = 0; hi < 65536; hi++) {
        const uint32_t lows[CONV_LOWS] = {0x0000,
                                          0x0001,
                                          0x7fff,
                                          0x8000,
                                          0x8001,
                                          0xffff,
                                          conv_rand32() & 0xffff,
                                          conv_rand32() & 0xffff};
        for (int k = 0; k < CONV_LOWS; k++)
            x[(size_t)hi * CONV_LOWS + k] = conv_float_of(hi << 16 | lows[k]);
    }
    conv_to_bf16(b, x, n32, 0, n32, "every upper half, 8 lower halves each", tag);
    conv_to_bf16(b, x, n32, 1, n32 - 3, "from element 1 to n - 3", tag);

    // from_bf16: every bf16 value
    const size_t n16 = 65536;
    uint16_t *h = xmalloc(n16 * sizeof(uint16_t));
    for (size_t i = 0; i < n16; i++) h[i] = (uint16_t)i;
    conv_from_bf16(b, h, n16, 0, n16, "all 65536 values", tag);
    conv_from_bf16(b, h, n16, 1, n16 - 3, "from element 1 to n - 3", tag);

    // add_to_bf16: every bf16 value with 4 addends: half its unit in the last place (a tie
    // of the sum, either sign), a random one of about its size, a denormal, random bits
    const size_t na = n16 * 4;
    uint16_t *acc = xmalloc(na * sizeof(uint16_t));
    float *add = xmalloc(na * sizeof(float));
    for (size_t i = 0; i < na; i++) {
        const uint16_t v = (uint16_t)(i / 4);
        const uint32_t r = conv_rand32();
        const int exp = (v >> 7) & 0xff; // the bf16 exponent: a unit is 2^(exp - 134)
        float a;
        switch (i % 4) {
        case 0: a = ldexpf(r & 1 ? 1.0f : -1.0f, (exp ? exp : 1) - 135); break;
        case 1: a = bf16_to_f32(v) * ((float)(r % 2001) / 1000.0f - 1.0f); break;
        case 2: a = conv_float_of((r & 0x807fffffu) | 1u); break; // a denormal, either sign
        default: a = conv_float_of(r); break;
        }
        acc[i] = v, add[i] = a;
    }
    conv_add_to_bf16(b, acc, add, na, 0, na, "every bf16 value, 4 addends each", tag);
    conv_add_to_bf16(b, acc, add, na, 1, na - 3, "from element 1 to n - 3", tag);
    free(x), free(h), free(acc), free(add);
}

// test_bf16: bfloat16 conversion (src/bf16.h). Named cases (ties to even, NaN, infinities,
// overflow, subnormals) and, for a million random floats of every exponent, the defining
// property checked by another route: the result is one of the two bf16 values around x
// (truncation and the next one up in magnitude, computed in double), the nearer, and on a
// tie the even one.
#include <stdint.h>
#include <string.h>

#include "base/bf16.h"
#include "testlib.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main(void) {
    struct {
        float x;
        uint16_t want;
        const char *name;
    } cases[] = {
        {1.0f, 0x3f80, "bf16_one"},
        {from_bits(0x3f808000u), 0x3f80, "bf16_tie_to_even_down"}, // 1 + 2^-8
        {from_bits(0x3f818000u), 0x3f82, "bf16_tie_to_even_up"},   // 1 + 3 * 2^-8
        {from_bits(0x3f808001u), 0x3f81, "bf16_above_tie_rounds_up"},
        {-2.5f, 0xc020, "bf16_negative"},
        {INFINITY, 0x7f80, "bf16_inf"},
        {-INFINITY, 0xff80, "bf16_minus_inf"},
        {from_bits(0x7f7fffffu), 0x7f80, "bf16_overflow_to_inf"}, // FLT_MAX
        {from_bits(0x00010000u), 0x0001, "bf16_subnormal"},
        {0.0f, 0x0000, "bf16_zero"},
        {-0.0f, 0x8000, "bf16_minus_zero"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = bf16_from_f32(cases[i].x);
        TEST_CHECK(got == cases[i].want, cases[i].name, "0x%08x -> 0x%04x, want 0x%04x",
                   bits(cases[i].x), got, cases[i].want);
    }
    uint16_t nan = bf16_from_f32(from_bits(0x7f800001u)); // a NaN whose payload is low bits
    TEST_CHECK(isnan(bf16_to_f32(nan)), "bf16_nan_stays_nan", "got 0x%04x", nan);

    uint64_t state = 88172645463325252ull;
    long bad = 0, exact = 0;
    for (int i = 0; i < 1000000; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        uint32_t u = (uint32_t)state & 0xff7fffffu; // every sign and exponent except inf/NaN
        float x = from_bits(u);
        // The two candidates in double: truncation, and one bf16 step (2^(e-134)) further
        // from zero, which past the largest bf16 is 2^128 and rounds to infinity.
        float lo = from_bits(u & 0xffff0000u), hi = from_bits((u & 0xffff0000u) + 0x10000u);
        int e = (int)((u >> 23) & 0xff);
        double step = ldexp(1.0, (e ? e : 1) - 134), hi_d = fabs((double)lo) + step;
        float got = bf16_to_f32(bf16_from_f32(x));
        double dl = fabs(fabs((double)x) - fabs((double)lo)), dh = fabs(hi_d - fabs((double)x));
        float want = dl < dh ? lo : dh < dl ? hi : ((bits(lo) >> 16) & 1) ? hi : lo;
        bad += bits(got) != bits(want);
        exact += bf16_from_f32(bf16_to_f32((uint16_t)(u >> 16))) == (uint16_t)(u >> 16);
    }
    TEST_CHECK(bad == 0, "bf16_nearest_even_random", "%ld of 1000000 random floats", bad);
    TEST_CHECK(exact == 1000000, "bf16_round_trip_exact", "%ld of 1000000", exact);
    TEST_EXIT();
}

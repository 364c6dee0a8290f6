// bf16.h: bfloat16 storage (the upper 16 bits of an IEEE float), converted with rounding to
// nearest, ties to even, as CUDA's __float2bfloat16 and PyTorch do. Math stays in fp32.
#pragma once
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) // NaN: keep it a (quiet) NaN
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); // round to nearest, ties to even (overflow -> inf)
    return (uint16_t)(u >> 16);
}

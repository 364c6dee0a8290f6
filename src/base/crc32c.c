// crc32c.c: CRC-32C with the SSE4.2 crc32 instruction where the build targets it (8 bytes
// per instruction), else slicing-by-8 tables. Both give the same value.
#include "base/crc32c.h"

#include <string.h>

#if defined(__SSE4_2__)
#include <nmmintrin.h>

uint32_t crc32c_update(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; n--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

#else

static uint32_t table[8][256];
static int table_ready;

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++)
            table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xff];
    table_ready = 1;
}

uint32_t crc32c_update(uint32_t crc, const void *data, size_t n) {
    if (!table_ready) make_table(); // idempotent: racing threads write the same values
    const unsigned char *p = data;
    uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) { // little-endian words
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
    }
    for (; n; n--) c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#endif

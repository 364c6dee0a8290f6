// crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every
// checkpoint region. crc32c("123456789") = 0xE3069283.
#pragma once
#include <stddef.h>
#include <stdint.h>

// Extends `crc` (0 to start) over n bytes.
uint32_t crc32c_update(uint32_t crc, const void *data, size_t n);

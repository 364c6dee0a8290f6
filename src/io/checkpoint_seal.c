// checkpoint_seal.c: what manifest.yaml's reader looks at in the raw text before the YAML
// parser sees it (checkpoint_manifest.c): the seal line of version 2 on (written by rank 0,
// checkpoint.c) and the top-level KEY: VALUE lines (format and version).
#include "io/checkpoint_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "base/crc32c.h"

void manifest_seal(const char *text, size_t n, char *line, size_t cap) {
    snprintf(line, cap, "%s: 0x%08x\n", CKPT_SEAL_KEY, crc32c_update(0, text, n));
}

// The last line of text must be the seal. *body: where it starts (the bytes it covers end
// there); *crc: the value it records. 0 when there is no well-formed seal line.
int manifest_find_seal(const char *text, size_t n, size_t *body, uint32_t *crc) {
    if (n == 0 || text[n - 1] != '\n') return 0;
    size_t start = n - 1;
    while (start > 0 && text[start - 1] != '\n') start--;
    const char *line = text + start;
    const size_t key = strlen(CKPT_SEAL_KEY);
    // "manifest_crc32c: 0x" and 8 hex digits, then '\n'
    if (n - start != key + 2 + 2 + 8 + 1 || strncmp(line, CKPT_SEAL_KEY ": 0x", key + 4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        int c = (unsigned char)line[key + 4 + i];
        if (!isxdigit(c)) return 0;
        v = v * 16 + (uint32_t)(isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
    }
    *body = start, *crc = v;
    return 1;
}

// The value of the first line "KEY: VALUE" that starts at column 0 (the manifest's own
// fields, before the YAML parser sees the file). 0 when there is none.
int manifest_scan_key(const char *text, size_t n, const char *key, char *out, size_t cap) {
    const size_t klen = strlen(key);
    for (size_t at = 0; at < n;) {
        const char *eol = memchr(text + at, '\n', n - at);
        size_t len = eol ? (size_t)(eol - (text + at)) : n - at;
        if (len > klen && !strncmp(text + at, key, klen) && text[at + klen] == ':') {
            size_t v = at + klen + 1, end = at + len;
            while (v < end && text[v] == ' ') v++;
            while (end > v && (text[end - 1] == ' ' || text[end - 1] == '\r')) end--;
            if (end - v >= cap) return 0;
            memcpy(out, text + v, end - v);
            out[end - v] = '\0';
            return 1;
        }
        at += len + 1;
    }
    return 0;
}

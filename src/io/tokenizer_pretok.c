// tokenizer_pretok.c: the pre-tokenizer regexes of GPT-2 and Llama 3 as hand-written
// matchers over code points, with the Unicode classes of tokenizer_unicode.c and the
// byte-level alphabet.
//
// tokenizers runs these regexes with Oniguruma: alternatives are tried left to right at a
// position and the first that matches wins (not the longest), quantifiers are greedy and
// backtrack. The matchers below follow that order alternative by alternative; every
// character starts a match of both patterns (\p{L}, \p{N}, \s and their complement are all
// covered), so the matches tile the text.
#include "io/tokenizer_internal.h"

#include <pthread.h>
#include <string.h>

const char TOK_REGEX_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char TOK_REGEX_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// ---- classes: one byte per code point (1.1 MB), filled once from the generated runs.
static uint8_t *g_class;
static pthread_once_t g_class_once = PTHREAD_ONCE_INIT;

static void class_init(void) {
    uint8_t *t = xcalloc(0x110000, 1);
    for (int i = 0; i < TOK_UNICODE_N_RUNS; i++) {
        const tok_unicode_run *r = &TOK_UNICODE_RUNS[i];
        memset(t + r->lo, r->bits, r->hi - r->lo + 1);
    }
    g_class = t;
}

uint8_t tok_class(uint32_t cp) {
    if (!g_class) pthread_once(&g_class_once, class_init);
    return cp <= 0x10FFFF ? g_class[cp] : 0;
}

uint32_t tok_utf8_next(const uint8_t *s, size_t n, int *len) {
    uint8_t c = s[0];
    if (c < 0x80 || n < 2) return *len = 1, c;
    if (c < 0xE0) return *len = 2, ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    if (c < 0xF0 || n < 4) {
        if (n < 3) return *len = 1, c; // cannot happen on valid UTF-8
        return *len = 3,
               ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    return *len = 4, ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                         ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

// ---- the byte-level alphabet (GPT-2's bytes_to_unicode): printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100 + their rank among them.
static int byte_is_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_char(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (int x = 0; x < b; x++) n += !byte_is_printable(x);
    return 0x100 + n;
}

int tok_char_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    for (int b = 0; b < 256; b++)
        if (!byte_is_printable(b) && n-- == 0) return b;
    return -1;
}

// ---- the matchers. cls_at gives the class of the character at s[i] and its length.
typedef struct {
    const uint8_t *s;
    size_t n;
} text;

static inline uint8_t cls_at(text t, size_t i, int *len, uint32_t *cp_out) {
    int l;
    uint32_t cp = tok_utf8_next(t.s + i, t.n - i, &l);
    *len = l;
    if (cp_out) *cp_out = cp;
    return tok_class(cp);
}

#define IS_OTHER(c) (((c) & (TOK_CL_L | TOK_CL_N | TOK_CL_WS)) == 0)

// End of the run of characters from i whose class has any of `want` (or, with want 0, none
// of L, N, WS); at most `max` characters (0: no limit).
static size_t run_end(text t, size_t i, uint8_t want, int max) {
    int count = 0, l;
    while (i < t.n && (max == 0 || count < max)) {
        uint8_t c = cls_at(t, i, &l, NULL);
        if (want ? !(c & want) : !IS_OTHER(c)) break;
        i += (size_t)l;
        count++;
    }
    return i;
}

// The whitespace alternatives shared by both patterns: \s+(?!\S) then \s+, at i (a space
// character). ws_end is the end of the maximal whitespace run from i.
static size_t whitespace_tail(text t, size_t i, size_t ws_end) {
    if (ws_end == t.n) return ws_end; // (?!\S) holds at the end of the text
    // Followed by a non-space: the greedy \s+ backs off one character, which leaves a
    // character that (?!\S) accepts, unless the run is one character long (then \s+).
    size_t last = ws_end; // start of the run's last character
    do last--;
    while ((t.s[last] & 0xC0) == 0x80);
    return last > i ? last : ws_end;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
static size_t match_gpt2(text t, size_t i) {
    const uint8_t *s = t.s;
    if (s[i] == '\'' && i + 1 < t.n) {
        uint8_t a = s[i + 1], b = i + 2 < t.n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return i + 3;
    }
    int l;
    size_t j = i;
    if (s[i] == ' ' && i + 1 < t.n) j = i + 1; // the optional space of the next three
    uint8_t c = cls_at(t, j, &l, NULL);
    if (c & TOK_CL_L) return run_end(t, j, TOK_CL_L, 0);
    if (c & TOK_CL_N) return run_end(t, j, TOK_CL_N, 0);
    if (IS_OTHER(c)) return run_end(t, j, 0, 0);
    // j holds whitespace: either i itself, or the character after a space at i.
    return whitespace_tail(t, i, run_end(t, i, TOK_CL_WS, 0));
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at i: the end, or 0. Case-insensitive as Oniguruma folds
// cases: s also matches U+017F LATIN SMALL LETTER LONG S (which folds to s).
static size_t llama3_contraction(text t, size_t i) {
    if (t.s[i] != '\'' || i + 1 >= t.n) return 0;
    const uint8_t *s = t.s + i + 1;
    size_t left = t.n - i - 1;
    uint8_t a = s[0] | 0x20, b = left > 1 ? (s[1] | 0x20) : 0;
    if (s[0] < 0x80) {
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return i + 3;
    } else if (left >= 2 && s[0] == 0xC5 && s[1] == 0xBF) { // U+017F
        return i + 3;
    }
    return 0;
}

// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
static size_t match_llama3(text t, size_t i) {
    size_t e = llama3_contraction(t, i);
    if (e) return e;
    int l, l2;
    uint8_t c = cls_at(t, i, &l, NULL);
    if (c & TOK_CL_L) return run_end(t, i, TOK_CL_L, 0);
    const int newline = t.s[i] == '\r' || t.s[i] == '\n';
    if (!(c & TOK_CL_N) && !newline && i + (size_t)l < t.n &&
        (cls_at(t, i + (size_t)l, &l2, NULL) & TOK_CL_L))
        return run_end(t, i + (size_t)l, TOK_CL_L, 0); // one leading non-letter
    if (c & TOK_CL_N) return run_end(t, i, TOK_CL_N, 3);
    size_t j = i;
    if (t.s[i] == ' ' && i + 1 < t.n) j = i + 1;
    if (IS_OTHER(cls_at(t, j, &l2, NULL))) {
        size_t k = run_end(t, j, 0, 0);
        while (k < t.n && (t.s[k] == '\r' || t.s[k] == '\n')) k++;
        return k;
    }
    // Whitespace at i. \s*[\r\n]+: the greedy \s* backs off to the run's last newline.
    size_t ws_end = run_end(t, i, TOK_CL_WS, 0);
    for (size_t k = ws_end; k > i; k--)
        if (t.s[k - 1] == '\r' || t.s[k - 1] == '\n') return k;
    return whitespace_tail(t, i, ws_end);
}

size_t tok_pattern_match(tok_pattern pat, const uint8_t *s, size_t n, size_t i) {
    text t = {s, n};
    if (pat == TOK_PAT_GPT2) return match_gpt2(t, i);
    if (pat == TOK_PAT_LLAMA3) return match_llama3(t, i);
    return n;
}

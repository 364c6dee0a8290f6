// json.c: the strict JSON reader of json.h: recursive descent over the text, values and
// decoded strings carved from an arena of blocks, children collected on a stack and copied
// into the arena when their container closes.
#include "io/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_block;

struct json_doc {
    arena_block *blocks; // newest first; the oldest is kept by json_parse's reset
    void **stack;        // children of the containers being parsed (values, or members)
    size_t stack_n, stack_cap;
};

typedef struct {
    json_doc *doc;
    const unsigned char *p, *end, *line_start;
    int line, max_depth;
    char *err;
    size_t errn;
    int failed;
} parser;

json_doc *json_doc_new(void) { return xcalloc(1, sizeof(json_doc)); }

void json_doc_free(json_doc *doc) {
    if (!doc) return;
    for (arena_block *b = doc->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(doc->stack);
    free(doc);
}

static void *arena_alloc(json_doc *doc, size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    arena_block *b = doc->blocks;
    if (!b || b->cap - b->used < bytes) {
        size_t cap = bytes > (1u << 20) ? bytes : (1u << 20);
        b = xmalloc(sizeof(arena_block) + cap);
        b->used = 0, b->cap = cap, b->next = doc->blocks;
        doc->blocks = b;
    }
    void *out = b->data + b->used;
    b->used += bytes;
    return out;
}

static void push(json_doc *doc, void *item) {
    if (doc->stack_n == doc->stack_cap) {
        doc->stack_cap = doc->stack_cap ? 2 * doc->stack_cap : 256;
        void **grown = realloc(doc->stack, doc->stack_cap * sizeof(void *));
        if (!grown) {
            fprintf(stderr, "trident: out of host memory parsing JSON\n");
            abort();
        }
        doc->stack = grown;
    }
    doc->stack[doc->stack_n++] = item;
}

static void *fail(parser *ps, const char *fmt, ...) {
    if (ps->failed) return NULL;
    ps->failed = 1;
    int col = (int)(ps->p - ps->line_start) + 1;
    int k = snprintf(ps->err, ps->errn, "line %d, column %d: ", ps->line, col);
    if (k < 0 || (size_t)k >= ps->errn) return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + k, ps->errn - (size_t)k, fmt, ap);
    va_end(ap);
    return NULL;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end) {
        unsigned char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->line_start = ps->p + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
        ps->p++;
    }
}

// Length of the valid UTF-8 sequence at s (1..4), or 0.
static int utf8_seq(const uint8_t *s, const uint8_t *end) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
    else return 0;
    if (end - s < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

int json_utf8_valid(const uint8_t *text, size_t n, size_t *bad_at) {
    const uint8_t *s = text, *end = text + n;
    while (s < end) {
        if (*s < 0x80) { // ASCII runs, 8 bytes at a time where aligned data allows
            s++;
            while (end - s >= 8) {
                uint64_t w;
                memcpy(&w, s, 8);
                if (w & 0x8080808080808080ull) break;
                s += 8;
            }
            continue;
        }
        int k = utf8_seq(s, end);
        if (!k) {
            if (bad_at) *bad_at = (size_t)(s - text);
            return 0;
        }
        s += k;
    }
    return 1;
}

static int hex4(const unsigned char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = (v << 4) | (uint32_t)d;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6)), o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

// A string at ps->p (on its opening quote), decoded into the arena. The decoded form is
// never longer than the source (an escape of 6 or 12 bytes yields at most 4).
static int parse_string(parser *ps, const char **s_out, size_t *len_out) {
    const unsigned char *p = ps->p + 1, *start = p;
    while (p < ps->end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
    const unsigned char *scan = p;
    while (scan < ps->end && *scan != '"') scan += *scan == '\\' && scan + 1 < ps->end ? 2 : 1;
    unsigned char *out = arena_alloc(ps->doc, (size_t)(scan - start) + 1), *o = out;
    memcpy(o, start, (size_t)(p - start));
    o += p - start;
    for (;;) {
        if (p >= ps->end) return ps->p = p, fail(ps, "unterminated string"), 0;
        unsigned char c = *p;
        if (c == '"') break;
        if (c < 0x20) return ps->p = p, fail(ps, "raw control character 0x%02X in a string", c), 0;
        if (c >= 0x80) {
            int k = utf8_seq(p, ps->end);
            if (!k) return ps->p = p, fail(ps, "invalid UTF-8 byte 0x%02X in a string", c), 0;
            memcpy(o, p, (size_t)k);
            o += k, p += k;
            continue;
        }
        if (c != '\\') {
            *o++ = c, p++;
            continue;
        }
        if (p + 1 >= ps->end) return ps->p = p, fail(ps, "unterminated string"), 0;
        unsigned char e = p[1];
        p += 2;
        switch (e) {
        case '"': *o++ = '"'; continue;
        case '\\': *o++ = '\\'; continue;
        case '/': *o++ = '/'; continue;
        case 'b': *o++ = '\b'; continue;
        case 'f': *o++ = '\f'; continue;
        case 'n': *o++ = '\n'; continue;
        case 'r': *o++ = '\r'; continue;
        case 't': *o++ = '\t'; continue;
        case 'u': break;
        default: return ps->p = p - 2, fail(ps, "invalid escape \\%c in a string", e), 0;
        }
        uint32_t cp, lo;
        if (ps->end - p < 4 || !hex4(p, &cp))
            return ps->p = p - 2, fail(ps, "\\u needs four hex digits"), 0;
        p += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return ps->p = p - 6, fail(ps, "lone low surrogate \\u%04X in a string", cp), 0;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (ps->end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return ps->p = p - 6, fail(ps, "lone high surrogate \\u%04X in a string", cp), 0;
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        o += put_utf8(o, cp);
    }
    *o = '\0';
    *s_out = (const char *)out;
    *len_out = (size_t)(o - out);
    ps->p = p + 1;
    return 1;
}

static int parse_number(parser *ps, double *out) {
    const unsigned char *p = ps->p, *s = p;
    if (p < ps->end && *p == '-') p++;
    if (p >= ps->end || *p < '0' || *p > '9') return ps->p = p, fail(ps, "invalid number"), 0;
    if (*p == '0') p++;
    else
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    if (p < ps->end && *p == '.') {
        p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return ps->p = p, fail(ps, "a digit must follow '.'"), 0;
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return ps->p = p, fail(ps, "a digit must follow the exponent"), 0;
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    char buf[64];
    size_t n = (size_t)(p - s);
    if (n >= sizeof buf) { // long numbers: strtod on a NUL-terminated copy
        char *big = xmalloc(n + 1);
        memcpy(big, s, n);
        big[n] = '\0';
        *out = strtod(big, NULL);
        free(big);
    } else {
        memcpy(buf, s, n);
        buf[n] = '\0';
        *out = strtod(buf, NULL);
    }
    ps->p = p;
    return 1;
}

static int literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n)) return 0;
    ps->p += n;
    return 1;
}

static json_value *parse_value(parser *ps, int depth);

static json_value *parse_container(parser *ps, json_value *v, int depth) {
    const int is_object = *ps->p == '{';
    const unsigned char close = is_object ? '}' : ']';
    if (depth >= ps->max_depth) return fail(ps, "nested deeper than %d levels", ps->max_depth);
    ps->p++;
    size_t base = ps->doc->stack_n;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            skip_ws(ps);
            json_member *m = NULL;
            if (is_object) {
                if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "expected a \"key\"");
                m = arena_alloc(ps->doc, sizeof *m);
                if (!parse_string(ps, &m->key, &m->key_len)) return NULL;
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "expected ':' after a key");
                ps->p++;
            }
            json_value *item = parse_value(ps, depth + 1);
            if (!item) return NULL;
            if (m) m->value = item;
            push(ps->doc, m ? (void *)m : (void *)item);
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                break;
            }
            return fail(ps, "expected ',' or '%c'", close);
        }
    }
    size_t n = ps->doc->stack_n - base;
    void **items = ps->doc->stack ? ps->doc->stack + base : NULL;
    if (is_object) {
        v->type = JSON_OBJECT;
        json_member *members = arena_alloc(ps->doc, (n ? n : 1) * sizeof(json_member));
        for (size_t i = 0; i < n; i++) members[i] = *(json_member *)items[i];
        v->u.object.members = members, v->u.object.n = n;
    } else {
        v->type = JSON_ARRAY;
        json_value **arr = arena_alloc(ps->doc, (n ? n : 1) * sizeof(json_value *));
        if (n) memcpy(arr, items, n * sizeof(json_value *)); // items is NULL before a push
        v->u.array.items = arr, v->u.array.n = n;
    }
    ps->doc->stack_n = base;
    return v;
}

static json_value *parse_value(parser *ps, int depth) {
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, "unexpected end of the text, expected a value");
    json_value *v = arena_alloc(ps->doc, sizeof *v);
    memset(v, 0, sizeof *v);
    v->line = ps->line;
    unsigned char c = *ps->p;
    if (c == '{' || c == '[') return parse_container(ps, v, depth);
    if (c == '"') {
        v->type = JSON_STRING;
        return parse_string(ps, &v->u.str.s, &v->u.str.len) ? v : NULL;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = JSON_NUMBER;
        return parse_number(ps, &v->u.number) ? v : NULL;
    }
    if (literal(ps, "true")) return v->type = JSON_TRUE, v;
    if (literal(ps, "false")) return v->type = JSON_FALSE, v;
    if (literal(ps, "null")) return v->type = JSON_NULL, v;
    if (c >= 0x20 && c < 0x7F) return fail(ps, "unexpected character '%c'", c);
    return fail(ps, "unexpected byte 0x%02X", c);
}

const json_value *json_parse(json_doc *doc, const char *text, size_t n, int max_depth, char *err,
                             size_t errn) {
    // Reset: keep the oldest block (the usual size of one document), free the others.
    arena_block *keep = doc->blocks;
    while (keep && keep->next) {
        arena_block *next = keep->next;
        free(keep);
        keep = next;
    }
    if (keep) keep->used = 0;
    doc->blocks = keep;
    doc->stack_n = 0;
    parser ps = {.doc = doc,
                 .p = (const unsigned char *)text,
                 .end = (const unsigned char *)text + n,
                 .line_start = (const unsigned char *)text,
                 .line = 1,
                 .max_depth = max_depth,
                 .err = err,
                 .errn = errn};
    if (errn) err[0] = '\0';
    if (n >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) ps.p += 3, ps.line_start += 3; // a BOM
    json_value *root = parse_value(&ps, 0);
    if (!root) return NULL;
    skip_ws(&ps);
    if (ps.p != ps.end) return fail(&ps, "text after the JSON value");
    return root;
}

const json_value *json_get(const json_value *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (size_t i = obj->u.object.n; i-- > 0;) {
        const json_member *m = &obj->u.object.members[i];
        if (m->key_len == n && !memcmp(m->key, key, n)) return m->value;
    }
    return NULL;
}

int json_uint(const json_value *v, uint64_t max, uint64_t *out) {
    if (!v || v->type != JSON_NUMBER) return 0;
    double d = v->u.number;
    if (!(d >= 0) || d > (double)max || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

const char *json_type_name(const json_value *v) {
    if (!v) return "missing";
    switch (v->type) {
    case JSON_NULL: return "null";
    case JSON_FALSE:
    case JSON_TRUE: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

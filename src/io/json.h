// json.h: a small strict JSON reader (RFC 8259) for tokenizer.json and JSON-lines inputs.
//
// One document is parsed into a tree held by a json_doc (an arena: one free releases it
// all; parsing again into the same doc reuses its memory). Strings are decoded to UTF-8
// (escapes, surrogate pairs) and NUL-terminated; they may hold NUL bytes (\u0000), so `len`
// is their length. Refused, with the line and column in the message: invalid UTF-8, raw
// control characters in strings, lone surrogates, nesting deeper than the given limit,
// anything after the value but whitespace, and every other departure from the grammar.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_type;

typedef struct json_value json_value;
typedef struct {
    const char *key; // UTF-8, NUL-terminated
    size_t key_len;
    json_value *value;
} json_member;

struct json_value {
    json_type type;
    int line; // 1-based line of the value's first character
    union {
        double number;
        struct {
            const char *s; // NUL-terminated
            size_t len;
        } str;
        struct {
            json_value **items;
            size_t n;
        } array;
        struct {
            json_member *members; // in file order; a repeated key keeps every occurrence
            size_t n;
        } object;
    } u;
};

typedef struct json_doc json_doc;

json_doc *json_doc_new(void);
void json_doc_free(json_doc *doc);

// Parses text[0, n) into `doc` (dropping what it held). Returns the root, or NULL with a
// message "line L, column C: what is wrong" in err[errn].
const json_value *json_parse(json_doc *doc, const char *text, size_t n, int max_depth, char *err,
                             size_t errn);

// The value of `key` in an object (its last occurrence, as serde's maps keep), or NULL when
// `obj` is not an object or lacks the key.
const json_value *json_get(const json_value *obj, const char *key);

// A non-negative integer that fits `max` (a number with no fraction): 1 and *out, else 0.
int json_uint(const json_value *v, uint64_t max, uint64_t *out);

// "null", "a string", "an object", ...: for messages.
const char *json_type_name(const json_value *v);

// Whether text[0, n) is valid UTF-8 (no overlong forms, no surrogates, at most U+10FFFF);
// if not, *bad_at is the byte offset of the first invalid sequence.
int json_utf8_valid(const uint8_t *text, size_t n, size_t *bad_at);

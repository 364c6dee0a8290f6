// test_tokenizer: the JSON reader, the Unicode classes, the two pre-tokenizer matchers, BPE
// merging and the added tokens, on cases whose answers are worked out here by hand from the
// regexes' definitions and tokenizers' rules (tests/tokenize_parity.py compares with
// tokenizers itself, on a large corpus).
#include "base/common.h"
#include "io/json.h"
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"
#include "testlib.h"

#include <string.h>
#include <unistd.h>

// ---- JSON

static void test_json(void) {
    json_doc *doc = json_doc_new();
    char err[256];
    const char *ok = "{\"a\": [1, -2.5e1, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\","
                     " \"a\": {\"k\": \"\"}}";
    const json_value *v = json_parse(doc, ok, strlen(ok), 64, err, sizeof err);
    const json_value *s = json_get(v, "s"), *a = json_get(v, "a");
    TEST_CHECK(v && s && s->type == JSON_STRING && s->u.str.len == 8 &&
                   !memcmp(s->u.str.s, "x\xC3\xA9\xF0\x9F\x98\x80\n", 8),
               "json_string_escapes", "decoded %s", v ? (s ? s->u.str.s : "no s") : err);
    TEST_CHECK(a && a->type == JSON_OBJECT, "json_repeated_key_last",
               "a repeated key keeps the last");
    uint64_t u;
    v = json_parse(doc, "[1e3, 1.5, -1, 16777216]", 24, 64, err, sizeof err);
    TEST_CHECK(v && json_uint(v->u.array.items[0], 2000, &u) && u == 1000 &&
                   !json_uint(v->u.array.items[1], 10, &u) &&
                   !json_uint(v->u.array.items[2], 10, &u) &&
                   !json_uint(v->u.array.items[3], 16777215, &u),
               "json_uint", "integers in range only");

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"a\": 1,}", "line 1, column 9: expected a \"key\""},
        {"[1,\n 2,\n 3", "line 3, column 3: expected ',' or ']'"},
        {"\"abc", "unterminated string"},
        {"\"a\\x\"", "invalid escape"},
        {"\"\\ud800\"", "lone high surrogate"},
        {"\"\\udc00\"", "lone low surrogate"},
        {"\"a\tb\"", "raw control character 0x09"},
        {"\"\xC0\xAF\"", "invalid UTF-8"},
        {"\"\xED\xA0\x80\"", "invalid UTF-8"},
        {"01", "text after the JSON value"},
        {"-", "invalid number"},
        {"1.", "a digit must follow '.'"},
        {"tru", "unexpected character 't'"},
        {"{} {}", "text after the JSON value"},
        {"", "unexpected end"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = json_parse(doc, bad[i].text, strlen(bad[i].text), 64, err, sizeof err);
        char name[64];
        snprintf(name, sizeof name, "json_refuses_%zu", i);
        TEST_CHECK(!v && strstr(err, bad[i].want), name, "'%s': got '%s', want '%s'", bad[i].text,
                   v ? "accepted" : err, bad[i].want);
    }
    // Nesting: refused past the limit, quickly, without a deep recursion.
    size_t depth = 1000000;
    char *deep = xmalloc(2 * depth);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    double t0 = time_now_s();
    v = json_parse(doc, deep, 2 * depth, 64, err, sizeof err);
    TEST_CHECK(!v && strstr(err, "nested deeper than 64") && time_now_s() - t0 < 1.0,
               "json_depth_limit", "%s", v ? "accepted" : err);
    v = json_parse(doc, deep + depth - 64, 128, 64, err, sizeof err);
    TEST_CHECK(v != NULL, "json_depth_at_limit", "64 levels: %s", v ? "" : err);
    free(deep);
    json_doc_free(doc);

    size_t at;
    TEST_CHECK(json_utf8_valid((const uint8_t *)"a\xC3\xA9\xF4\x8F\xBF\xBF", 7, &at) &&
                   !json_utf8_valid((const uint8_t *)"ab\xF4\x90\x80\x80", 6, &at) && at == 2 &&
                   !json_utf8_valid((const uint8_t *)"abcdefgh\xE2\x82", 10, &at) && at == 8,
               "utf8_valid", "U+10FFFF accepted, past it and a cut sequence refused");
}

// ---- classes and matchers

static void test_classes(void) {
    struct {
        uint32_t cp;
        uint8_t bits;
    } cases[] = {
        {'a', TOK_CL_L | TOK_CL_W},
        {'5', TOK_CL_N | TOK_CL_W},
        {' ', TOK_CL_WS},
        {'_', TOK_CL_W},
        {'\'', 0},
        {0x85, TOK_CL_WS},
        {0xA0, TOK_CL_WS},
        {0x3000, TOK_CL_WS},
        {0x1C, 0},
        {0x301, TOK_CL_W},
        {0x2160, TOK_CL_N | TOK_CL_W},
        {0xB2, TOK_CL_N},
        {0x4E2D, TOK_CL_L | TOK_CL_W},
        {0x1F600, 0},
        {0x24B6, TOK_CL_W},
        {0x200D, TOK_CL_W},
        {0x10FFFF, 0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (tok_class(cases[i].cp) != cases[i].bits) {
            printf("  U+%04X: class %d, want %d\n", cases[i].cp, tok_class(cases[i].cp),
                   cases[i].bits);
            bad++;
        }
    TEST_CHECK(!bad, "unicode_classes", "%d code points misclassified", bad);
    int roundtrip = 1;
    for (int b = 0; b < 256; b++) roundtrip &= tok_char_byte(tok_byte_char((uint8_t)b)) == b;
    TEST_CHECK(roundtrip && tok_byte_char(' ') == 0x120 && tok_byte_char('\n') == 0x10A &&
                   tok_byte_char('!') == '!' && tok_byte_char(0xAD) == 0x143,
               "byte_alphabet", "GPT-2's bytes_to_unicode");
}

// The pieces of `text` under a pattern, joined by '|'.
static void split(tok_pattern pat, const char *text, char *out, size_t n) {
    size_t len = strlen(text), o = 0;
    for (size_t i = 0; i < len;) {
        size_t e = tok_pattern_match(pat, (const uint8_t *)text, len, i);
        if (o && o + 1 < n) out[o++] = '|';
        for (; i < e && o + 1 < n; i++) out[o++] = text[i];
    }
    out[o] = '\0';
}

static void test_matchers(void) {
    static const struct {
        tok_pattern pat;
        const char *text, *want;
    } cases[] = {
        // GPT-2: contractions (case-sensitive), the optional space before letters, digits
        // and other runs; a whitespace run gives its last character to the next piece.
        {TOK_PAT_GPT2, "Hello world's", "Hello| world|'s"},
        {TOK_PAT_GPT2, "I'LL don't", "I|'|LL| don|'t"},
        {TOK_PAT_GPT2, "abc123 456", "abc|123| 456"},
        {TOK_PAT_GPT2, "a  b", "a| | b"},
        {TOK_PAT_GPT2, "a   \n\nb", "a|   \n|\n|b"},
        {TOK_PAT_GPT2, "a \t b", "a| \t| b"},
        {TOK_PAT_GPT2, "x\t\ty", "x|\t|\t|y"},
        {TOK_PAT_GPT2, "end  ", "end|  "},
        {TOK_PAT_GPT2, "?!... ok", "?!...| ok"},
        {TOK_PAT_GPT2, " \xE2\x80\x94x", " \xE2\x80\x94|x"},
        {TOK_PAT_GPT2, "caf\x65\xCC\x81!", "cafe|\xCC\x81!"},
        {TOK_PAT_GPT2, "\xE3\x80\x80\xE4\xB8\xAD", "\xE3\x80\x80|\xE4\xB8\xAD"},
        {TOK_PAT_GPT2, "''s", "''|s"},
        // Llama 3: contractions in any case (and long s), one non-letter before letters,
        // digits in threes, punctuation taking the newlines after it, \s*[\r\n]+.
        {TOK_PAT_LLAMA3, "I'LL don'T", "I|'LL| don|'T"},
        {TOK_PAT_LLAMA3, "it'\xC5\xBFt", "it|'\xC5\xBF|t"},
        {TOK_PAT_LLAMA3, "1234567 x", "123|456|7| x"},
        {TOK_PAT_LLAMA3, " 12", " |12"},
        {TOK_PAT_LLAMA3, "\tword .word", "\tword| .|word"},
        {TOK_PAT_LLAMA3, "end.\n\nNext", "end|.\n\n|Next"},
        {TOK_PAT_LLAMA3, "a  \n \n  b", "a|  \n \n| | b"},
        {TOK_PAT_LLAMA3, "a\n\nb", "a|\n\n|b"},
        {TOK_PAT_LLAMA3, "x   ", "x|   "},
        {TOK_PAT_LLAMA3, "x   y", "x|  | y"},
        {TOK_PAT_LLAMA3, "\xF0\x9F\x98\x80hi", "\xF0\x9F\x98\x80hi"},
        {TOK_PAT_LLAMA3, "\n\xE4\xB8\xAD", "\n|\xE4\xB8\xAD"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char got[256], name[64];
        split(cases[i].pat, cases[i].text, got, sizeof got);
        snprintf(name, sizeof name, "pretok_%s_%zu",
                 cases[i].pat == TOK_PAT_GPT2 ? "gpt2" : "llama3", i);
        TEST_CHECK(!strcmp(got, cases[i].want), name, "'%s': got '%s', want '%s'", cases[i].text,
                   got, cases[i].want);
    }
}

// ---- BPE and added tokens, on a tokenizer.json written here

static char g_dir[64];

// A GPT-2-style tokenizer.json: the 256 byte symbols (id = byte) less `drop`, then `extra`
// vocabulary entries from id 256 on, the merges, and the added tokens; `model_extra` and
// `pre` are spliced into the model and pre-tokenizer objects.
static const char *write_tokenizer(const char *name, const char *extra, const char *merges,
                                   const char *added, const char *model_extra, int drop) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s.json", g_dir, name);
    FILE *f = fopen(path, "w");
    TRI_ASSERT(f);
    fprintf(
        f,
        "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": null,\n"
        "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
        "\"trim_offsets\": true, \"use_regex\": true},\n"
        "\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n"
        "\"model\": {\"type\": \"BPE\", %s \"vocab\": {",
        added, model_extra);
    for (int b = 0; b < 256; b++) {
        if (b == drop) continue;
        uint32_t cp = tok_byte_char((uint8_t)b);
        if (cp == '"' || cp == '\\') fprintf(f, "\"\\%c\": %d, ", (char)cp, b);
        else if (cp < 0x80) fprintf(f, "\"%c\": %d, ", (char)cp, b);
        else fprintf(f, "\"\\u%04x\": %d, ", cp, b);
    }
    fprintf(f, "%s}, \"merges\": [%s]}}\n", extra, merges);
    TRI_ASSERT(fclose(f) == 0);
    return path;
}

// Encodes text and compares with the ids written as a string "1 2 3".
static void check_encode(const char *name, tokenizer *tk, const char *text, const char *want) {
    if (!tk) {
        TEST_CHECK(0, name, "the tokenizer did not load");
        return;
    }
    tok_encoder *enc = tok_encoder_new(tk);
    tok_ids ids = {0};
    tok_encode(enc, text, strlen(text), &ids);
    char got[512] = "";
    for (size_t i = 0; i < ids.n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%u", i ? " " : "", ids.ids[i]);
    TEST_CHECK(!strcmp(got, want), name, "'%s': got [%s], want [%s]", text, got, want);
    tok_ids_free(&ids);
    tok_encoder_free(enc);
}

static tokenizer *load(const char *path) {
    tokenizer *tk = NULL;
    return tokenizer_load(path, &tk) == TRI_OK ? tk : NULL;
}

static void test_bpe(void) {
    // 256 he, 257 ll, 258 hell, 259 hello, 260 Ġw, 261 or, 262 Ġwor, 263 ab, 264 bc,
    // 265 Ġxyz (no merge makes it), 266 <unk>
    const char *extra = "\"he\": 256, \"ll\": 257, \"hell\": 258, \"hello\": 259, "
                        "\"\\u0120w\": 260, \"or\": 261, \"\\u0120wor\": 262, \"ab\": 263, "
                        "\"bc\": 264, \"\\u0120xyz\": 265, \"<unk>\": 266";
    const char *merges = "[\"h\", \"e\"], [\"l\", \"l\"], [\"he\", \"ll\"], [\"hell\", \"o\"], "
                         "[\"\\u0120\", \"w\"], [\"o\", \"r\"], [\"\\u0120w\", \"or\"], "
                         "[\"a\", \"b\"], [\"b\", \"c\"]";
    // (the flags tokenizers requires are all given, so that it loads this file too)
#define FLAGS(sw, l, r, n, sp)                                                                     \
    "\"single_word\": " #sw ", \"lstrip\": " #l ", \"rstrip\": " #r ", \"normalized\": " #n        \
    ", \"special\": " #sp "}"
    const char *added =
        "{\"id\": 267, \"content\": \"<|endoftext|>\", " FLAGS(false, false, false, false, true) ", {\"id\": 268, \"content\": \"<mask>\", " FLAGS(
            false, true, false, false,
            false) ", {\"id\": 269, \"content\": \"[X]\", " FLAGS(true, false, true, false,
                                                                  false) ", {\"id\": 270, \"content\": \"<mask>x\", " FLAGS(false,
                                                                                                                            false,
                                                                                                                            false,
                                                                                                                            true,
                                                                                                                            false);
    tokenizer *tk = load(write_tokenizer("base", extra, merges, added, "", -1));
    // "hello": he, ll, hell, hello. " world": Ġw, or, Ġwor, then l d. "abc": (a, b) has the
    // lower rank, so ab + c. The added token splits first.
    check_encode("bpe_merges", tk, "hello world<|endoftext|>abc", "259 262 108 100 267 263 99");
    check_encode("bpe_no_ignore_merges", tk, " xyz", "32 120 121 122");
    // lstrip takes the spaces before <mask>; the non-normalized <mask> matches before the
    // normalized <mask>x is looked for; rstrip takes the spaces after [X], which must stand
    // alone (single_word): inside a word it is text.
    check_encode("added_lstrip", tk, "a  <mask>x", "97 268 120");
    check_encode("added_rstrip_single_word", tk, "[X]  hello a[X]", "269 259 32 97 91 88 93");
    if (tk) {
        size_t len;
        const uint8_t *b = tokenizer_decode(tk, 262, &len);
        TEST_CHECK(b && len == 4 && !memcmp(b, " wor", 4), "decode_bytes", "id 262 -> ' wor'");
        b = tokenizer_decode(tk, 267, &len);
        TEST_CHECK(b && len == 13 && !memcmp(b, "<|endoftext|>", 13), "decode_added",
                   "the added token's text");
        TEST_CHECK(!tokenizer_decode(tk, 9999, &len) && tokenizer_n_ids(tk) == 271 &&
                       tokenizer_default_eot(tk) == 267 && tokenizer_token_id(tk, "hello") == 259,
                   "tokenizer_ids", "n_ids %u", tokenizer_n_ids(tk));
    }
    tokenizer_free(tk);

    tk = load(write_tokenizer("ignore", extra, merges, "", "\"ignore_merges\": true,", -1));
    check_encode("bpe_ignore_merges", tk, " xyz xy", "265 32 120 121");
    tokenizer_free(tk);

    // 'q' (byte 113) has no token: dropped without unk_token (and the bytes around it merge,
    // as tokenizers' merge_word does), one <unk> per byte, or one per run with fuse_unk.
    tk = load(write_tokenizer("drop", extra, merges, "", "", 'q'));
    check_encode("bpe_unknown_dropped", tk, "aqb", "263");
    tokenizer_free(tk);
    tk = load(write_tokenizer("unk", extra, merges, "", "\"unk_token\": \"<unk>\",", 'q'));
    check_encode("bpe_unk", tk, "aqqb", "97 266 266 98");
    tokenizer_free(tk);
    tk = load(write_tokenizer("fuse", extra, merges, "",
                              "\"unk_token\": \"<unk>\", \"fuse_unk\": true,", 'q'));
    check_encode("bpe_fuse_unk", tk, "aqqb", "97 266 98");
    tokenizer_free(tk);
}

int main(void) {
    log_init();
    snprintf(g_dir, sizeof g_dir, "/tmp/test_tokenizer_XXXXXX");
    TRI_ASSERT(mkdtemp(g_dir));
    test_json();
    test_classes();
    test_matchers();
    test_bpe();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (!getenv("KEEP")) TRI_ASSERT(system(cmd) == 0);
    TEST_EXIT();
}

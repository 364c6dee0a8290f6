// tokenizer_load.c: tokenizer.json into a tokenizer (tokenizer.h), checked field by field,
// with ids assigned as tokenizers assigns them (its BPE builder and AddedVocabulary).
#include "io/tokenizer_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"

// Token ids are below MAX_IDS (2,097,152; the largest vocabularies in use have ~256k): the
// decoding table holds 8 bytes per id.
enum { JSON_MAX_DEPTH = 64, MAX_IDS = 1 << 21 };
#define MAX_FILE_BYTES ((int64_t)1 << 30)

// Reports one problem of the file: "error: FILE: FIELD: message" and a HINT.
static tri_status load_fail(const char *path, const char *field, const char *hint, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));
static tri_status load_fail(const char *path, const char *field, const char *hint, const char *fmt,
                            ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (field) LOG_ERROR("%s: %s: %s", path, field, msg);
    else LOG_ERROR("%s: %s", path, msg);
    LOG_HINT("%s", hint ? hint
                        : "the file must be a tokenizer.json as Hugging Face tokenizers writes "
                          "it (README \"Tokenizing your text\")");
    return TRI_ERR_CONFIG;
}

#define HINT_KIND                                                                                  \
    "trident reads byte-level BPE tokenizers (GPT-2's, Llama 3's and their kind, such as those "   \
    "tokenizers' ByteLevelBPETokenizer trains); see README \"Tokenizing your text\""

// The bytes a string of byte symbols stands for (each character one byte of the alphabet):
// their count, or -1 when some character is not a byte symbol. out has room for len bytes.
static int64_t symbols_to_bytes(const char *s, size_t len, uint8_t *out) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int l;
        int b = tok_char_byte(tok_utf8_next((const uint8_t *)s + i, len - i, &l));
        if (b < 0) return -1;
        out[n++] = (uint8_t)b;
        i += (size_t)l;
    }
    return (int64_t)n;
}

typedef struct {
    const char *path;
    tokenizer *tk;
    tok_strmap vocab_json; // JSON spelling -> id, for merges and added tokens
    uint64_t vocab_count;  // distinct entries: tokenizers' model.get_vocab_size()
    int32_t *dec_src;      // per id: index into dec_strs of its text, or -1
    const char **dec_strs; // the texts of ids (JSON spellings), dec_cap allocated
    size_t *dec_lens;
    size_t n_dec, dec_cap;
} loader;

static int field_bool(const json_value *v, int dflt) {
    if (!v || v->type == JSON_NULL) return dflt;
    return v->type == JSON_TRUE;
}

// A field that must be a boolean, null or absent.
static tri_status check_bool(loader *ld, const json_value *obj, const char *key,
                             const char *field) {
    const json_value *v = json_get(obj, key);
    if (v && v->type != JSON_NULL && v->type != JSON_TRUE && v->type != JSON_FALSE)
        return load_fail(ld->path, field, NULL, "must be true or false, found %s",
                         json_type_name(v));
    return TRI_OK;
}

// The text that id decodes from (the last one given wins, as in tokenizers' maps).
static void set_text(loader *ld, uint32_t id, const char *s, size_t len) {
    TRI_ASSERT(ld->n_dec < ld->dec_cap && id < ld->tk->n_ids);
    ld->dec_strs[ld->n_dec] = s;
    ld->dec_lens[ld->n_dec] = len;
    ld->dec_src[id] = (int32_t)ld->n_dec++;
}

static tri_status read_vocab(loader *ld, const json_value *vocab) {
    tokenizer *tk = ld->tk;
    if (!vocab || vocab->type != JSON_OBJECT)
        return load_fail(ld->path, "model.vocab", HINT_KIND,
                         "must be an object of token -> id, found %s", json_type_name(vocab));
    size_t n = vocab->u.object.n;
    tok_strmap_init(&ld->vocab_json, n);
    tok_strmap_init(&tk->vocab_bytes, n);
    uint64_t max_id = 0;
    for (size_t i = 0; i < n; i++) {
        const json_member *m = &vocab->u.object.members[i];
        uint64_t id;
        if (!json_uint(m->value, MAX_IDS - 1, &id))
            return load_fail(ld->path, "model.vocab", "token ids are integers from 0 to 2097151",
                             "the id of \"%.60s\" (line %d) is not an integer from 0 to %d", m->key,
                             m->value->line, MAX_IDS - 1);
        if (id > max_id) max_id = id;
        uint64_t old;
        if (!tok_strmap_get(&ld->vocab_json, m->key, m->key_len, &old)) ld->vocab_count++;
        tok_strmap_put(&ld->vocab_json, m->key, m->key_len, id);
    }
    if (n == 0) return load_fail(ld->path, "model.vocab", HINT_KIND, "is empty");
    tk->n_ids = (uint32_t)max_id + 1;
    ld->dec_src = xmalloc((size_t)tk->n_ids * sizeof(int32_t));
    for (uint32_t i = 0; i < tk->n_ids; i++) ld->dec_src[i] = -1;
    ld->dec_cap = n;
    ld->dec_strs = xmalloc(n * sizeof(char *));
    ld->dec_lens = xmalloc(n * sizeof(size_t));
    uint8_t *bytes = NULL;
    size_t bytes_cap = 0;
    for (size_t i = 0; i < n; i++) {
        const json_member *m = &vocab->u.object.members[i];
        uint64_t id;
        tok_strmap_get(&ld->vocab_json, m->key, m->key_len, &id); // its last spelling wins
        if (m->key_len + 1 > bytes_cap) {
            bytes_cap = 2 * (m->key_len + 1);
            free(bytes);
            bytes = xmalloc(bytes_cap);
        }
        int64_t nb = symbols_to_bytes(m->key, m->key_len, bytes);
        if (nb > 0) tok_strmap_put(&tk->vocab_bytes, bytes, (size_t)nb, id);
        if (nb == 1) tk->byte_id[bytes[0]] = (int32_t)id;
        set_text(ld, (uint32_t)id, m->key, m->key_len);
    }
    free(bytes);
    return TRI_OK;
}

static int vocab_id(loader *ld, const char *s, size_t len, uint32_t *id) {
    uint64_t v;
    if (!tok_strmap_get(&ld->vocab_json, s, len, &v)) return 0;
    *id = (uint32_t)v;
    return 1;
}

static tri_status read_merges(loader *ld, const json_value *merges) {
    if (!merges || merges->type != JSON_ARRAY)
        return load_fail(ld->path, "model.merges", HINT_KIND,
                         "must be a list of merges (\"a b\" or [\"a\", \"b\"]), found %s",
                         json_type_name(merges));
    char *joined = NULL;
    size_t joined_cap = 0;
    uint32_t rank = 0;
    tri_status rc = TRI_OK;
    const int legacy = merges->u.array.n > 0 && merges->u.array.items[0]->type == JSON_STRING;
    for (size_t i = 0; i < merges->u.array.n && rc == TRI_OK; i++) {
        const json_value *m = merges->u.array.items[i];
        const char *a, *b;
        size_t la, lb;
        char field[64];
        snprintf(field, sizeof field, "model.merges[%zu]", i);
        if (legacy && m->type == JSON_STRING) {
            if (!strncmp(m->u.str.s, "#version", 8)) continue; // as tokenizers skips them
            const char *sp = memchr(m->u.str.s, ' ', m->u.str.len);
            if (!sp || memchr(sp + 1, ' ', m->u.str.len - (size_t)(sp + 1 - m->u.str.s))) {
                rc = load_fail(ld->path, field, NULL,
                               "\"%.60s\" (line %d) is not two tokens joined by one space",
                               m->u.str.s, m->line);
                break;
            }
            a = m->u.str.s, la = (size_t)(sp - a), b = sp + 1, lb = m->u.str.len - la - 1;
        } else if (!legacy && m->type == JSON_ARRAY && m->u.array.n == 2 &&
                   m->u.array.items[0]->type == JSON_STRING &&
                   m->u.array.items[1]->type == JSON_STRING) {
            a = m->u.array.items[0]->u.str.s, la = m->u.array.items[0]->u.str.len;
            b = m->u.array.items[1]->u.str.s, lb = m->u.array.items[1]->u.str.len;
        } else {
            rc = load_fail(
                ld->path, field, NULL, "(line %d) must be %s like the first merge, found %s",
                m->line, legacy ? "a string \"a b\"" : "a pair [\"a\", \"b\"]", json_type_name(m));
            break;
        }
        uint32_t ia, ib, im;
        if (la + lb + 1 > joined_cap) {
            joined_cap = 2 * (la + lb + 1);
            free(joined);
            joined = xmalloc(joined_cap);
        }
        memcpy(joined, a, la);
        memcpy(joined + la, b, lb);
        const char *missing = !vocab_id(ld, a, la, &ia)             ? a
                              : !vocab_id(ld, b, lb, &ib)           ? b
                              : !vocab_id(ld, joined, la + lb, &im) ? "their concatenation"
                                                                    : NULL;
        if (missing) {
            rc = load_fail(ld->path, field,
                           "every merge's two parts and their concatenation "
                           "must be in model.vocab",
                           "(line %d) \"%.40s\" + \"%.40s\": %s%.40s%s is not in model.vocab",
                           m->line, a, b, missing == a || missing == b ? "\"" : "", missing,
                           missing == a || missing == b ? "\"" : "");
            break;
        }
        tok_mergemap_put(&ld->tk->merges, ia, ib, rank++, im);
    }
    free(joined);
    return rc;
}

static tri_status read_model(loader *ld, const json_value *model) {
    tokenizer *tk = ld->tk;
    if (!model || model->type != JSON_OBJECT)
        return load_fail(ld->path, "model", HINT_KIND, "must be an object, found %s",
                         json_type_name(model));
    const json_value *type = json_get(model, "type");
    if (!type || type->type != JSON_STRING)
        return load_fail(ld->path, "model.type", HINT_KIND, "must be \"BPE\", found %s",
                         json_type_name(type));
    if (strcmp(type->u.str.s, "BPE"))
        return load_fail(ld->path, "model.type", HINT_KIND,
                         "is \"%.40s\": only \"BPE\" (byte-level) is supported", type->u.str.s);
    const json_value *v = json_get(model, "dropout");
    if (v && v->type != JSON_NULL && !(v->type == JSON_NUMBER && v->u.number == 0))
        return load_fail(ld->path, "model.dropout", "set it to null",
                         "BPE dropout (a random encoding each time) is not supported");
    static const char *const unsupported_strings[] = {"continuing_subword_prefix",
                                                      "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = json_get(model, unsupported_strings[i]);
        if (v && v->type != JSON_NULL && !(v->type == JSON_STRING && v->u.str.len == 0)) {
            char field[64];
            snprintf(field, sizeof field, "model.%s", unsupported_strings[i]);
            return load_fail(ld->path, field, HINT_KIND,
                             "is set: subword markers are not used by byte-level BPE");
        }
    }
    TRI_CHECK(check_bool(ld, model, "fuse_unk", "model.fuse_unk"));
    TRI_CHECK(check_bool(ld, model, "byte_fallback", "model.byte_fallback"));
    TRI_CHECK(check_bool(ld, model, "ignore_merges", "model.ignore_merges"));
    if (field_bool(json_get(model, "byte_fallback"), 0))
        return load_fail(ld->path, "model.byte_fallback", HINT_KIND,
                         "is true: byte fallback (SentencePiece-style BPE) is not supported");
    tk->fuse_unk = field_bool(json_get(model, "fuse_unk"), 0);
    tk->ignore_merges = field_bool(json_get(model, "ignore_merges"), 0);
    TRI_CHECK(read_vocab(ld, json_get(model, "vocab")));
    TRI_CHECK(read_merges(ld, json_get(model, "merges")));
    tk->unk_id = -1;
    v = json_get(model, "unk_token");
    if (v && v->type != JSON_NULL) {
        uint32_t id;
        if (v->type != JSON_STRING || !vocab_id(ld, v->u.str.s, v->u.str.len, &id))
            return load_fail(ld->path, "model.unk_token", NULL,
                             "must be null or a token of model.vocab, found %s%s%.40s%s",
                             json_type_name(v), v->type == JSON_STRING ? " \"" : "",
                             v->type == JSON_STRING ? v->u.str.s : "",
                             v->type == JSON_STRING ? "\"" : "");
        tk->unk_id = id;
    }
    return TRI_OK;
}

// One ByteLevel pre-tokenizer object: its add_prefix_space and use_regex.
static tri_status read_bytelevel(loader *ld, const json_value *pt, const char *field) {
    char f[128];
    snprintf(f, sizeof f, "%s.add_prefix_space", field);
    TRI_CHECK(check_bool(ld, pt, "add_prefix_space", f));
    snprintf(f, sizeof f, "%s.use_regex", field);
    TRI_CHECK(check_bool(ld, pt, "use_regex", f));
    ld->tk->prefix_space = field_bool(json_get(pt, "add_prefix_space"), 1);
    ld->tk->bytelevel = field_bool(json_get(pt, "use_regex"), 1) ? TOK_PAT_GPT2 : TOK_PAT_NONE;
    return TRI_OK;
}

static tri_status read_split(loader *ld, const json_value *pt, const char *field) {
    char f[160];
    const json_value *pat = json_get(pt, "pattern"), *re = json_get(pat, "Regex");
    snprintf(f, sizeof f, "%s.pattern.Regex", field);
    if (!re || re->type != JSON_STRING)
        return load_fail(ld->path, f, HINT_KIND,
                         "a Split needs {\"Regex\": ...} with GPT-2's or Llama 3's regex");
    if (!strcmp(re->u.str.s, TOK_REGEX_LLAMA3)) ld->tk->split = TOK_PAT_LLAMA3;
    else if (!strcmp(re->u.str.s, TOK_REGEX_GPT2)) ld->tk->split = TOK_PAT_GPT2;
    else
        return load_fail(ld->path, f,
                         "trident has matchers for two regexes only: GPT-2's and Llama 3's "
                         "(README \"Tokenizing your text\" quotes both)",
                         "\"%.80s%s\" is not a regex trident implements", re->u.str.s,
                         re->u.str.len > 80 ? "..." : "");
    const json_value *beh = json_get(pt, "behavior"), *inv = json_get(pt, "invert");
    snprintf(f, sizeof f, "%s.behavior", field);
    if (!beh || beh->type != JSON_STRING || strcmp(beh->u.str.s, "Isolated"))
        return load_fail(ld->path, f, NULL, "must be \"Isolated\"");
    snprintf(f, sizeof f, "%s.invert", field);
    if (field_bool(inv, 0) || (inv && inv->type != JSON_FALSE && inv->type != JSON_NULL))
        return load_fail(ld->path, f, NULL, "must be false");
    return TRI_OK;
}

static const char *type_of(const json_value *v) {
    const json_value *t = json_get(v, "type");
    return t && t->type == JSON_STRING ? t->u.str.s : NULL;
}

// GPT-2: ByteLevel (use_regex). Llama 3: Sequence [Split(regex), ByteLevel(no regex)].
static tri_status read_pre_tokenizer(loader *ld, const json_value *pt) {
    const char *t = type_of(pt);
    if (t && !strcmp(t, "ByteLevel")) return read_bytelevel(ld, pt, "pre_tokenizer");
    const json_value *list = json_get(pt, "pretokenizers");
    if (!t || strcmp(t, "Sequence") || !list || list->type != JSON_ARRAY || list->u.array.n < 1 ||
        list->u.array.n > 2)
        return load_fail(ld->path, "pre_tokenizer", HINT_KIND,
                         "%s%s%s: supported are ByteLevel, and Sequence of [Split, ByteLevel]",
                         t ? "type \"" : json_type_name(pt), t ? t : "", t ? "\"" : "");
    size_t n = list->u.array.n;
    const char *last = type_of(list->u.array.items[n - 1]);
    if (n == 2) {
        const char *first = type_of(list->u.array.items[0]);
        if (!first || strcmp(first, "Split"))
            return load_fail(ld->path, "pre_tokenizer.pretokenizers[0].type", HINT_KIND,
                             "is %s%s%s: supported is a Split by GPT-2's or Llama 3's regex",
                             first ? "\"" : "missing", first ? first : "", first ? "\"" : "");
        TRI_CHECK(read_split(ld, list->u.array.items[0], "pre_tokenizer.pretokenizers[0]"));
    }
    char field[64];
    snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%zu]", n - 1);
    if (!last || strcmp(last, "ByteLevel"))
        return load_fail(ld->path, field, HINT_KIND,
                         "type is %s%s%s: the last pre-tokenizer must be ByteLevel",
                         last ? "\"" : "missing", last ? last : "", last ? "\"" : "");
    return read_bytelevel(ld, list->u.array.items[n - 1], field);
}

static tri_status read_added(loader *ld, const json_value *list) {
    tokenizer *tk = ld->tk;
    if (!list || list->type == JSON_NULL) return TRI_OK;
    if (list->type != JSON_ARRAY)
        return load_fail(ld->path, "added_tokens", NULL, "must be a list, found %s",
                         json_type_name(list));
    tk->added = xcalloc(list->u.array.n + 1, sizeof(tok_added));
    uint64_t next_id = ld->vocab_count; // tokenizers' AddedVocabulary::add_tokens
    int moved = 0;                      // tokens whose "id" is not the one tokenizers gives
    char first_moved[200] = "";
    for (size_t i = 0; i < list->u.array.n; i++) {
        const json_value *t = list->u.array.items[i], *c = json_get(t, "content");
        char field[64];
        snprintf(field, sizeof field, "added_tokens[%zu]", i);
        if (!c || c->type != JSON_STRING)
            return load_fail(ld->path, field, NULL, "(line %d) needs a \"content\" string",
                             t->line);
        static const char *const flags[] = {"single_word", "lstrip", "rstrip", "normalized",
                                            "special"};
        for (int k = 0; k < 5; k++) {
            char f[96];
            snprintf(f, sizeof f, "%s.%s", field, flags[k]);
            TRI_CHECK(check_bool(ld, t, flags[k], f));
        }
        if (c->u.str.len == 0) continue; // tokenizers ignores empty tokens
        tok_added a = {.content = xstrdup(c->u.str.s),
                       .len = c->u.str.len,
                       .single_word = (uint8_t)field_bool(json_get(t, "single_word"), 0),
                       .lstrip = (uint8_t)field_bool(json_get(t, "lstrip"), 0),
                       .rstrip = (uint8_t)field_bool(json_get(t, "rstrip"), 0),
                       .normalized = (uint8_t)field_bool(json_get(t, "normalized"), 1),
                       .special = (uint8_t)field_bool(json_get(t, "special"), 0)};
        int64_t id = tokenizer_token_id(tk, a.content); // an earlier added token, or vocab
        uint32_t vid;
        if (id < 0 && vocab_id(ld, a.content, a.len, &vid)) id = vid;
        if (id < 0) {
            if (next_id >= MAX_IDS) {
                free(a.content);
                return load_fail(ld->path, field, NULL, "more than %d token ids", MAX_IDS);
            }
            id = (int64_t)next_id++;
        }
        uint64_t json_id;
        if (json_uint(json_get(t, "id"), UINT32_MAX, &json_id) && json_id != (uint64_t)id &&
            moved++ == 0)
            snprintf(first_moved, sizeof first_moved,
                     "%s: \"%.40s\" has id %llu in the file, tokenizers gives it %lld", field,
                     a.content, (unsigned long long)json_id, (long long)id);
        a.id = (uint32_t)id;
        int slot = tk->n_added;
        for (int k = 0; k < tk->n_added; k++)
            if (tk->added[k].id == a.id) slot = k; // one token per id: the last one given
        if (slot < tk->n_added) free(tk->added[slot].content);
        else tk->n_added++;
        tk->added[slot] = a;
    }
    if (moved)
        LOG_WARN("%s: %d added token(s) with another id than tokenizers assigns them (the "
                 "vocabulary's id, or the next free one), which trident uses as tokenizers "
                 "does; the first: %s",
                 ld->path, moved, first_moved);
    return TRI_OK;
}

static int cmp_added(const void *x, const void *y, void *ctx) {
    const tok_added *added = ctx, *a = &added[*(const int *)x], *b = &added[*(const int *)y];
    uint8_t fa = (uint8_t)a->content[0], fb = (uint8_t)b->content[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1; // longest first
    return *(const int *)x - *(const int *)y;
}

static void build_set(tokenizer *tk, tok_added_set *set, int normalized) {
    set->order = xmalloc(((size_t)tk->n_added + 1) * sizeof(int));
    for (int i = 0; i < tk->n_added; i++)
        if (tk->added[i].normalized == normalized) set->order[set->n++] = i;
    qsort_r(set->order, (size_t)set->n, sizeof(int), cmp_added, tk->added);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < set->n && (uint8_t)tk->added[set->order[k]].content[0] < b) k++;
        set->first[b] = k;
    }
}

static tri_status read_text_file(const char *path, char **text, size_t *n) {
    struct stat st;
    FILE *f = fopen(path, "rb");
    if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = f ? (errno ? errno : EISDIR) : errno;
        if (f) fclose(f);
        LOG_ERROR("cannot read tokenizer file '%s': %s", path,
                  f && err == EISDIR ? "not a regular file" : strerror(err));
        LOG_HINT("pass --tokenizer PATH of a Hugging Face tokenizer.json (the file next to "
                 "a model's config.json)");
        return TRI_ERR_CONFIG;
    }
    if ((int64_t)st.st_size > MAX_FILE_BYTES) {
        fclose(f);
        return load_fail(path, NULL, "a tokenizer.json is a few MB (Llama 3's: 9 MB)",
                         "%lld bytes, more than the 1 GiB a tokenizer file may have",
                         (long long)st.st_size);
    }
    *text = xmalloc((size_t)st.st_size + 1);
    *n = fread(*text, 1, (size_t)st.st_size, f);
    int bad = ferror(f) || *n != (size_t)st.st_size;
    fclose(f);
    if (bad) {
        free(*text);
        LOG_ERROR("cannot read tokenizer file '%s': read %zu of %lld bytes", path, *n,
                  (long long)st.st_size);
        LOG_HINT("check the file system");
        return TRI_ERR_CONFIG;
    }
    return TRI_OK;
}

// The decoding table: each id's text as the ByteLevel decoder turns it into bytes.
static void build_decoder(loader *ld) {
    tokenizer *tk = ld->tk;
    size_t total = 0;
    for (size_t i = 0; i < ld->n_dec; i++) total += ld->dec_lens[i];
    tk->dec_pool = xmalloc(total + 1);
    tk->dec_off = xmalloc((size_t)tk->n_ids * sizeof(uint32_t));
    tk->dec_len = xmalloc((size_t)tk->n_ids * sizeof(int32_t));
    size_t used = 0;
    for (uint32_t id = 0; id < tk->n_ids; id++) {
        tk->dec_off[id] = (uint32_t)used;
        tk->dec_len[id] = -1;
        if (ld->dec_src[id] < 0) continue;
        const char *s = ld->dec_strs[ld->dec_src[id]];
        size_t len = ld->dec_lens[ld->dec_src[id]];
        int64_t nb = symbols_to_bytes(s, len, tk->dec_pool + used);
        if (nb < 0) { // not all byte symbols: the decoder keeps the text as it is
            memcpy(tk->dec_pool + used, s, len);
            nb = (int64_t)len;
        }
        tk->dec_len[id] = (int32_t)nb;
        used += (size_t)nb;
    }
}

static tri_status read_tokenizer(loader *ld, const json_value *root) {
    tokenizer *tk = ld->tk;
    const json_value *v = json_get(root, "version");
    if (v && (v->type != JSON_STRING || strcmp(v->u.str.s, "1.0")))
        return load_fail(ld->path, "version", NULL,
                         "must be \"1.0\" (the only version "
                         "tokenizers writes)");
    TRI_CHECK(read_model(ld, json_get(root, "model")));
    v = json_get(root, "normalizer");
    const json_value *list = json_get(v, "normalizers");
    if (v && v->type != JSON_NULL &&
        !(type_of(v) && !strcmp(type_of(v), "Sequence") && list && list->type == JSON_ARRAY &&
          list->u.array.n == 0))
        return load_fail(ld->path, "normalizer", HINT_KIND,
                         "%s%s%s: normalizers that change the text are not supported (byte-level "
                         "BPE tokenizers have none: null)",
                         type_of(v) ? "type \"" : json_type_name(v), type_of(v) ? type_of(v) : "",
                         type_of(v) ? "\"" : "");
    v = json_get(root, "pre_tokenizer");
    if (!v || v->type == JSON_NULL)
        return load_fail(ld->path, "pre_tokenizer", HINT_KIND,
                         "is %s: a byte-level tokenizer has a ByteLevel pre-tokenizer",
                         json_type_name(v));
    TRI_CHECK(read_pre_tokenizer(ld, v));
    TRI_CHECK(read_added(ld, json_get(root, "added_tokens")));
    v = json_get(root, "decoder");
    if (v && v->type != JSON_NULL && (!type_of(v) || strcmp(type_of(v), "ByteLevel")))
        return load_fail(ld->path, "decoder", HINT_KIND,
                         "%s%s%s: only the ByteLevel decoder is supported",
                         type_of(v) ? "type \"" : json_type_name(v), type_of(v) ? type_of(v) : "",
                         type_of(v) ? "\"" : "");
    static const char *const ignored[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        v = json_get(root, ignored[i]);
        if (v && v->type != JSON_NULL)
            LOG_WARN("%s: %s is set and ignored: trident encodes whole documents", ld->path,
                     ignored[i]);
    }
    // Added tokens may have ids past the vocabulary's, and decode to their own text.
    uint32_t n_ids = tk->n_ids;
    for (int i = 0; i < tk->n_added; i++)
        if (tk->added[i].id >= n_ids) n_ids = tk->added[i].id + 1;
    ld->dec_src = realloc(ld->dec_src, (size_t)n_ids * sizeof(int32_t));
    TRI_ASSERT(ld->dec_src);
    for (uint32_t id = tk->n_ids; id < n_ids; id++) ld->dec_src[id] = -1;
    tk->n_ids = n_ids;
    ld->dec_cap += (size_t)tk->n_added;
    ld->dec_strs = realloc(ld->dec_strs, ld->dec_cap * sizeof(char *));
    ld->dec_lens = realloc(ld->dec_lens, ld->dec_cap * sizeof(size_t));
    TRI_ASSERT(ld->dec_strs && ld->dec_lens);
    for (int i = 0; i < tk->n_added; i++)
        set_text(ld, tk->added[i].id, tk->added[i].content, tk->added[i].len);
    build_decoder(ld);
    build_set(tk, &tk->plain, 0);
    build_set(tk, &tk->normalized, 1);
    return TRI_OK;
}

tri_status tokenizer_load(const char *path, tokenizer **out) {
    *out = NULL;
    char *text = NULL;
    size_t n = 0;
    TRI_CHECK(read_text_file(path, &text, &n));
    json_doc *doc = json_doc_new();
    char err[256];
    const json_value *root = json_parse(doc, text, n, JSON_MAX_DEPTH, err, sizeof err);
    tri_status rc;
    tokenizer *tk = xcalloc(1, sizeof *tk);
    tk->path = xstrdup(path);
    tk->unk_id = -1;
    for (int b = 0; b < 256; b++) tk->byte_id[b] = -1;
    loader ld = {.path = path, .tk = tk};
    if (!root)
        rc = load_fail(path, NULL,
                       "the file must be a tokenizer.json as tokenizers writes it "
                       "(a truncated download?)",
                       "not valid JSON: %s", err);
    else if (root->type != JSON_OBJECT)
        rc = load_fail(path, NULL, HINT_KIND, "must hold a JSON object, found %s",
                       json_type_name(root));
    else rc = read_tokenizer(&ld, root);
    tok_strmap_free(&ld.vocab_json);
    free(ld.dec_src);
    free(ld.dec_strs);
    free(ld.dec_lens);
    json_doc_free(doc);
    free(text);
    if (rc != TRI_OK) {
        tokenizer_free(tk);
        return rc;
    }
    *out = tk;
    return TRI_OK;
}

void tokenizer_free(tokenizer *tk) {
    if (!tk) return;
    for (int i = 0; i < tk->n_added; i++) free(tk->added[i].content);
    free(tk->added);
    free(tk->plain.order);
    free(tk->normalized.order);
    free(tk->merges.keys);
    free(tk->merges.vals);
    tok_strmap_free(&tk->vocab_bytes);
    free(tk->dec_off);
    free(tk->dec_len);
    free(tk->dec_pool);
    free(tk->path);
    free(tk);
}

uint32_t tokenizer_n_ids(const tokenizer *tk) { return tk->n_ids; }

int64_t tokenizer_token_id(const tokenizer *tk, const char *content) {
    size_t len = strlen(content);
    for (int i = 0; i < tk->n_added; i++)
        if (tk->added[i].len == len && !memcmp(tk->added[i].content, content, len))
            return tk->added[i].id;
    uint8_t *bytes = xmalloc(len + 1);
    int64_t nb = symbols_to_bytes(content, len, bytes);
    uint64_t id;
    int found = nb > 0 && tok_strmap_get(&tk->vocab_bytes, bytes, (size_t)nb, &id);
    free(bytes);
    return found ? (int64_t)id : -1;
}

int64_t tokenizer_default_eot(const tokenizer *tk) {
    static const char *const names[] = {"<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
                                        "</s>", "<s>"};
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < tk->n_added; k++)
            if (!strcmp(tk->added[k].content, names[i])) return tk->added[k].id;
    return -1;
}

int tokenizer_cut_safe(const tokenizer *tk) {
    if (tk->prefix_space) return 0;
    for (int i = 0; i < tk->n_added; i++)
        if (tk->added[i].lstrip || memchr(tk->added[i].content, '\n', tk->added[i].len)) return 0;
    return 1;
}

const uint8_t *tokenizer_decode(const tokenizer *tk, uint32_t id, size_t *len) {
    if (id >= tk->n_ids || tk->dec_len[id] < 0) return NULL;
    *len = (size_t)tk->dec_len[id];
    return tk->dec_pool + tk->dec_off[id];
}

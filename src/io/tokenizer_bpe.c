// tokenizer_bpe.c: encoding. A text goes through the steps of tokenizers' encode: the added
// tokens are cut out (leftmost-longest, non-normalized ones first, then the normalized
// ones in the pieces between), the pieces are pre-tokenized (tokenizer_pretok.c), and each
// pre-token is merged by the BPE merge ranks, with a per-thread cache of pre-token results.
#include "io/tokenizer_internal.h"

#include <string.h>

// ---- byte-string hash map

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xD6E8FEB86659FD93ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8, n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return h | (1ull << 63); // 0 marks an empty slot
}

void tok_strmap_init(tok_strmap *m, size_t cap_hint) {
    memset(m, 0, sizeof *m);
    size_t cap = 64;
    while (cap < 2 * cap_hint) cap *= 2;
    m->cap = cap;
    m->hashes = xcalloc(cap, sizeof(uint64_t));
    m->values = xmalloc(cap * sizeof(uint64_t));
    m->keys = xmalloc(cap * sizeof(uint64_t));
}

void tok_strmap_free(tok_strmap *m) {
    free(m->hashes);
    free(m->values);
    free(m->keys);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

void tok_strmap_clear(tok_strmap *m) {
    memset(m->hashes, 0, m->cap * sizeof(uint64_t));
    m->n = 0;
    m->pool_n = 0;
}

static size_t strmap_find(const tok_strmap *m, uint64_t h, const void *key, size_t len) {
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    for (;; i = (i + 1) & mask) {
        if (m->hashes[i] == 0) return i;
        if (m->hashes[i] == h && (m->keys[i] & 0xFFFFFF) == len &&
            !memcmp(m->pool + (m->keys[i] >> 24), key, len))
            return i;
    }
}

static void strmap_grow(tok_strmap *m) {
    tok_strmap old = *m;
    m->cap *= 2;
    m->hashes = xcalloc(m->cap, sizeof(uint64_t));
    m->values = xmalloc(m->cap * sizeof(uint64_t));
    m->keys = xmalloc(m->cap * sizeof(uint64_t));
    size_t mask = m->cap - 1;
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.hashes[i]) continue;
        size_t j = (size_t)old.hashes[i] & mask;
        while (m->hashes[j]) j = (j + 1) & mask;
        m->hashes[j] = old.hashes[i], m->keys[j] = old.keys[i], m->values[j] = old.values[i];
    }
    free(old.hashes);
    free(old.values);
    free(old.keys);
}

void tok_strmap_put(tok_strmap *m, const void *key, size_t len, uint64_t value) {
    TRI_ASSERT(len < (1u << 24));
    if (2 * (m->n + 1) > m->cap) strmap_grow(m);
    uint64_t h = hash_bytes(key, len);
    size_t i = strmap_find(m, h, key, len);
    if (m->hashes[i] == 0) {
        while (m->pool_n + len > m->pool_cap) {
            m->pool_cap = m->pool_cap ? 2 * m->pool_cap : 4096;
            uint8_t *grown = realloc(m->pool, m->pool_cap);
            TRI_ASSERT(grown);
            m->pool = grown;
        }
        memcpy(m->pool + m->pool_n, key, len);
        m->keys[i] = (uint64_t)m->pool_n << 24 | len;
        m->pool_n += len;
        m->hashes[i] = h;
        m->n++;
    }
    m->values[i] = value;
}

int tok_strmap_get(const tok_strmap *m, const void *key, size_t len, uint64_t *value) {
    if (!m->cap || len >= (1u << 24)) return 0;
    size_t i = strmap_find(m, hash_bytes(key, len), key, len);
    if (!m->hashes[i]) return 0;
    *value = m->values[i];
    return 1;
}

// ---- merges

static size_t merge_slot(const tok_mergemap *m, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t mask = m->cap - 1, i = (size_t)(h >> 20) & mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

void tok_mergemap_put(tok_mergemap *m, uint32_t left, uint32_t right, uint32_t rank,
                      uint32_t merged) {
    if (2 * (m->n + 1) > m->cap) {
        tok_mergemap old = *m;
        m->cap = old.cap ? 2 * old.cap : 1024;
        m->keys = xmalloc(m->cap * sizeof(uint64_t));
        m->vals = xmalloc(m->cap * sizeof(uint64_t));
        memset(m->keys, 0xFF, m->cap * sizeof(uint64_t));
        for (size_t i = 0; i < old.cap; i++) {
            if (old.keys[i] == UINT64_MAX) continue;
            size_t j = merge_slot(m, old.keys[i]);
            m->keys[j] = old.keys[i], m->vals[j] = old.vals[i];
        }
        free(old.keys);
        free(old.vals);
    }
    uint64_t key = (uint64_t)left << 32 | right;
    size_t i = merge_slot(m, key);
    if (m->keys[i] == UINT64_MAX) m->n++;
    m->keys[i] = key; // a repeated pair keeps its last rank, as tokenizers' map does
    m->vals[i] = (uint64_t)rank << 32 | merged;
}

static inline int merge_get(const tok_mergemap *m, uint32_t left, uint32_t right, uint64_t *val) {
    if (!m->cap) return 0;
    size_t i = merge_slot(m, (uint64_t)left << 32 | right);
    if (m->keys[i] == UINT64_MAX) return 0;
    *val = m->vals[i];
    return 1;
}

// ---- the encoder

typedef struct {
    uint32_t id, len; // len 0: merged into its left neighbour
    int32_t prev, next;
} symbol;

typedef struct {
    uint32_t rank, pos, merged;
} merge_cand;

// Cached pre-tokens: up to this many bytes each, and the cache is emptied when it holds
// more than CACHE_MAX_ENTRIES pre-tokens or CACHE_MAX_IDS ids (a bound on its memory).
enum { CACHE_MAX_LEN = 256, CACHE_MAX_ENTRIES = 1 << 18, CACHE_MAX_IDS = 1 << 22 };

struct tok_encoder {
    const tokenizer *tk;
    tok_strmap cache; // pre-token bytes -> (offset << 24 | count) into cache_ids
    tok_ids cache_ids;
    symbol *sym;
    merge_cand *heap;
    size_t sym_cap, heap_cap;
    uint8_t *buf; // a piece with its added leading space
    size_t buf_cap;
};

void tok_ids_push(tok_ids *v, uint32_t id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 1024;
        uint32_t *grown = realloc(v->ids, v->cap * sizeof(uint32_t));
        if (!grown) {
            fprintf(stderr, "trident: out of host memory (%zu token ids)\n", v->cap);
            abort();
        }
        v->ids = grown;
    }
    v->ids[v->n++] = id;
}

void tok_ids_free(tok_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

tok_encoder *tok_encoder_new(const tokenizer *tk) {
    tok_encoder *e = xcalloc(1, sizeof *e);
    e->tk = tk;
    tok_strmap_init(&e->cache, 4096);
    return e;
}

void tok_encoder_free(tok_encoder *e) {
    if (!e) return;
    tok_strmap_free(&e->cache);
    tok_ids_free(&e->cache_ids);
    free(e->sym);
    free(e->heap);
    free(e->buf);
    free(e);
}

static int cand_less(merge_cand a, merge_cand b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(tok_encoder *e, size_t *n, merge_cand c) {
    if (*n == e->heap_cap) {
        e->heap_cap = e->heap_cap ? 2 * e->heap_cap : 64;
        merge_cand *grown = realloc(e->heap, e->heap_cap * sizeof(merge_cand));
        TRI_ASSERT(grown);
        e->heap = grown;
    }
    size_t i = (*n)++;
    while (i > 0 && cand_less(c, e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

static merge_cand heap_pop(tok_encoder *e, size_t *n) {
    merge_cand top = e->heap[0], last = e->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(e->heap[c + 1], e->heap[c])) c++;
        if (!cand_less(e->heap[c], last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (*n) e->heap[i] = last;
    return top;
}

static void push_pair(tok_encoder *e, size_t *hn, int32_t pos) {
    const symbol *s = e->sym;
    uint64_t v;
    if (pos >= 0 && s[pos].next >= 0 && merge_get(&e->tk->merges, s[pos].id, s[s[pos].next].id, &v))
        heap_push(e, hn, (merge_cand){(uint32_t)(v >> 32), (uint32_t)pos, (uint32_t)v});
}

// tokenizers' BPE::merge_word and Word::merge_all: symbols are the word's bytes (a byte
// without a token is dropped, or becomes unk_token, fused with a neighbouring unknown when
// fuse_unk); then the pair of lowest rank (leftmost among equals) is merged until none is
// left. A heap entry is stale when its pair no longer stands at its position.
static void bpe_word(tok_encoder *e, const uint8_t *w, size_t n, tok_ids *out) {
    const tokenizer *tk = e->tk;
    if (n > e->sym_cap) {
        e->sym_cap = n > 2 * e->sym_cap ? n : 2 * e->sym_cap;
        free(e->sym);
        e->sym = xmalloc(e->sym_cap * sizeof(symbol));
    }
    symbol *s = e->sym;
    int32_t ns = 0;
    int open_unk = 0; // the last symbol is an unknown that may grow (fuse_unk)
    for (size_t i = 0; i < n; i++) {
        int32_t id = tk->byte_id[w[i]];
        if (id < 0) {
            if (tk->unk_id < 0) continue;
            if (open_unk && tk->fuse_unk) {
                s[ns - 1].len++;
                continue;
            }
            id = (int32_t)tk->unk_id;
            open_unk = 1;
        } else {
            open_unk = 0;
        }
        s[ns] = (symbol){(uint32_t)id, 1, ns - 1, -1};
        if (ns > 0) s[ns - 1].next = ns;
        ns++;
    }
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < ns; i++) push_pair(e, &hn, i);
    while (hn) {
        merge_cand top = heap_pop(e, &hn);
        symbol *a = &s[top.pos];
        if (a->len == 0 || a->next < 0) continue;
        symbol *b = &s[a->next];
        uint64_t v;
        if (!merge_get(&tk->merges, a->id, b->id, &v) || (uint32_t)v != top.merged) continue;
        a->id = top.merged;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (a->next >= 0) s[a->next].prev = (int32_t)top.pos;
        push_pair(e, &hn, a->prev);
        push_pair(e, &hn, (int32_t)top.pos);
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = s[i].next) tok_ids_push(out, s[i].id);
}

// One pre-token: ignore_merges (a whole pre-token in the vocabulary is one token), the
// cache, or the merges.
static void bpe_pretoken(tok_encoder *e, const uint8_t *w, size_t n, tok_ids *out) {
    const tokenizer *tk = e->tk;
    uint64_t v;
    if (tk->ignore_merges && tok_strmap_get(&tk->vocab_bytes, w, n, &v)) {
        tok_ids_push(out, (uint32_t)v);
        return;
    }
    if (n == 1 && tk->byte_id[w[0]] >= 0) {
        tok_ids_push(out, (uint32_t)tk->byte_id[w[0]]);
        return;
    }
    if (n > CACHE_MAX_LEN) {
        bpe_word(e, w, n, out);
        return;
    }
    if (tok_strmap_get(&e->cache, w, n, &v)) {
        const uint32_t *ids = e->cache_ids.ids + (v >> 24);
        for (uint64_t i = 0, k = v & 0xFFFFFF; i < k; i++) tok_ids_push(out, ids[i]);
        return;
    }
    size_t first = out->n;
    bpe_word(e, w, n, out);
    if (e->cache.n >= CACHE_MAX_ENTRIES || e->cache_ids.n >= CACHE_MAX_IDS) {
        tok_strmap_clear(&e->cache);
        e->cache_ids.n = 0;
    }
    uint64_t off = e->cache_ids.n;
    for (size_t i = first; i < out->n; i++) tok_ids_push(&e->cache_ids, out->ids[i]);
    tok_strmap_put(&e->cache, w, n, off << 24 | (out->n - first));
}

// ByteLevel's step on one piece: the added leading space, then its regex (or none).
static void bytelevel_piece(tok_encoder *e, const uint8_t *p, size_t n, tok_ids *out) {
    const tokenizer *tk = e->tk;
    if (tk->prefix_space && p[0] != ' ') {
        if (n + 1 > e->buf_cap) {
            e->buf_cap = 2 * (n + 1);
            free(e->buf);
            e->buf = xmalloc(e->buf_cap);
        }
        e->buf[0] = ' ';
        memcpy(e->buf + 1, p, n);
        p = e->buf, n++;
    }
    for (size_t i = 0; i < n;) {
        size_t end = tok_pattern_match(tk->bytelevel, p, n, i);
        bpe_pretoken(e, p + i, end - i, out);
        i = end;
    }
}

static void pretokenize(tok_encoder *e, const uint8_t *p, size_t n, tok_ids *out) {
    for (size_t i = 0; i < n;) {
        size_t end = tok_pattern_match(e->tk->split, p, n, i);
        bytelevel_piece(e, p + i, end - i, out);
        i = end;
    }
}

// ---- added tokens

static uint8_t class_before(const uint8_t *s, size_t at) { // of the character ending at `at`
    size_t k = at;
    do k--;
    while (k > 0 && (s[k] & 0xC0) == 0x80);
    int len;
    return tok_class(tok_utf8_next(s + k, at - k, &len));
}

static uint8_t class_at(const uint8_t *s, size_t n, size_t at) {
    int len;
    return tok_class(tok_utf8_next(s + at, n - at, &len));
}

// The longest token of `set` at s[p], or -1.
static int added_at(const tokenizer *tk, const tok_added_set *set, const uint8_t *s, size_t n,
                    size_t p) {
    for (int k = set->first[s[p]]; k < set->first[s[p] + 1]; k++) {
        const tok_added *a = &tk->added[set->order[k]];
        if (a->len <= n - p && !memcmp(s + p, a->content, a->len)) return set->order[k];
    }
    return -1;
}

// tokenizers' AddedVocabulary::find_matches on s[0, n): the pieces between matches go to the
// next step (the normalized set, then pre-tokenization); a match that single_word rejects is
// skipped, its text not searched again; lstrip and rstrip take the whitespace around a match.
static void split_added(tok_encoder *e, const tok_added_set *set, int pass, const uint8_t *s,
                        size_t n, tok_ids *out);

static void next_step(tok_encoder *e, int pass, const uint8_t *s, size_t n, tok_ids *out) {
    if (n == 0) return;
    if (pass == 0) split_added(e, &e->tk->normalized, 1, s, n, out);
    else pretokenize(e, s, n, out);
}

static void split_added(tok_encoder *e, const tok_added_set *set, int pass, const uint8_t *s,
                        size_t n, tok_ids *out) {
    const tokenizer *tk = e->tk;
    if (set->n == 0) {
        next_step(e, pass, s, n, out);
        return;
    }
    size_t done = 0, p = 0; // text before `done` is handled; search from p
    while (p < n) {
        int k = -1;
        for (; p < n; p++)
            if (set->first[s[p]] < set->first[s[p] + 1] && (k = added_at(tk, set, s, n, p)) >= 0)
                break;
        if (k < 0) break;
        const tok_added *a = &tk->added[k];
        size_t start = p, stop = p + a->len;
        p = stop;
        if (a->single_word && ((start > 0 && (class_before(s, start) & TOK_CL_W)) ||
                               (stop < n && (class_at(s, n, stop) & TOK_CL_W))))
            continue;
        if (a->lstrip) { // back over the whitespace before it, not into handled text
            while (start > done && (class_before(s, start) & TOK_CL_WS)) {
                size_t k2 = start;
                do k2--;
                while (k2 > 0 && (s[k2] & 0xC0) == 0x80);
                start = k2;
            }
            if (start < done) start = done;
        }
        if (a->rstrip) {
            int len;
            while (stop < n && (tok_class(tok_utf8_next(s + stop, n - stop, &len)) & TOK_CL_WS))
                stop += (size_t)len;
        }
        if (done < start) next_step(e, pass, s + done, start - done, out);
        tok_ids_push(out, a->id);
        done = stop;
    }
    if (done < n) next_step(e, pass, s + done, n - done, out);
}

void tok_encode(tok_encoder *e, const char *text, size_t n, tok_ids *out) {
    if (n == 0) return;
    split_added(e, &e->tk->plain, 0, (const uint8_t *)text, n, out);
}

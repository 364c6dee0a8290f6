// tokenizer.h: Hugging Face byte-level BPE tokenizers (tokenizer.json), in C.
//
// What is read: model.type "BPE" (vocab; merges as "a b" strings or as [a, b] pairs;
// unk_token, fuse_unk, ignore_merges), the pre-tokenizer of GPT-2 (ByteLevel with its
// regex) or of Llama 3 (Sequence of a Split by Llama 3's regex, Isolated, and ByteLevel
// without regex), add_prefix_space, no normalizer, a ByteLevel decoder, and the added
// tokens (special or not; single_word, lstrip, rstrip, normalized), matched in the text as
// tokenizers does: leftmost-longest, before pre-tokenization. Anything else (Unigram,
// WordPiece, WordLevel, a normalizer, another pre-tokenizer or regex, BPE dropout, byte
// fallback, subword prefixes) is refused at load, naming the JSON field.
//
// Encoding equals tokenizers' `Tokenizer.encode(text, add_special_tokens=False)` (the
// post-processor is not applied: `trident tokenize` places its own end-of-text token), up
// to the Unicode version of the classes \p{L}, \p{N} and \s (tokenizer_unicode.c).
#pragma once
#include "base/common.h"

typedef struct tokenizer tokenizer;
typedef struct tok_encoder tok_encoder;

// A growable list of token ids.
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} tok_ids;

// Reads and checks `path`. Every problem names the file and the JSON field, adds a HINT,
// and returns TRI_ERR_CONFIG (a missing or unreadable file too).
tri_status tokenizer_load(const char *path, tokenizer **out);
void tokenizer_free(tokenizer *tk);

// One more than the largest token id (model vocabulary and added tokens).
uint32_t tokenizer_n_ids(const tokenizer *tk);
// The id of the added token (or vocabulary entry) whose text is `content`, or -1.
int64_t tokenizer_token_id(const tokenizer *tk, const char *content);
// The end-of-text token placed before each document: the first of <|endoftext|>,
// <|begin_of_text|>, <|end_of_text|>, </s>, <s> that is an added token, or -1.
int64_t tokenizer_default_eot(const tokenizer *tk);
// Whether a text may be cut after "X\n" before an ASCII letter (X an ASCII character other
// than whitespace) with the two parts encoding to the same ids as the whole: true unless
// add_prefix_space is on, or an added token holds a newline or strips the space to its
// left. tokenize uses it to encode one large document on several threads.
int tokenizer_cut_safe(const tokenizer *tk);

// The bytes of token `id` as the ByteLevel decoder writes them (an added token whose
// characters are not all byte symbols: its UTF-8 text); NULL when no token has that id.
const uint8_t *tokenizer_decode(const tokenizer *tk, uint32_t id, size_t *len);

// An encoder holds one thread's scratch memory and its cache of pre-token encodings.
tok_encoder *tok_encoder_new(const tokenizer *tk);
void tok_encoder_free(tok_encoder *enc);
// Appends the ids of text[0, n) (valid UTF-8: the caller checks, json_utf8_valid) to out.
void tok_encode(tok_encoder *enc, const char *text, size_t n, tok_ids *out);

void tok_ids_push(tok_ids *v, uint32_t id);
void tok_ids_free(tok_ids *v);

// yaml_limit.h: a nesting limit for the YAML trident reads with libyaml's document API (run
// configs, checkpoint manifests).
//
// libyaml's parser takes time quadratic in the nesting of flow collections ("[[[...]]]":
// 100,000 levels take 25 s, 200,000 over a minute) and its document loader recurses on it;
// trident's files nest a few levels. ylimit_depth_exceeds reads the parser's events only as
// far as the limit, so refusing deep input costs what its first levels cost.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <yaml.h>

// Deeper than any file trident writes or reads (a config nests 2 levels, a manifest 5).
#define YLIMIT_MAX_DEPTH 64
#define YLIMIT_MAX_DEPTH_TEXT "64"

// 1 when a collection of `text` (len bytes) opens level max_depth + 1 (*line: its line,
// 1-based, when line is not NULL); 0 when none does, or when the YAML breaks before (the
// document loader reports that).
int ylimit_depth_exceeds(const unsigned char *text, size_t len, int max_depth, size_t *line);
// The same pass, also handing every event it reads to on_event(event, ctx) (when not NULL):
// what the document API drops (whether a tag was written) can be collected on the way.
int ylimit_scan(const unsigned char *text, size_t len, int max_depth, size_t *line,
                void (*on_event)(const yaml_event_t *e, void *ctx), void *ctx);

// Reads the rest of `f` into a malloc'd buffer (NUL-terminated; *len bytes before the NUL).
// 0 on a read error (errno set) or when the file passes max_bytes (errno EFBIG).
int ylimit_read_all(FILE *f, size_t max_bytes, unsigned char **text, size_t *len);

// yaml_parser_initialize, then the first document of `f` into *doc, as yaml_parser_load but
// refusing nesting past YLIMIT_MAX_DEPTH. 1 on success; on 0, parser->problem and
// parser->problem_mark say why and where (a syntax error, a read error, or "nested deeper
// than 64 levels"). The input is gone when this returns: the parser then serves only its
// error fields and yaml_parser_delete, which the caller calls in both cases.
int ylimit_load_file(yaml_parser_t *parser, FILE *f, yaml_document_t *doc);

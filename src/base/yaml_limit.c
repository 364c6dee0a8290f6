// yaml_limit.c: see yaml_limit.h.
#include "base/yaml_limit.h"

#include <errno.h>
#include <string.h>

#include "base/common.h"

_Static_assert(YLIMIT_MAX_DEPTH == 64, "YLIMIT_MAX_DEPTH_TEXT spells it");

int ylimit_depth_exceeds(const unsigned char *text, size_t len, int max_depth, size_t *line) {
    return ylimit_scan(text, len, max_depth, line, NULL, NULL);
}

int ylimit_scan(const unsigned char *text, size_t len, int max_depth, size_t *line,
                void (*on_event)(const yaml_event_t *e, void *ctx), void *ctx) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return 0;
    yaml_parser_set_input_string(&p, text, len);
    int depth = 0, exceeds = 0;
    for (;;) {
        yaml_event_t e;
        if (!yaml_parser_parse(&p, &e)) break; // broken YAML: the loader says where
        const yaml_event_type_t type = e.type;
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > max_depth) {
                exceeds = 1;
                if (line) *line = e.start_mark.line + 1;
            }
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        if (on_event && !exceeds) on_event(&e, ctx);
        yaml_event_delete(&e);
        if (exceeds || type == YAML_STREAM_END_EVENT) break;
    }
    yaml_parser_delete(&p);
    return exceeds;
}

int ylimit_read_all(FILE *f, size_t max_bytes, unsigned char **text, size_t *len) {
    size_t cap = 4096, n = 0;
    unsigned char *buf = xmalloc_for(cap, "a YAML file");
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max_bytes) {
                free(buf);
                errno = EFBIG;
                return 0;
            }
            unsigned char *bigger = xmalloc_for(2 * cap, "a YAML file");
            memcpy(bigger, buf, n);
            free(buf);
            buf = bigger, cap *= 2;
        }
        const size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f) || n > max_bytes) {
        if (!ferror(f)) errno = EFBIG;
        free(buf);
        return 0;
    }
    buf[n] = '\0';
    *text = buf, *len = n;
    return 1;
}

int ylimit_load_file(yaml_parser_t *parser, FILE *f, yaml_document_t *doc) {
    memset(doc, 0, sizeof *doc);
    if (!yaml_parser_initialize(parser)) return 0;
    unsigned char *text;
    size_t len, line = 0;
    // A manifest holds an index line per tensor region: far below this for any model.
    if (!ylimit_read_all(f, (size_t)1 << 30, &text, &len)) {
        parser->error = YAML_READER_ERROR;
        parser->problem = errno == EFBIG ? "larger than 1 GiB" : "cannot read the file";
        return 0;
    }
    if (ylimit_depth_exceeds(text, len, YLIMIT_MAX_DEPTH, &line)) {
        free(text);
        parser->error = YAML_COMPOSER_ERROR;
        parser->problem = "nested deeper than " YLIMIT_MAX_DEPTH_TEXT " levels";
        parser->problem_mark.line = line ? line - 1 : 0;
        return 0;
    }
    yaml_parser_set_input_string(parser, text, len);
    const int ok = yaml_parser_load(parser, doc);
    free(text);
    return ok;
}

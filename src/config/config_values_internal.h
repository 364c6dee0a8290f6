// config_values_internal.h: one YAML value into one key: what YAML makes of the value (its
// tag, its quotes), the key's type, the message when they do not fit. Private to src/config:
// other modules use config.h.
//
// The rule for types, quotes and tags (README "Config reference"), as YAML 1.1 reads a value:
//   - an explicit tag (!!str, !!int, !!float, !!bool, !!null) sets the value's type whatever
//     its text; any other tag is refused;
//   - else a quoted value ('...' or "...") is a string;
//   - else a plain value is read by the key's type.
// Integer keys take integers; number keys integers and decimals; boolean keys true/false
// (yes/no, on/off); string and choice keys strings (a plain value is taken as its text);
// parallel.dp an integer or the name auto. So n_layer: "4" and n_layer: !!str 4 are refused
// (a string where an integer belongs) while schedule: "1f1b" and dp: "auto" are accepted.
#pragma once
#include <yaml.h>

#include "config/config_diag_internal.h"

// What YAML makes of a scalar before the key reads it.
typedef enum {
    VALUE_PLAIN = 0, // no tag, no quotes: read by the key's type
    VALUE_STR,       // quoted, or tagged !!str (or the non-specific "!")
    VALUE_INT,       // tagged !!int
    VALUE_FLOAT,     // tagged !!float
    VALUE_BOOL,      // tagged !!bool
    VALUE_NULL,      // tagged !!null
    VALUE_OTHER_TAG, // any other tag (!!binary, !local, ...)
} value_kind;

// A YAML value as the setters see it: from a file node or from a --set value.
typedef struct {
    yaml_node_type_t type;
    const char *text; // scalar text, NUL-terminated by libyaml
    size_t len;
    value_kind kind;
    char tag[40]; // the tag as written ("!!int"), "" without one
} scalar_view;

// The tags written in a YAML text: libyaml's document API keeps a node's tag but not whether
// it was written (a plain scalar carries the default !!str tag too), so ylimit_scan hands
// the events to config_tags_collect before the document is loaded, and each node finds its
// own by the byte offset where it starts.
typedef struct {
    struct {
        size_t index;
        char tag[40];
    } * items;
    int n, cap;
} config_tags;
void config_tags_collect(const yaml_event_t *e, void *tags); // ylimit_scan's on_event
void config_tags_free(config_tags *t);

// The value of `node` (tags: those collected from its text, or NULL).
scalar_view config_view_of(const yaml_node_t *node, const config_tags *tags);
int config_is_null(const scalar_view *v);
// "1.5", "null", the string "abc", "5 (tagged !!int)" or "a mapping", for "got ...".
const char *config_describe(const scalar_view *v, char *buf, size_t n);

// Stores value `v` into key k, or reports why it cannot (and marks k bad); remembers where
// it came from.
void config_set_value(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v,
                      config_loc loc);
// Replaces string key k's value with a copy of s.
void config_set_string(run_config *cfg, key_id k, const char *s);

// config_sources_internal.h: the values of data.train and data.val (KT_SOURCES keys): a glob
// (the string form), or a list: data.train's weighted sources [{path: GLOB, weight: W}, ...]
// (a blend) and data.val's named sets [{name: NAME, path: GLOB}, ...], in YAML's flow or
// block style. Private to src/config: other modules use config.h.
//
// A list is checked item by item and every problem is reported with the item's key path
// (data.train[1].weight) at its line: an empty list; more than CONFIG_DATA_SOURCES_MAX
// items; an item that is not a mapping; an unknown, duplicate or missing key; a path that is
// not a string (or is empty, or too long); a weight that is not a number > 0 (or NaN or
// infinite), or whose share of the total is below CONFIG_DATA_SHARE_MIN; a glob given twice
// in data.train; a name that is not [A-Za-z0-9_.-]{1,64} or is given twice in data.val.
#pragma once
#include "config/config_values_internal.h"

#define CONFIG_DATA_NAME_MAX 64

// The string form of `glob`: one item, weight 1, no name.
void config_sources_set_glob(config_data_sources *s, const char *glob);
void config_sources_free(config_data_sources *s);

// Stores YAML node `node` of document d into key k (a KT_SOURCES key): a scalar as the
// string form, under a string key's rules (not null, not empty, shorter than PATH_MAX); a
// sequence as the list form; anything else is refused. Problems are reported (and k marked
// bad); `loc` is where the value came from.
void config_set_sources(config_ctx *c, run_config *cfg, key_id k, yaml_document_t *d,
                        yaml_node_t *node, const config_tags *tags, config_loc loc);

// Stores the value node `val` of document `doc` into key k (config_view_of, then
// config_set_value): the one way a key's value gets from YAML into run_config, for a config
// file and for the config a checkpoint recorded (config_resume.c) alike, so that a kind of
// value a key learns to take (a list, a mapping) is read back from checkpoints too.
void config_set_node(config_ctx *c, run_config *cfg, yaml_document_t *doc, yaml_node_t *val,
                     const config_tags *tags, key_id k, config_loc loc);

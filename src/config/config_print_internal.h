// config_print_internal.h: the resolved config as YAML or JSON (config.h's config_print_yaml
// and config_print_json, in config_print.c), and the number text they use, which messages
// about values use too. Private to src/config: other modules use config.h.
#pragma once
#include "config/config_keys_internal.h"

// config_format_double (the number text) and config_print_quoted (a quoted string) are
// public (config.h): the data order's records use them too.

// Key k's value as config_print_yaml (json = 0) or config_print_json (json = 1) writes it,
// malloc'd: equal values have equal texts (numbers in their shortest exact form).
char *config_value_text(const run_config *cfg, key_id k, int json);
// s as a double-quoted string valid in both JSON and YAML, malloc'd.
char *config_quoted(const char *s);

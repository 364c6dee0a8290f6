// config_print_internal.h: the resolved config as YAML or JSON (config.h's config_print_yaml
// and config_print_json, in config_print.c), and the number text they use, which messages
// about values use too. Private to src/config: other modules use config.h.
#pragma once
#include "config/config.h"

// config_format_double (the number text) and config_print_quoted (a quoted string) are
// public (config.h): the data order's records use them too.

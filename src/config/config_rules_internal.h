// config_rules_internal.h: each key against its range, the rules that tie keys together
// (shapes that tp and pp must divide, schedule needs, batch splits), and the rules that need
// the world size (config.h's config_resolve_world, in config_rules.c). Private to
// src/config: other modules use config.h.
#pragma once
#include "config/config_diag_internal.h"

// Reports every numeric key outside its table range and marks it bad.
void config_check_ranges(config_ctx *c, const run_config *cfg);
// Reports every broken rule between keys that does not need the world size; a rule is
// skipped when one of its keys is already bad.
void config_check_rules(config_ctx *c, const run_config *cfg);

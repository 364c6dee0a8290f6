// run_record.h: a config value recorded with a finished or running run, read back by the
// commands that take a run as their SOURCE (`trident sample` finds data.tokenizer so).
#pragma once
#include "base/common.h"

// The string value of config key SECTION.KEY recorded with `source`: a run directory (the
// newest run record of its metrics.jsonl, DESIGN.md "Metrics"), a checkpoint directory or a
// checkpoint.dir (its manifest.yaml's config). Returns 1 and the value in out[n]; 0 when
// the source records none (an llm.c model file, a null value, no record, an unreadable
// record: the caller goes on without it).
int run_record_config_string(const char *source, const char *section, const char *key, char *out,
                             size_t n);

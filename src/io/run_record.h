// run_record.h: a config value recorded with a finished or running run, read back by the
// commands that take a run as their SOURCE (`trident sample` finds data.tokenizer so).
#pragma once
#include "base/common.h"
#include "io/json.h"

// The string value of config key SECTION.KEY recorded with `source`: a run directory (the
// newest run record of its metrics.jsonl, DESIGN.md "Metrics"), a checkpoint directory or a
// checkpoint.dir (its manifest.yaml's config). Returns 1 and the value in out[n]; 0 when
// the source records none (an llm.c model file, a null value, no record, an unreadable
// record: the caller goes on without it).
int run_record_config_string(const char *source, const char *section, const char *key, char *out,
                             size_t n);

// The newest run record (a {"type":"run"} line, DESIGN.md "Metrics") of the metrics file
// `path`, parsed into doc: 1 with *root and *line (its 1-based line number); 0 when the file
// cannot be opened (errno says why) or holds no run record; -1 when the newest is not valid
// JSON (err says where). Lines longer than max_line bytes are skipped as no record.
int run_record_newest(const char *path, json_doc *doc, const json_value **root, int *line,
                      size_t max_line, char *err, size_t errn);

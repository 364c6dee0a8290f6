// config_resume.h: what a resume changes. The config a checkpoint recorded (its manifest's
// resolved config) against the resuming run's, key by key through the key table, so that
// every key is compared, also one added later; each difference carries its key's class
// (config.h's resume_class: FREE, GUARDED, FIXED) and what it does ("the LR decay now ends at
// step 900 instead of 600"). Deciding, printing and recording the list is the trainer's
// (app/resume_diff.h); other checks (the data order) add their own differences to the list.
#pragma once
#include "config/config.h"

// One difference between the checkpoint's config and the resuming run's.
typedef struct {
    char *key;                 // "train.steps", or what a caller names ("data order")
    char *from, *to;           // the values as YAML text
    char *from_json, *to_json; // the same as JSON values (the run record's resume_changes)
    resume_class cls;
    char *effect; // what the change does, e.g. "resharded from tp2 x pp1 x dp2 to ..."
} resume_change;

typedef struct {
    resume_change *items;
    int n, cap;
} resume_changes;

// Compares the config recorded in a checkpoint with `now` and appends every difference to
// `out`, in the table's order. `recorded` (n bytes) is the manifest's `config:` block (YAML,
// the line `config:` and the keys under it), which starts at line `first_line` of `origin`
// (the manifest's path, for messages); ckpt_step is the checkpoint's step (the effects of
// the schedule keys name the learning rate of the step that follows it).
// A key the block does not hold (a checkpoint written before the key existed) has its
// table's `absent` value, else its default. A key or section the block holds that this
// trident does not know is a GUARDED difference (its setting cannot be kept); a value of a
// known key that it cannot read is a difference of that key's class.
// TRI_ERR_CKPT, naming origin, when the block is not a YAML mapping under `config:`.
tri_status config_resume_diff(const char *recorded, size_t n, const char *origin, int first_line,
                              const run_config *now, int ckpt_step, resume_changes *out);

// Appends a difference found elsewhere (e.g. the data order): the values as text, recorded
// as JSON strings.
void resume_changes_add(resume_changes *l, const char *key, resume_class cls, const char *from,
                        const char *to, const char *effect);
void resume_changes_free(resume_changes *l);
// The most restrictive class in the list (FIXED > GUARDED > FREE); RESUME_UNSET when empty.
resume_class resume_changes_worst(const resume_changes *l);
// The list as a JSON array (malloc'd) for the run record: [{"key":..,"from":..,"to":..,
// "class":"free","effect":".."}, ...], the values typed as in the record's config.
char *resume_changes_json(const resume_changes *l);
// "free", "guarded", "fixed" (README "Resuming"), "unset".
const char *resume_class_name(resume_class c);

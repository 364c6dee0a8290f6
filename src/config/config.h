// config.h: the run config of DESIGN.md as a typed struct, parsed from YAML with libyaml.
//
// The config layer sits above the modules it configures: the types of its values (the
// model's shape, the optimizer's settings, the schedule, recompute and gather kinds, the
// dtypes) are the modules' own, and the modules take those, not the run config.
//
// Unknown keys are errors (with a "did you mean"); wrong types, out-of-range values and
// inconsistent combinations are errors; every violation is reported at once, each with its
// key path and the file's line, before any communicator is created.
//
// Implemented by src/config/config_*.c, one part per responsibility (config_keys_internal.h
// lists them), each with a private header of the folder.
#pragma once
#include "base/common.h"
#include "base/dtype.h"
#include "comm/comm.h"       // comm_kind
#include "compute/backend.h" // backend_kind
#include "model/model.h"     // model_config, recompute_kind
#include "parallel/optim.h"  // optim_config, decay_kind
#include "parallel/sched.h"  // schedule_kind
#include "parallel/zero.h"   // zero3_gather_kind

#define DP_AUTO (-1)
// Room for every key of the table (config_keys_internal.h's K_COUNT, asserted there).
#define CONFIG_KEYS_MAX 128

// train.precision: the dtype of the parameters and kept activations, and for fp32 whether
// the matmuls may round their operands to TF32 on tensor cores. The first two values are
// tri_dtype's DTYPE_FP32 and DTYPE_BF16.
typedef enum { PRECISION_FP32 = 0, PRECISION_BF16 = 1, PRECISION_TF32 = 2 } precision_kind;

// checkpoint.resume_changes: what a resume does when a guarded key differs from the
// checkpoint's (config_resume.h).
typedef enum { RESUME_CHANGES_REFUSE = 0, RESUME_CHANGES_ALLOW = 1 } resume_changes_kind;

// What a resume does when a key differs from the value the checkpoint recorded (each key of
// the table has one; README "Checkpoints and resume", "Resuming"):
//   FREE     the run goes on and says what the change does (layout, steps, evaluation,
//            logging, checkpoints, system);
//   GUARDED  it changes what is trained (model hyper-parameters, optimizer, global batch,
//            data, precision, seed): refused (exit 2) unless checkpoint.resume_changes: allow;
//   FIXED    the checkpoint's tensors cannot fit the model (its shape): refused (exit 4)
//            whatever checkpoint.resume_changes says.
// RESUME_UNSET is no class: tests/test_config.c fails on a key that has it.
typedef enum { RESUME_UNSET = 0, RESUME_FREE, RESUME_GUARDED, RESUME_FIXED } resume_class;

// One source of data.train's or one set of data.val's list form (README "Config reference").
typedef struct {
    char *path;    // a glob of token shards
    char *name;    // data.val: the set's name (reported as val_loss/NAME); NULL for data.train
    double weight; // data.train: > 0, normalised over the list; 1 in the string form
} config_data_source;

// data.train or data.val: a single glob (the string form: one item, weight 1, no name) or a
// list (`listed`): data.train's weighted sources, data.val's named sets.
typedef struct {
    config_data_source *items;
    int n; // >= 1
    int listed;
} config_data_sources;

// At most this many items in data.train's or data.val's list (each opens its shards).
#define CONFIG_DATA_SOURCES_MAX 1024
// The smallest share of data.train's total weight a source may have: smaller ones would draw
// nothing for millions of steps (io/data_blend.h quantises shares to 2^-20 of a sample).
#define CONFIG_DATA_SHARE_MIN 1e-6

typedef struct {
    struct {
        char *name;
        char *out_dir;
        uint64_t seed;
    } run;
    model_config model; // model/model_config.h: arch, n_layer, ..., init_from
    struct {
        int tp, pp, dp; // dp may be DP_AUTO until config_resolve_world()
        int virtual_stages;
        schedule_kind schedule;
        int zero; // 0..3
        int sequence_parallel;
        recompute_kind recompute;
        double bucket_mb; // gradient bucket size for the dp reduction (layers merged up to it)
        zero3_gather_kind zero3_gather;
        int overlap; // dp reductions, ZeRO-3 gathers and pipeline transfers run while
                     // compute goes on (comm.h's *_start / wait)
    } parallel;
    struct {
        int micro_batch, global_batch, steps;
        precision_kind precision_mode; // the key train.precision
        // What the modules take: precision_mode's storage dtype (DTYPE_FP32 for tf32), set
        // by config_load; grad_dtype and reduce_dtype are keys.
        tri_dtype precision, grad_dtype, reduce_dtype;
        double grad_clip; // 0 = off
    } train;
    optim_config optim; // parallel/optim.h: lr, min_lr, warmup_steps, decay, ...
    struct {
        config_data_sources train; // a glob, or weighted sources: a blend (io/data_blend.h)
        config_data_sources val;   // a glob (val_loss), or named sets (val_loss/NAME)
        int shuffle;               // a seeded permutation per epoch (io/data.h), else plain order
        int eval_every, eval_batches;
        char *tokenizer; // the tokenizer.json that made the shards (null: none recorded)
    } data;
    struct {
        char *dir;
        int every, keep, async;
        char *resume;
        resume_changes_kind resume_changes;
    } checkpoint;
    struct {
        int every;
        char *metrics;
        int metrics_required; // a failed metrics write stops the run (exit 4), else a warning
        char *tensorboard;    // TensorBoard event directory (io/tensorboard.h); NULL: none
        double straggler_pct; // a rank this much slower than the median (compute time) ...
        int straggler_steps;  // ... at this many logged steps in a row: a warning naming it
    } log;
    struct {
        backend_kind backend;
        comm_kind comm;
        int threads;
        double comm_timeout_s;
        double init_timeout_s; // a start-up phase without progress this long: exit 5; 0 = off
        char *device_profile;  // the planner's profile (plan_profile.h) for the run record; NULL:
                               // the device's built-in table entry
    } system;

    char *source_path; // the YAML file this came from
    // given[k]: key k was set by the YAML file or a --set (config_load), not defaulted; what
    // config_key_value reports (a model.init_from Hugging Face directory's config.json
    // overrides the model keys a user left alone and refuses to contradict one they set).
    unsigned char given[CONFIG_KEYS_MAX];
} run_config;

// "section.key"'s value as the run record writes it (YAML text, malloc'd) and whether the
// YAML file or a --set gave it (*given); NULL for a key this build does not have.
char *config_key_value(const run_config *cfg, const char *path, int *given);

// Fills every key with its DESIGN.md default.
void config_defaults(run_config *cfg);

// Parses `path` over the defaults, then applies `n_set` overrides "a.b=c" (YAML scalar
// syntax for the value), then validates everything that does not depend on the world
// size, the size rules among it (CONFIG_RANK_BYTES_MAX below). On any violation prints every one to stderr ("CONFIG:LINE: key.path: problem")
// and returns TRI_ERR_CONFIG. A missing or unreadable file is TRI_ERR_CONFIG too.
// cfg must hold config_defaults() (or an earlier config); on error it is config_free()d.
tri_status config_load(run_config *cfg, const char *path, int n_set, char **sets);
// The same with no YAML file: the defaults and `sets` alone, which are what `source` (a file
// that is not a YAML config: a Hugging Face directory's config.json) gives. Each message names
// `source` and the key, with no "--set" nor count line: the caller adds its HINT.
tri_status config_load_sets(run_config *cfg, const char *source, int n_set, char **sets);

// Resolves parallel.dp (auto -> world / (tp*pp)) and checks the rules that need the world
// size: world == tp*pp*dp, global_batch % (micro_batch*dp), micro-batches >= pp for 1f1b,
// interleaved micro-batches % pp, and the size rules of a rank's buffers (at most
// CONFIG_RANK_BYTES_MAX, summed from the specs the trainer carves). Prints violations;
// TRI_ERR_CONFIG on any.
tri_status config_resolve_world(run_config *cfg, int world);

// Size limits (README "Config reference", "Sizes"). A config whose sizes pass them is refused
// by config_load / config_resolve_world (exit 2, the key and the bytes named) before anything
// is built: every count the code keeps in an int fits it, and no rank needs more than
//   CONFIG_RANK_BYTES_MAX    bytes of buffers (parameters, gradients, optimizer state,
//                            activations, workspaces: the planner's per-rank total; far past
//                            any device, and past the memory of the largest single hosts);
//   CONFIG_RANK_ENTRIES_MAX  parameter tensors in one rank's table (12 per layer: about
//                            87,000 layers on one pipeline rank; each costs host memory in
//                            every process and in the planner).
#define CONFIG_RANK_BYTES_MAX ((uint64_t)16 << 40) // 16 TiB
#define CONFIG_RANK_ENTRIES_MAX (1 << 20)

// The size rules that need no world size (those config_load applies), for a config whose
// keys are otherwise valid, with the tp and pp it holds: 0 when within them; else 1, and
// `why` (when not NULL) holds the first message. What callers that change a loaded config's
// layout (plan --search) ask before they build tables for it.
int config_size_problem(const run_config *cfg, char *why, size_t n);

// Micro-batches per optimizer step for each dp replica: global_batch / (micro_batch * dp).
int config_micro_batches(const run_config *cfg);

// Padded vocabulary: vocab_size rounded up to a multiple of vocab_pad_to * tp.
int config_padded_vocab(const run_config *cfg);

// The model keys that 0 or -1 leave to a rule, resolved in place (config_load does it before
// its rules; a checkpoint's recorded config gets the same, so one written before these keys
// existed reads as the model it was): n_kv_head 0 -> n_head; ffn_hidden 0 -> 4 * d_model for
// gpt2, the Llama rule for llama (model_llama_ffn_rule; past INT_MAX it stays 0 for the rules
// to refuse); tie_embeddings -1 -> 1 for gpt2, 0 for llama. Idempotent.
void config_resolve_model(model_config *mc);

// Writes the resolved config as YAML (same keys, same order) to `f`, each line prefixed
// by `indent` spaces. Used by `trident check`, the metrics run record and checkpoints.
void config_print_yaml(const run_config *cfg, FILE *f, int indent);

// Writes the resolved config as one JSON object (no newline) to `f`.
void config_print_json(const run_config *cfg, FILE *f);

// Shortest text that reads back to exactly v, always with a '.' in the mantissa so that
// YAML 1.1 readers (PyYAML) see a float: 0.1, 1.0e-08, 300.0.
void config_format_double(double v, char *buf, size_t n);
// Writes s double-quoted, with escapes valid in both JSON and YAML.
void config_print_quoted(FILE *f, const char *s);

void config_free(run_config *cfg);

// Names of enum values as they appear in YAML ("1f1b", "bf16", ...).
const char *config_schedule_name(schedule_kind s);
const char *config_decay_name(decay_kind d);
const char *config_backend_name(backend_kind b);
const char *config_comm_name(comm_kind c);
const char *config_recompute_name(recompute_kind r);
const char *config_precision_name(precision_kind p);

// main.c: the trident command line (DESIGN.md "CLI"). Each subcommand's arguments are one
// table (app/cli.h) that both its parser and its --help read; main dispatches to the module
// and turns its status into the documented exit code.
#include <math.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "app/cli.h"
#include "app/commtest.h"
#include "app/diagnose.h"
#include "app/sample.h"
#include "app/tokenize.h"
#include "app/train.h"
#include "base/stop.h"
#include "base/suggest.h"
#include "comm/launch.h"
#include "comm/mesh.h"
#include "compute/backend.h"
#include "config/config.h"
#include "config/config_layout.h"
#include "io/export.h"
#include "io/hf_config.h"
#include "io/metrics.h"
#include "plan/plan.h"
#include "plan/plan_profile.h"

#define TRIDENT_VERSION_STRING "trident 0.1.0"

// ---------------------------------------------------------------------------------------
// The tables

// train, check and plan: CONFIG [--set k=v]... and, for check and plan, --world and the
// planner's options.
typedef struct {
    cli_list config; // CONFIG, exactly one
    cli_list sets;   // --set a.b=c, applied in order after the file
    int world;       // --world N; 0: not given
    plan_options plan;
} config_args;

#define CA(field) offsetof(config_args, field)
#define OPT_SET                                                                                    \
    {                                                                                              \
        "--set", "KEY=VALUE", CLI_LIST, CA(sets),                                                  \
            .help =                                                                                \
                "override a config key, e.g. --set optim.lr=3e-4 (repeatable; after the file, "    \
                "in order)"                                                                        \
    }
#define OPT_WORLD(what, default_text)                                                              \
    {                                                                                              \
        "--world", "N", CLI_INT, CA(world), .lo = 1, .hi = PLAN_MAX_WORLD, .help = what,           \
                                            .def = default_text                                    \
    }
#define CONFIG_ARG                                                                                 \
    .args = "CONFIG", .args_help = "the YAML run file (configs/ holds examples)", .min_args = 1,   \
    .max_args = 1, .args_offset = CA(config)

static const config_args CONFIG_DEFAULTS = {.plan = {.top = 15}};

static const cli_option TRAIN_OPTIONS[] = {OPT_SET};
static const cli_command TRAIN_CLI = {
    .name = "train",
    CONFIG_ARG,
    .summary = "train the model CONFIG describes (resuming as checkpoint.resume says)",
    .options = TRAIN_OPTIONS,
    .n_options = CLI_N(TRAIN_OPTIONS),
    .defaults = &CONFIG_DEFAULTS,
    .opts_size = sizeof(config_args),
};

static const cli_option CHECK_OPTIONS[] = {
    OPT_WORLD("the number of processes to check the layout for (resolves parallel.dp: auto)", "1"),
    OPT_SET,
};
static const cli_command CHECK_CLI = {
    .name = "check",
    CONFIG_ARG,
    .summary = "validate CONFIG; print the resolved config and the mesh",
    .options = CHECK_OPTIONS,
    .n_options = CLI_N(CHECK_OPTIONS),
    .defaults = &CONFIG_DEFAULTS,
    .opts_size = sizeof(config_args),
};

static const cli_option PLAN_OPTIONS[] = {
    OPT_WORLD("the number of devices to plan for",
              "the config's tp * pp * dp, dp: auto counting as 1"),
    {"--device", "NAME", CLI_STR, CA(plan.device),
     .help = "the device: h100, h200, a100 or cpu (the table under README \"Planning a run\", "
             "uncalibrated estimates), or a profile FILE (.yaml) that --calibrate wrote",
     .def = "h100 when system.backend is cuda, else cpu"},
    {"--json", NULL, CLI_FLAG, CA(plan.json),
     .help = "print one JSON object instead of the report"},
    {"--search", NULL, CLI_FLAG, CA(plan.search),
     .help = "plan every layout of the model on --world devices and rank those that fit"},
    {"--top", "N", CLI_INT, CA(plan.top), .lo = 1, .hi = 100000,
     .help = "the layouts --search lists"},
    {"--fbw", "F:B:W", CLI_STR, CA(plan.fbw),
     .help = "the forward, input-gradient and weight-gradient time ratios the schedule is "
             "simulated with (e.g. a run's pass_ms)",
     .def = "the device table's"},
    {"--calibrate", NULL, CLI_FLAG, CA(plan.calibrate),
     .help = "measure this machine at CONFIG's shapes (matmuls, attention, elementwise, AdamW, "
             "a layer's F:B:W; system.threads threads) and write a device profile"},
    {"--out", "FILE", CLI_STR, CA(plan.out), .help = "where --calibrate writes the profile",
     .def = "profiles/<device>-<host>.yaml"},
    OPT_SET,
};
static const cli_command PLAN_CLI = {
    .name = "plan",
    .args = "CONFIG",
    .args_help = "the YAML run file (configs/ holds examples); or a run directory (run.out_dir): "
                 "its predicted step beside the measured one, per pipeline stage (with --json "
                 "alone)",
    .min_args = 1,
    .max_args = 1,
    .args_offset = CA(config),
    .summary = "memory, communication, bubble and step time before a run, or against a run's "
               "measured times",
    .options = PLAN_OPTIONS,
    .n_options = CLI_N(PLAN_OPTIONS),
    .defaults = &CONFIG_DEFAULTS,
    .opts_size = sizeof(config_args),
};

typedef struct {
    cli_list source;
    sample_options s;
} sample_args;
#define SA(field) offsetof(sample_args, field)
static const sample_args SAMPLE_DEFAULTS = {.s = {.tokens = 256, .temperature = 0.8, .seed = 1337}};

#define SOURCE_HELP                                                                                \
    "a checkpoint (checkpoint.dir/step_N, or a checkpoint.dir: its newest) of any layout, a "      \
    "run directory (run.out_dir, holding model.bin), an llm.c model file, or a Hugging Face "      \
    "model directory (config.json + model.safetensors, GPT2LMHeadModel or LlamaForCausalLM)"

static const cli_option SAMPLE_OPTIONS[] = {
    {"--prompt", "TEXT", CLI_STR, SA(s.prompt),
     .help = "the text to continue, encoded with the tokenizer",
     .def = "none: the sample starts a new document"},
    {"--tokens", "N", CLI_INT, SA(s.tokens), .lo = 0, .hi = 2147483647,
     .help = "how many tokens to generate"},
    {"--temperature", "T", CLI_NUM, SA(s.temperature), .lo = 0, .hi = INFINITY,
     .help = "softmax temperature; 0 always takes the most likely token"},
    {"--seed", "S", CLI_U64, SA(s.seed),
     .help = "seed of the sampling: the same seed, the same text"},
    {"--threads", "N", CLI_INT, SA(s.threads), .lo = 0, .hi = 4096,
     .help = "compute threads; 0: every core"},
    {"--tokenizer", "FILE", CLI_STR, SA(s.tokenizer),
     .help = "the tokenizer.json that encodes the prompt and decodes the sample",
     .def = "a Hugging Face directory's tokenizer.json, else the run's data.tokenizer; "
            "without one, bytes for a vocabulary of 256, else ids"},
};
static const cli_command SAMPLE_CLI = {
    .name = "sample",
    .args = "SOURCE",
    .args_help = SOURCE_HELP,
    .min_args = 1,
    .max_args = 1,
    .args_offset = SA(source),
    .summary = "generate text from a trained model",
    .options = SAMPLE_OPTIONS,
    .n_options = CLI_N(SAMPLE_OPTIONS),
    .defaults = &SAMPLE_DEFAULTS,
    .opts_size = sizeof(sample_args),
};

typedef struct {
    cli_list source;
    int format; // index in EXPORT_FORMATS
    const char *out;
    uint64_t max_shard_size; // hf: bytes of one safetensors shard
} export_args;
#define EA(field) offsetof(export_args, field)
static const char *const EXPORT_FORMATS[] = {"llmc", "safetensors", "hf", NULL};
static const export_args EXPORT_DEFAULTS = {.max_shard_size = EXPORT_HF_SHARD_BYTES};
static const cli_option EXPORT_OPTIONS[] = {
    {"--format", NULL, CLI_CHOICE, EA(format), .required = 1, .choices = EXPORT_FORMATS,
     .help = "llmc: an llm.c fp32 model file; safetensors: Hugging Face GPT-2 names and "
             "layouts; hf: a Hugging Face model directory (from_pretrained loads it)"},
    {"--out", "FILE", CLI_STR, EA(out), .required = 1,
     .help = "the file to write (hf: the directory)"},
    {"--max-shard-size", "BYTES", CLI_U64, EA(max_shard_size),
     .help = "hf: safetensors shards of at most this many bytes (transformers' default), "
             "with model.safetensors.index.json"},
};
static const cli_command EXPORT_CLI = {
    .name = "export",
    .args = "SOURCE",
    .args_help = SOURCE_HELP,
    .min_args = 1,
    .max_args = 1,
    .args_offset = EA(source),
    .summary = "convert a checkpoint or model into a model file, one tensor at a time",
    .options = EXPORT_OPTIONS,
    .n_options = CLI_N(EXPORT_OPTIONS),
    .defaults = &EXPORT_DEFAULTS,
    .opts_size = sizeof(export_args),
};

// ---------------------------------------------------------------------------------------
// The commands

static int cmd_train(int argc, char **argv) {
    // Before anything that can block (PMIx, MPI): stop signals are honoured from here on, and
    // the start-up watchdog runs with the default deadline until the config gives its own
    // (base/stop.h).
    stop_install_handlers();
    stop_startup_begin(STOP_INIT_TIMEOUT_DEFAULT_S);
    config_args ca;
    char err[512];
    cli_result parsed = cli_parse(&TRAIN_CLI, argc, argv, &ca, err, sizeof err);
    if (parsed == CLI_HELP) { // no launch for the help
        cli_print_help(&TRAIN_CLI, stdout);
        cli_free(&TRAIN_CLI, &ca);
        return 0;
    }
    launch_info li;
    int rc = launch_init(&li);
    if (rc) {
        cli_free(&TRAIN_CLI, &ca);
        return rc;
    }
    log_set_rank(li.rank, 0, 0, 0); // the mesh coordinates follow once the config is resolved
    stop_phase("config");
    int mute = log_mute_if_not_rank0(); // every rank reaches the same verdict; rank 0 says it
    if (parsed == CLI_USAGE_ERROR) rc = cli_report(&TRAIN_CLI, err);
    run_config cfg;
    config_defaults(&cfg);
    if (!rc) rc = hf_config_load(&cfg, ca.config.items[0], ca.sets.n, (char **)ca.sets.items);
    log_unmute(mute);
    if (!rc) stop_startup_set_timeout(cfg.system.init_timeout_s);
    if (!rc) rc = train_run(&cfg, &li);
    config_free(&cfg);
    cli_free(&TRAIN_CLI, &ca);
    launch_finalize(&li);
    return rc;
}

static int cmd_check(int argc, char **argv) {
    config_args ca;
    int rc = cli_parse_command(&CHECK_CLI, argc, argv, &ca);
    if (rc >= 0) return cli_free(&CHECK_CLI, &ca), rc;
    const int world = ca.world ? ca.world : 1;
    run_config cfg;
    config_defaults(&cfg);
    rc = hf_config_load(&cfg, ca.config.items[0], ca.sets.n, (char **)ca.sets.items);
    if (!rc) rc = config_resolve_world(&cfg, world);
    if (!rc && cfg.system.device_profile) { // a profile that does not load: the config's error
        plan_device profile;
        rc = plan_profile_of_config(&cfg, world, &profile);
    }
    if (!rc) {
        printf("# %s: valid for a world of %d\n", ca.config.items[0], world);
        config_print_yaml(&cfg, stdout, 0);
        printf("# micro-batches per step per replica: %d; padded vocabulary: %d\n",
               config_micro_batches(&cfg), config_padded_vocab(&cfg));
        const mesh m = config_mesh(&cfg);
        mesh_print(&m, cfg.model.n_layer, cfg.parallel.virtual_stages,
                   cfg.parallel.schedule == SCHEDULE_ZBV, stdout);
    }
    config_free(&cfg);
    cli_free(&CHECK_CLI, &ca);
    return rc;
}

static int cmd_plan(int argc, char **argv) {
    config_args ca;
    int rc = cli_parse_command(&PLAN_CLI, argc, argv, &ca);
    if (rc >= 0) return cli_free(&PLAN_CLI, &ca), rc;
    ca.plan.world_given = ca.world > 0;
    struct stat st;
    if (stat(ca.config.items[0], &st) == 0 && S_ISDIR(st.st_mode)) { // a run directory
        if (ca.sets.n) {
            LOG_ERROR("trident plan %s: --set changes a config; a run directory's is in its run "
                      "record",
                      ca.config.items[0]);
            LOG_HINT("give the run's config file with --set to plan a changed layout");
            rc = TRI_ERR_CONFIG;
        } else {
            rc = plan_rundir_run(ca.config.items[0], &ca.plan);
        }
        cli_free(&PLAN_CLI, &ca);
        return rc;
    }
    run_config cfg;
    config_defaults(&cfg);
    rc = hf_config_load(&cfg, ca.config.items[0], ca.sets.n, (char **)ca.sets.items);
    if (!rc) rc = plan_run(&cfg, ca.world, &ca.plan);
    config_free(&cfg);
    cli_free(&PLAN_CLI, &ca);
    return rc;
}

static int cmd_sample(int argc, char **argv) {
    sample_args sa;
    int rc = cli_parse_command(&SAMPLE_CLI, argc, argv, &sa);
    if (rc < 0) {
        sa.s.run_or_file = sa.source.items[0];
        rc = sample_run(&sa.s);
    }
    cli_free(&SAMPLE_CLI, &sa);
    return rc;
}

static int cmd_export(int argc, char **argv) {
    export_args ea;
    int rc = cli_parse_command(&EXPORT_CLI, argc, argv, &ea);
    if (rc < 0)
        rc = export_run(ea.source.items[0], EXPORT_FORMATS[ea.format], ea.out, ea.max_shard_size);
    cli_free(&EXPORT_CLI, &ea);
    return rc;
}

// Every subcommand, in the order `trident --help` lists them.
const cli_entry CLI_COMMANDS[] = {
    {&TRAIN_CLI, cmd_train},        {&CHECK_CLI, cmd_check},        {&PLAN_CLI, cmd_plan},
    {&SAMPLE_CLI, cmd_sample},      {&EXPORT_CLI, cmd_export},      {&TOKENIZE_CLI, tokenize_main},
    {&COMMTEST_CLI, commtest_main}, {&DIAGNOSE_CLI, diagnose_main},
};
const int CLI_N_COMMANDS = CLI_N(CLI_COMMANDS);
enum { N_COMMANDS = CLI_N(CLI_COMMANDS) };

// Other names people type for a subcommand; "did you mean" offers the subcommand.
static const struct {
    const char *alias, *command;
} COMMAND_ALIASES[] = {
    {"run", "train"},         {"fit", "train"},       {"generate", "sample"},
    {"infer", "sample"},      {"convert", "export"},  {"validate", "check"},
    {"tokenise", "tokenize"}, {"encode", "tokenize"}, {"commtest", "comm-test"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: trident COMMAND ARGUMENTS [OPTIONS]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) {
        cli_print_synopsis(CLI_COMMANDS[i].cli, "  ", f);
        fprintf(f, "      %s\n", CLI_COMMANDS[i].cli->summary);
    }
    fprintf(f,
            "  trident --help | --version\n"
            "\n"
            "`trident COMMAND --help` lists a command's arguments and options, with their\n"
            "meaning and default.\n"
            "SOURCE is a checkpoint (checkpoint.dir/step_N, or a checkpoint.dir: its newest) of\n"
            "any layout, a run directory (run.out_dir, holding model.bin) or an llm.c model file.\n"
            "Exit codes: 0 ok (also stopped by a signal), 1 internal, 2 usage/config, 3 data,\n"
            "4 checkpoint/model/output file, 5 communication or timeout, 6 non-finite loss or\n"
            "gradients. SIGTERM, SIGUSR1 or a first SIGINT: checkpoint and exit 0 (a second\n"
            "SIGINT: at once).\n"
            "Environment: TRIDENT_LOG=debug|info|warn sets the log level.\n");
}

// "unknown command trian; did you mean train?"
static int unknown_command(const char *name) {
    const char *names[N_COMMANDS + 1], *s = NULL;
    for (int i = 0; i < N_COMMANDS; i++) names[i] = CLI_COMMANDS[i].cli->name;
    names[N_COMMANDS] = NULL;
    for (size_t a = 0; a < sizeof COMMAND_ALIASES / sizeof COMMAND_ALIASES[0] && !s; a++)
        if (!strcasecmp(name, COMMAND_ALIASES[a].alias)) s = COMMAND_ALIASES[a].command;
    if (!s) s = suggest_closest(name, names);
    if (s) LOG_ERROR("trident: unknown command %s; did you mean %s?", name, s);
    else LOG_ERROR("trident: unknown command %s", name);
    char list[256];
    size_t used = 0;
    for (int i = 0; i < N_COMMANDS; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                 i == 0                ? ""
                                 : i == N_COMMANDS - 1 ? " and "
                                                       : ", ",
                                 names[i]);
    LOG_HINT("the commands are %s; `trident --help` shows each with its arguments", list);
    return TRI_ERR_CONFIG;
}

// Runs subcommand `cmd` on its arguments, or says that there is no such command.
static int dispatch(const char *cmd, int argc, char **argv) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(cmd, CLI_COMMANDS[i].cli->name)) return CLI_COMMANDS[i].run(argc, argv);
    if (cmd[0] == '-') {
        LOG_ERROR("trident: unknown option %s before the command", cmd);
        LOG_HINT("`trident --help` lists the commands; options go after the command");
        return TRI_ERR_CONFIG;
    }
    return unknown_command(cmd);
}

int main(int argc, char **argv) {
    // train and sample compute on OpenMP threads, which then sleep when idle (the restart is
    // worth its ~0.1 s there), and plan --calibrate measures the ops as train runs them (a
    // parallel region that wakes a sleeping thread: +25% on a 2-thread step of
    // configs/bench-pipe.yaml here); the other commands keep OpenMP's default.
    int computes = argc > 1 && (!strcmp(argv[1], "train") || !strcmp(argv[1], "sample"));
    for (int i = 2; argc > 1 && !strcmp(argv[1], "plan") && i < argc; i++)
        computes |= !strcmp(argv[i], "--calibrate");
    backend_cpu_prepare_process(argv, computes);
    log_init();
    if (argc < 2) {
        usage(stderr);
        return TRI_ERR_CONFIG;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        if (argc > 2) { // `trident help COMMAND` is `trident COMMAND --help`
            char help[] = "--help", *args[] = {help, NULL};
            return dispatch(argv[2], 1, args);
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("%s\n", TRIDENT_VERSION_STRING);
        return 0;
    }
    return dispatch(cmd, argc - 2, argv + 2);
}

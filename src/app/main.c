// main.c: the trident command line (DESIGN.md "CLI"). Parses arguments, dispatches to a
// module, and turns its status into the documented exit code.
#include <errno.h>
#include <string.h>

#include "base/stop.h"
#include "compute/backend.h"
#include "app/commtest.h"
#include "config/config.h"
#include "config/config_layout.h"
#include "io/export.h"
#include "comm/launch.h"
#include "comm/mesh.h"
#include "io/metrics.h"
#include "plan/plan.h"
#include "app/sample.h"
#include "app/tokenize.h"
#include "app/train.h"

#define TRIDENT_VERSION_STRING "trident 0.1.0"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage:\n"
        "  trident train CONFIG [--set key=value]...     train (see checkpoint.resume)\n"
        "  trident check CONFIG [--world N] [--set ...]  validate, print the resolved config and mesh\n"
        "  trident plan CONFIG [--world N] [--device NAME] [--set ...] [--json] [--search [--top N]]\n"
        "                                                memory, communication, bubble, step time\n"
        "  trident sample SOURCE [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]\n"
        "                 [--threads N] [--tokenizer tokenizer.json]\n"
        "  trident export SOURCE --format llmc|safetensors --out FILE\n"
        "  trident tokenize --tokenizer tokenizer.json --out PREFIX [--val-fraction F]\n"
        "                   [--shard-tokens N] [--threads N] [--eot TOKEN] INPUT...\n"
        "                                                text or JSON lines into token shards\n"
        "  trident comm-test [--world-shape tp,pp,dp] [--bytes MIN:MAX] [--iters N] [--timeout S]\n"
        "                                                every collective on every group, checked\n"
        "  trident --help | --version\n"
        "\n"
        "SOURCE is a checkpoint (checkpoint.dir/step_N, or a checkpoint.dir: its newest) of any\n"
        "layout, a run directory (run.out_dir, holding model.bin) or an llm.c model file.\n"
        "Exit codes: 0 ok (also stopped by a signal), 1 internal, 2 usage/config, 3 data,\n"
        "4 checkpoint/model/output file, 5 communication or timeout, 6 non-finite loss or\n"
        "gradients. SIGTERM, SIGUSR1 or a first SIGINT: checkpoint and exit 0 (a second\n"
        "SIGINT: at once).\n"
        "Environment: TRIDENT_LOG=debug|info|warn sets the log level.\n");
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "trident: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage(stderr);
    return TRI_ERR_CONFIG;
}

// Parses an integer or float option value; returns 0 on success.
static int parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    *out = strtol(s, &end, 10);
    return errno || end == s || *end;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno || end == s || *end;
}

typedef struct {
    const char *config;
    char **sets;
    int n_sets;
    int world;
} config_args;

// CONFIG [--set k=v]... [--world N]: the arguments of train and check.
static int parse_config_args(int argc, char **argv, config_args *ca, int allow_world) {
    ca->sets = calloc((size_t)argc, sizeof(char *));
    ca->world = 1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--set") || !strncmp(argv[i], "--set=", 6)) {
            const char *v = argv[i][5] == '=' ? argv[i] + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v || !strchr(v, '=')) return usage_error("--set needs key.path=value", "");
            ca->sets[ca->n_sets++] = (char *)v;
        } else if (allow_world && !strcmp(argv[i], "--world")) {
            long w;
            if (i + 1 >= argc || parse_long(argv[++i], &w) || w < 1 || w > PLAN_MAX_WORLD)
                return usage_error("--world needs a positive integer", "");
            ca->world = (int)w;
        } else if (argv[i][0] == '-') {
            return usage_error("unknown option %s", argv[i]);
        } else if (!ca->config) {
            ca->config = argv[i];
        } else {
            return usage_error("unexpected argument %s", argv[i]);
        }
    }
    if (!ca->config) return usage_error("missing CONFIG (a YAML run file)%s", "");
    return 0;
}

static int cmd_train(int argc, char **argv) {
    // Before anything that can block (PMIx, MPI): stop signals are honoured from here on, and
    // the start-up watchdog runs with the default deadline until the config gives its own
    // (base/stop.h).
    stop_install_handlers();
    stop_startup_begin(STOP_INIT_TIMEOUT_DEFAULT_S);
    config_args ca = {0};
    launch_info li;
    int rc = launch_init(&li);
    if (rc) return rc;
    log_set_rank(li.rank, 0, 0, 0); // the mesh coordinates follow once the config is resolved
    stop_phase("config");
    int mute = log_mute_if_not_rank0();
    rc = parse_config_args(argc, argv, &ca, 0);
    run_config cfg;
    config_defaults(&cfg);
    if (!rc) rc = config_load(&cfg, ca.config, ca.n_sets, ca.sets);
    log_unmute(mute);
    if (!rc) stop_startup_set_timeout(cfg.system.init_timeout_s);
    if (!rc) rc = train_run(&cfg, &li);
    config_free(&cfg);
    free(ca.sets);
    launch_finalize(&li);
    return rc;
}

static int cmd_check(int argc, char **argv) {
    config_args ca = {0};
    int rc = parse_config_args(argc, argv, &ca, 1);
    run_config cfg;
    config_defaults(&cfg);
    if (!rc) rc = config_load(&cfg, ca.config, ca.n_sets, ca.sets);
    if (!rc) rc = config_resolve_world(&cfg, ca.world);
    if (!rc) {
        printf("# %s: valid for a world of %d\n", ca.config, ca.world);
        config_print_yaml(&cfg, stdout, 0);
        printf("# micro-batches per step per replica: %d; padded vocabulary: %d\n",
               config_micro_batches(&cfg), config_padded_vocab(&cfg));
        const mesh m = config_mesh(&cfg);
        mesh_print(&m, cfg.model.n_layer, cfg.parallel.virtual_stages, stdout);
    }
    config_free(&cfg);
    free(ca.sets);
    return rc;
}

// CONFIG [--world N] [--set ...] as for check, plus the planner's own options.
static int cmd_plan(int argc, char **argv) {
    plan_options po;
    config_args ca = {0};
    int rc = plan_parse_options(&argc, argv, &po);
    if (!rc) rc = parse_config_args(argc, argv, &ca, 1);
    run_config cfg;
    config_defaults(&cfg);
    if (!rc) rc = config_load(&cfg, ca.config, ca.n_sets, ca.sets);
    if (!rc) rc = plan_run(&cfg, ca.world, &po);
    config_free(&cfg);
    free(ca.sets);
    return rc;
}

static int cmd_sample(int argc, char **argv) {
    sample_options opt = {.tokens = 256, .temperature = 0.8, .seed = 1337};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        long l;
        double d;
        if (!strcmp(a, "--prompt") && has_value) {
            opt.prompt = argv[++i];
        } else if (!strcmp(a, "--tokenizer") && has_value) {
            opt.tokenizer = argv[++i];
        } else if (!strcmp(a, "--tokens") && has_value) {
            if (parse_long(argv[++i], &l) || l < 0)
                return usage_error("--tokens needs a count >= 0, got %s", argv[i]);
            opt.tokens = (int)l;
        } else if (!strcmp(a, "--temperature") && has_value) {
            if (parse_double(argv[++i], &d) || d < 0)
                return usage_error("--temperature needs a number >= 0, got %s", argv[i]);
            opt.temperature = d;
        } else if (!strcmp(a, "--seed") && has_value) {
            if (parse_long(argv[++i], &l))
                return usage_error("--seed needs an integer, got %s", argv[i]);
            opt.seed = (uint64_t)l;
        } else if (!strcmp(a, "--threads") && has_value) {
            if (parse_long(argv[++i], &l) || l < 0)
                return usage_error("--threads needs a count >= 0, got %s", argv[i]);
            opt.threads = (int)l;
        } else if (a[0] == '-') {
            return usage_error("unknown option (or missing value) %s", a);
        } else if (!opt.run_or_file) {
            opt.run_or_file = a;
        } else {
            return usage_error("unexpected argument %s", a);
        }
    }
    if (!opt.run_or_file) return usage_error("sample needs a run directory or model file%s", "");
    return sample_run(&opt);
}

static int cmd_export(int argc, char **argv) {
    const char *src = NULL, *format = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (argv[i][0] == '-')
            return usage_error("unknown option (or missing value) %s", argv[i]);
        else if (!src) src = argv[i];
        else return usage_error("unexpected argument %s", argv[i]);
    }
    if (!src || !format || !out)
        return usage_error("export needs SOURCE, --format and --out%s", "");
    if (strcmp(format, "llmc") && strcmp(format, "safetensors"))
        return usage_error("--format must be llmc or safetensors, got %s", format);
    return export_run(src, format, out);
}

int main(int argc, char **argv) {
    // train and sample compute on OpenMP threads, which then sleep when idle (the restart is
    // worth its ~0.1 s there); the other commands keep OpenMP's default.
    const int computes = argc > 1 && (!strcmp(argv[1], "train") || !strcmp(argv[1], "sample"));
    backend_cpu_prepare_process(argv, computes);
    log_init();
    if (argc < 2) {
        usage(stderr);
        return TRI_ERR_CONFIG;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("%s\n", TRIDENT_VERSION_STRING);
        return 0;
    }
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "check")) return cmd_check(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "sample")) return cmd_sample(argc - 2, argv + 2);
    if (!strcmp(cmd, "export")) return cmd_export(argc - 2, argv + 2);
    if (!strcmp(cmd, "comm-test")) return commtest_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return tokenize_main(argc - 2, argv + 2);
    return usage_error("unknown command %s", cmd);
}

// fuzz_cli: the seeded fuzzer of the command line: every subcommand's table (src/app/cli.h)
// and its parser, and `trident CMD ARGS...` end to end. This binary links src/app/main.c as
// trident_main (Makefile), so it reads the very tables the trident binary parses with.
//
//   fuzz_cli [--cases N] [--seed S] [--cli-every K] [--bound S]
//
// Each case is an argument list built from one command's table, with the verdict it must
// get known in advance (the oracle is the table: names, value kinds, ranges, choices,
// required options, how many arguments):
//   unknown_option  a valid list with an option that is not in the table (a near miss of a
//                   real one, another word, a single dash): a usage error naming it
//   missing_value   an option that takes a value, last, without one: "NAME needs a value"
//   bad_value       a number that is not one or is out of range, a choice not offered, a
//                   TP,PP,DP or MIN:MAX that does not parse: a usage error naming the option
//   extra_argument  one positional argument more than the command takes
//   help            a valid list with -h or --help among it: the help
//   valid           required and random other options with valid values, in any order, some
//                   as --name=value, arguments after `--` at times: parsed, and each field
//                   holds the last value given
//   random          words, option names, mutations, '=', '--', empty and 4 KiB strings, bytes
//                   1-255: any verdict, but never a signal, a hang or an error without text
// Each case runs in a forked child (a signal or a hang is that case's, not the fuzzer's);
// every K-th case (--cli-every, default 10) also runs as `trident CMD ARGS` (trident_main in
// a child), and its exit code must be the documented one: 2 for a usage error with the
// command and `--help` named, 0 and the usage for the help; a valid list names files that do
// not exist, so check, plan, train and tokenize exit 2 and sample and export 4 (train and
// comm-test are not run past their parser: they would launch). Prints per family the cases,
// clean verdicts, crashes, hangs, wrong successes (an error parsed as valid) and other wrong
// verdicts, and a PASS or FAIL line; a failing case prints its seed and number.
#include "app/cli.h"
#include "base/common.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int trident_main(int argc, char **argv);

enum { F_UNKNOWN, F_MISSING, F_BAD, F_EXTRA, F_HELP, F_VALID, F_RANDOM, F_COUNT };
static const char *const FAMILY[F_COUNT] = {
    "unknown_option", "missing_value", "bad_value", "extra_argument", "help", "valid", "random"};
// What a case must get.
enum { V_ERROR, V_HELP, V_PARSED, V_ANY };
// A child's exit status: 0 as expected, else one of these.
enum {
    CASE_OK = 0,
    CASE_WRONG_SUCCESS = 10,
    CASE_WRONG = 11,
    CASE_NO_NAME = 12,
    CASE_WRONG_VALUE = 13
};

static uint64_t g_rng;
static uint64_t rnd(void) { // splitmix64
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rnd_below(int n) { return n > 0 ? (int)(rnd() % (uint64_t)n) : 0; }
static int coin(double p) { return (double)(rnd() >> 11) / 9007199254740992.0 < p; }

// ---- a case: an argument list and what it must get ----

typedef struct {
    const cli_command *cmd;
    char *argv[96];
    int argc;
    int verdict;    // V_*
    char name[160]; // the option or word the message must name ("" for none)
} fuzz_case;

static void push(fuzz_case *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void push(fuzz_case *c, const char *fmt, ...) {
    if (c->argc >= 94) return;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&c->argv[c->argc], fmt, ap) < 0) abort();
    va_end(ap);
    c->argc++;
}
static void insert_at(fuzz_case *c, int at, char *s) {
    if (c->argc >= 94) return free(s);
    memmove(&c->argv[at + 1], &c->argv[at], (size_t)(c->argc - at) * sizeof(char *));
    c->argv[at] = s;
    c->argc++;
}
static void case_free(fuzz_case *c) {
    for (int i = 0; i < c->argc; i++) free(c->argv[i]);
    c->argc = 0;
}

// A valid value of option o, as text.
static void valid_value(const cli_option *o, char *buf, size_t n) {
    switch (o->kind) {
    case CLI_STR: // paths that do not exist: a valid list ends in an error naming one
        snprintf(buf, n, "/nonexistent/fuzz-cli/%s",
                 (const char *[]){"s", "a b", "h100"}[rnd_below(3)]);
        break;
    case CLI_LIST: snprintf(buf, n, "%s", coin(0.5) ? "model.n_layer=2" : "a.b=c"); break;
    case CLI_INT:
    case CLI_I64: {
        double span = fmin(o->hi - o->lo, 1000.0);
        long long v = (long long)o->lo +
                      (coin(0.2) ? 0 : (long long)(rnd() % (uint64_t)(span + 1)));
        snprintf(buf, n, "%lld", v);
        break;
    }
    case CLI_U64: snprintf(buf, n, "%llu", (unsigned long long)(rnd() >> 1)); break;
    case CLI_NUM: {
        double top = isinf(o->hi) ? o->lo + 100 : o->hi;
        double v = o->lo +
                   (top - o->lo) * (0.01 + 0.98 * (double)(rnd() >> 11) / 9007199254740992.0);
        snprintf(buf, n, "%.6g", v);
        break;
    }
    case CLI_CHOICE: {
        int k = 0;
        while (o->choices[k]) k++;
        snprintf(buf, n, "%s", o->choices[rnd_below(k)]);
        break;
    }
    case CLI_CUSTOM: // the custom values trident has; a new one must be added here
        if (!strcmp(o->name, "--world-shape"))
            snprintf(buf, n, "%s", (const char *[]){"1,1,1", "2,1,2", "4,2,1"}[rnd_below(3)]);
        else if (!strcmp(o->name, "--bytes"))
            snprintf(buf, n, "%s", (const char *[]){"8:1K", "4:4", "16:64K", "1M"}[rnd_below(4)]);
        else {
            fprintf(stderr, "fuzz_cli: no valid value known for %s: add one\n", o->name);
            exit(2);
        }
        break;
    case CLI_FLAG: buf[0] = '\0'; break;
    }
}

// A value option o must refuse: text that is not a number, out of range, not a choice.
static int bad_value(const cli_option *o, char *buf, size_t n) {
    switch (o->kind) {
    case CLI_INT:
    case CLI_I64: {
        const double top = o->kind == CLI_INT ? 2147483647.0 : 9.2e18;
        int k = rnd_below(7);
        if (k == 0 && o->hi < top) snprintf(buf, n, "%.0f", o->hi + 1);
        else if (k == 1 && o->lo > -top) snprintf(buf, n, "%.0f", o->lo - 1);
        else
            snprintf(buf, n, "%s",
                     (const char *[]){"abc", "", "1.5", "0x10", "99999999999999999999", "7 ",
                                      "--"}[rnd_below(7)]);
        return 1;
    }
    case CLI_U64:
        snprintf(
            buf, n, "%s",
            (const char *[]){"-1", "+1", "x", "", "18446744073709551616", "1e3"}[rnd_below(6)]);
        return 1;
    case CLI_NUM: {
        int k = rnd_below(6);
        if (k == 0) snprintf(buf, n, "%.17g", o->lo_open ? o->lo : o->lo - 1);
        else if (k == 1 && !isinf(o->hi)) snprintf(buf, n, "%.17g", o->hi_open ? o->hi : o->hi + 1);
        else
            snprintf(buf, n, "%s",
                     (const char *[]){"nan", "inf", "1e400", "abc", "", "1,5"}[rnd_below(6)]);
        return 1;
    }
    case CLI_CHOICE:
        snprintf(buf, n, "%s", (const char *[]){"x", "", "LLMC", "auto ", "gpu0"}[rnd_below(5)]);
        return 1;
    case CLI_CUSTOM:
        if (!strcmp(o->name, "--world-shape"))
            snprintf(
                buf, n, "%s",
                (const char *[]){"1,2", "0,1,1", "a,b,c", "1,1,1,1", "-1,1,1", ""}[rnd_below(6)]);
        else
            snprintf(buf, n, "%s",
                     (const char *[]){"3:8", "8:4", "1G:8G", "abc", "", "8:"}[rnd_below(6)]);
        return 1;
    default: return 0; // any string is a valid STR or LIST value
    }
}

// An option name not in the table: a near miss of a real one or another word.
static void unknown_name(const cli_command *cmd, char *buf, size_t n) {
    for (;;) {
        const cli_option *o = &cmd->options[rnd_below(cmd->n_options)];
        int k = rnd_below(4);
        size_t len = strlen(o->name);
        if (k == 0) snprintf(buf, n, "%s", o->name), buf[2 + rnd_below((int)len - 2)] = 'q';
        else if (k == 1) snprintf(buf, n, "%sx", o->name);
        else if (k == 2) snprintf(buf, n, "-%c", "xyzQ"[rnd_below(4)]);
        else
            snprintf(
                buf, n, "--%s",
                (const char *[]){"frobnicate", "verbose", "dry-run", "gpu", "h"}[rnd_below(5)]);
        int known = !strcmp(buf, "-h") || !strcmp(buf, "--help");
        for (int i = 0; i < cmd->n_options; i++) known |= !strcmp(buf, cmd->options[i].name);
        if (!known) return;
    }
}

// Valid units (an option with its value, or an argument), shuffled, into c.
static void valid_list(fuzz_case *c, int n_case) {
    const cli_command *cmd = c->cmd;
    char *units[64][2];
    int n = 0;
    char v[128];
    for (int k = 0; k < cmd->n_options && n < 40; k++) {
        const cli_option *o = &cmd->options[k];
        int times = o->required ? 1 + coin(0.2) : coin(0.4) + coin(0.1);
        for (int t = 0; t < times; t++) {
            valid_value(o, v, sizeof v);
            units[n][1] = NULL;
            if (o->kind == CLI_FLAG) units[n][0] = strdup(o->name);
            else if (coin(0.3)) {
                if (asprintf(&units[n][0], "%s=%s", o->name, v) < 0) abort();
            } else units[n][0] = strdup(o->name), units[n][1] = strdup(v);
            n++;
        }
    }
    int n_args = 0;
    if (cmd->args)
        n_args = cmd->min_args +
                 (cmd->max_args < 0 ? rnd_below(3) : rnd_below(cmd->max_args - cmd->min_args + 1));
    int dashdash = n_args > 0 && coin(0.15);
    for (int a = 0; a < n_args && !dashdash; a++) {
        if (asprintf(&units[n][0], "/nonexistent/fuzz-cli/%d-%d", n_case, a) < 0) abort();
        units[n++][1] = NULL;
    }
    for (int i = n - 1; i > 0; i--) { // shuffle
        int j = rnd_below(i + 1);
        char *t0 = units[i][0], *t1 = units[i][1];
        units[i][0] = units[j][0], units[i][1] = units[j][1];
        units[j][0] = t0, units[j][1] = t1;
    }
    for (int i = 0; i < n; i++) {
        c->argv[c->argc++] = units[i][0];
        if (units[i][1]) c->argv[c->argc++] = units[i][1];
    }
    if (dashdash) {
        push(c, "--");
        for (int a = 0; a < n_args; a++) push(c, "/nonexistent/fuzz-cli/%d-%d", n_case, a);
    }
}

// A position between units of c (never between an option and its value).
static int unit_boundary(const fuzz_case *c) {
    int at[96], n = 0;
    for (int i = 0; i <= c->argc; i++) {
        at[n++] = i;
        if (i < c->argc && !strcmp(c->argv[i], "--")) break; // after it, all are arguments
        if (i < c->argc && c->argv[i][0] == '-' && !strchr(c->argv[i], '=')) {
            for (int k = 0; k < c->cmd->n_options; k++)
                if (!strcmp(c->cmd->options[k].name, c->argv[i]) &&
                    c->cmd->options[k].kind != CLI_FLAG)
                    i++; // skip its value
        }
    }
    return at[rnd_below(n)];
}

static int make_case(fuzz_case *c, int family, int n_case) {
    c->cmd = CLI_COMMANDS[rnd_below(CLI_N_COMMANDS)].cli;
    c->argc = 0;
    c->name[0] = '\0';
    const cli_command *cmd = c->cmd;
    char v[4200];
    // A command without options (diagnose) has none to misspell, starve or misfeed.
    if (cmd->n_options == 0 && family != F_EXTRA && family != F_HELP && family != F_VALID) return 0;
    switch (family) {
    case F_UNKNOWN:
        valid_list(c, n_case);
        unknown_name(cmd, v, sizeof v);
        snprintf(c->name, sizeof c->name, "%s", v);
        if (coin(0.3) && v[1] == '-') strcat(v, "=1");
        insert_at(c, unit_boundary(c), strdup(v));
        c->verdict = V_ERROR;
        return 1;
    case F_MISSING: {
        const cli_option *o = &cmd->options[rnd_below(cmd->n_options)];
        if (o->kind == CLI_FLAG) return 0;
        valid_list(c, n_case);
        if (c->argc && !strcmp(c->argv[c->argc - 1], "--")) return case_free(c), 0;
        for (int i = 0; i < c->argc; i++)
            if (!strcmp(c->argv[i], "--")) return case_free(c), 0; // arguments after --
        push(c, "%s", o->name);
        snprintf(c->name, sizeof c->name, "%s needs a value", o->name);
        c->verdict = V_ERROR;
        return 1;
    }
    case F_BAD: {
        const cli_option *o = &cmd->options[rnd_below(cmd->n_options)];
        if (!bad_value(o, v, sizeof v)) return 0;
        valid_list(c, n_case);
        int at = unit_boundary(c);
        if (coin(0.3)) {
            char *s;
            if (asprintf(&s, "%s=%s", o->name, v) < 0) abort();
            insert_at(c, at, s);
        } else {
            insert_at(c, at, strdup(v));
            insert_at(c, at, strdup(o->name));
        }
        snprintf(c->name, sizeof c->name, "%s needs", o->name);
        c->verdict = V_ERROR;
        return 1;
    }
    case F_EXTRA:
        if (cmd->args && cmd->max_args < 0) return 0;
        valid_list(c, n_case);
        for (int i = 0; i < c->argc; i++)
            if (!strcmp(c->argv[i], "--")) return case_free(c), 0;
        // fill the arguments up to the maximum, then one more
        for (int a = 0; a <= (cmd->args ? cmd->max_args : 0); a++)
            insert_at(c, unit_boundary(c), strdup("/nonexistent/fuzz-cli/extra"));
        snprintf(c->name, sizeof c->name, cmd->args ? "unexpected argument" : "takes no arguments");
        c->verdict = V_ERROR;
        return 1;
    case F_HELP:
        valid_list(c, n_case);
        insert_at(c, unit_boundary(c), strdup(coin(0.5) ? "--help" : "-h"));
        c->verdict = V_HELP;
        return 1;
    case F_VALID:
        valid_list(c, n_case);
        c->verdict = V_PARSED;
        return 1;
    case F_RANDOM: {
        int n = 1 + rnd_below(8);
        for (int i = 0; i < n; i++) {
            int k = rnd_below(9);
            const cli_option *o = &cmd->options[rnd_below(cmd->n_options)];
            if (k == 0) push(c, "%s", o->name);
            else if (k == 1) push(c, "%s=", o->name);
            else if (k == 2)
                push(c, "%s",
                     (const char *[]){"--", "-", "=", "", "--=", "-h=", "---x"}[rnd_below(7)]);
            else if (k == 3) {
                memset(v, 'a' + rnd_below(26), 4096), v[4096] = '\0';
                if (coin(0.5)) v[0] = v[1] = '-';
                push(c, "%s", v);
            } else if (k == 4) {
                int len = 1 + rnd_below(24);
                for (int j = 0; j < len; j++) v[j] = (char)(1 + rnd_below(255));
                v[len] = '\0';
                push(c, "%s", v);
            } else if (k == 5)
                push(c, "%lld", (long long)(rnd() >> rnd_below(64)) * (coin(0.5) ? -1 : 1));
            else {
                valid_value(o, v, 200);
                push(c, "%s", v);
            }
        }
        c->verdict = V_ANY;
        return 1;
    }
    }
    return 0;
}

// ---- the checks, in a child ----

// The last value each option was given, as the parser must have kept it.
static int check_values(const fuzz_case *c, const void *opts) {
    const cli_command *cmd = c->cmd;
    int only_args = 0;
    for (int i = 0; i < c->argc; i++) {
        const char *a = c->argv[i], *eq = strchr(a, '=');
        if (only_args || a[0] != '-') continue;
        if (!strcmp(a, "--")) {
            only_args = 1;
            continue;
        }
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_option *o = NULL;
        for (int k = 0; k < cmd->n_options; k++)
            if (strlen(cmd->options[k].name) == len && !strncmp(cmd->options[k].name, a, len))
                o = &cmd->options[k];
        if (!o) return 0;
        if (o->kind == CLI_FLAG) continue;
        const char *v = eq ? eq + 1 : c->argv[++i];
        int later = 0; // another use of the same option follows: it wins
        for (int j = i + 1; j < c->argc; j++)
            later |= !strncmp(c->argv[j], o->name, strlen(o->name)) &&
                     (c->argv[j][strlen(o->name)] == '\0' || c->argv[j][strlen(o->name)] == '=');
        if (later && o->kind != CLI_LIST) continue;
        const char *f = (const char *)opts + o->offset;
        switch (o->kind) {
        case CLI_STR:
            if (strcmp(*(const char *const *)f, v)) return 0;
            break;
        case CLI_INT:
            if (*(const int *)f != atoi(v)) return 0;
            break;
        case CLI_I64:
            if (*(const int64_t *)f != strtoll(v, NULL, 10)) return 0;
            break;
        case CLI_U64:
            if (*(const uint64_t *)f != strtoull(v, NULL, 10)) return 0;
            break;
        case CLI_NUM:
            if (*(const double *)f != strtod(v, NULL)) return 0;
            break;
        case CLI_CHOICE:
            if (strcmp(o->choices[*(const int *)f], v)) return 0;
            break;
        default: break;
        }
    }
    return 1;
}

static int check_parse(const fuzz_case *c) {
    void *opts = xcalloc(1, c->cmd->opts_size);
    char err[512];
    memset(err, 'X', sizeof err);
    cli_result r = cli_parse(c->cmd, c->argc, (char **)c->argv, opts, err, sizeof err);
    int rc = CASE_OK;
    if (r == CLI_USAGE_ERROR && (!memchr(err, '\0', sizeof err) || !err[0])) rc = CASE_NO_NAME;
    else if (c->verdict == V_ERROR && r != CLI_USAGE_ERROR)
        rc = r == CLI_PARSED ? CASE_WRONG_SUCCESS : CASE_WRONG;
    else if (c->verdict == V_ERROR && !strstr(err, c->name)) rc = CASE_NO_NAME;
    else if (c->verdict == V_HELP && r != CLI_HELP) rc = CASE_WRONG;
    else if (c->verdict == V_PARSED && r != CLI_PARSED) rc = CASE_WRONG;
    else if (c->verdict == V_PARSED && !check_values(c, opts)) rc = CASE_WRONG_VALUE;
    if (rc != CASE_OK && r == CLI_USAGE_ERROR) fprintf(stderr, "  parser: %s\n", err);
    cli_free(c->cmd, opts);
    free(opts);
    return rc;
}

// ---- running a case ----

typedef struct {
    int cases, clean, crashes, hangs, wrong_successes, wrong, cli;
} family_stats;

static double g_bound = 10.0;
static const char *g_work;

// Runs fn(c) in a child; returns its exit status, or -signal, or -1000 on a hang.
static int in_child(int (*fn)(const fuzz_case *), const fuzz_case *c, double *ms) {
    fflush(stdout);
    fflush(stderr);
    double t0 = time_now_s();
    pid_t pid = fork();
    if (pid == 0) {
        alarm((unsigned)g_bound + 1);
        _exit(fn(c));
    }
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (time_now_s() - t0 > g_bound) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            *ms = 1000 * (time_now_s() - t0);
            return -1000;
        }
        usleep(200);
    }
    *ms = 1000 * (time_now_s() - t0);
    if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGALRM ? -1000 : -WTERMSIG(status);
    return WEXITSTATUS(status);
}

// `trident CMD ARGS...` through trident_main, stdout and stderr into the case's file.
static int run_trident(const fuzz_case *c) {
    char path[512];
    snprintf(path, sizeof path, "%s/out", g_work);
    if (!freopen(path, "w", stdout) || dup2(fileno(stdout), 2) < 0) return 99;
    char *argv[100] = {"trident", (char *)c->cmd->name};
    for (int i = 0; i < c->argc; i++) argv[2 + i] = c->argv[i];
    int rc = trident_main(c->argc + 2, argv);
    fflush(stdout);
    return rc;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return strdup("");
    char *buf = xcalloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

// The end-to-end verdict: the documented exit code and what the output names. Returns CASE_*.
static int check_cli(const fuzz_case *c, int rc) {
    char path[512], want[200];
    snprintf(path, sizeof path, "%s/out", g_work);
    char *out = slurp(path);
    int r = CASE_OK;
    snprintf(want, sizeof want, "trident %s", c->cmd->name);
    if (c->verdict == V_ERROR) {
        if (rc != TRI_ERR_CONFIG) r = rc == 0 ? CASE_WRONG_SUCCESS : CASE_WRONG;
        else if (!strstr(out, want) || !strstr(out, "--help") ||
                 (c->name[0] && !strstr(out, c->name)))
            r = CASE_NO_NAME;
    } else if (c->verdict == V_HELP) {
        char usage[240];
        snprintf(usage, sizeof usage, "usage: %s", want);
        if (rc != 0 || strncmp(out, usage, strlen(usage))) r = CASE_WRONG;
    } else if (c->verdict == V_PARSED) { // the files named do not exist
        const int want_rc = !strcmp(c->cmd->name, "sample") || !strcmp(c->cmd->name, "export")
                                ? TRI_ERR_CKPT
                                : TRI_ERR_CONFIG;
        if (rc != want_rc || !strstr(out, "/nonexistent/fuzz-cli/")) r = CASE_WRONG;
    }
    if (r != CASE_OK) fprintf(stderr, "  trident exit %d: %.300s\n", rc, out);
    free(out);
    return r;
}

// Case n of family f: the same list in every process (a pure function of seed, f, n).
static int case_of(fuzz_case *c, uint64_t seed, int f, int n) {
    g_rng = seed * 1000003u + (uint64_t)f * 7919u + (uint64_t)n * 104729u;
    memset(c, 0, sizeof *c);
    for (int tries = 0; tries < 100; tries++) {
        if (make_case(c, f, n)) return 1;
        case_free(c);
    }
    return 0;
}

// The parser's verdicts of cases [from, n) of family f, one byte each into `fd`, in a child
// (a fork per case costs more than the case). Returns when the child has ended: at `n`, or
// after the case that crashed or hung it, which *done (the cases answered) then points at.
static int parse_batch(uint64_t seed, int f, int from, int n, unsigned char *verdicts, int *done) {
    int fds[2];
    if (pipe(fds)) return perror("pipe"), -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        for (int k = from; k < n; k++) {
            fuzz_case c;
            unsigned char v = case_of(&c, seed, f, k) ? (unsigned char)check_parse(&c) : 255;
            case_free(&c);
            if (write(fds[1], &v, 1) != 1) _exit(1);
        }
        _exit(0);
    }
    close(fds[1]);
    *done = from;
    int status = 0, hung = 0;
    for (;;) {
        struct timeval tv = {(time_t)g_bound, 0};
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(fds[0], &rd);
        int r = select(fds[0] + 1, &rd, NULL, NULL, &tv);
        if (r == 0) { // no answer within the bound: the case hangs
            kill(pid, SIGKILL);
            hung = 1;
            break;
        }
        unsigned char v;
        if (r < 0 || read(fds[0], &v, 1) != 1) break;
        verdicts[(*done)++] = v;
    }
    close(fds[0]);
    waitpid(pid, &status, 0);
    if (*done == n) return 0;
    return hung ? -1000 : WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
}

int main(int argc, char **argv) {
    int cases = 300, cli_every = 10;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cases")) cases = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--cli-every")) cli_every = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bound")) g_bound = atof(argv[i + 1]);
    }
    char work[] = "/tmp/fuzz-cli-XXXXXX";
    if (!mkdtemp(work)) return perror("mkdtemp"), 1;
    g_work = work;
    setenv("TRIDENT_REEXEC", "1", 1); // a child is never re-executed (it is not trident)
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    log_init();
    int failed = 0, through_cli = 0;
    const double t0 = time_now_s();
    int *verdict = xcalloc((size_t)cases + 1, sizeof *verdict);
    unsigned char *parsed = xcalloc((size_t)cases + 1, 1);
    for (int f = 0; f < F_COUNT; f++) {
        family_stats st = {0};
        // The parser on every case, in as few children as crashes allow.
        for (int from = 0; from < cases;) {
            int done = from;
            int rc = parse_batch(seed, f, from, cases, parsed, &done);
            for (int k = from; k < done; k++) verdict[k] = parsed[k];
            if (rc < 0 && done < cases) verdict[done++] = rc == -1 ? -SIGABRT : rc;
            from = done;
        }
        for (int n = 0; n < cases; n++) {
            fuzz_case c;
            if (!case_of(&c, seed, f, n)) continue;
            st.cases++;
            int v = verdict[n];
            int cli = cli_every > 0 && n % cli_every == 0 && v == CASE_OK && c.verdict != V_ANY;
            // A valid train or comm-test would launch and run: parsed only.
            if (c.verdict == V_PARSED &&
                (!strcmp(c.cmd->name, "train") || !strcmp(c.cmd->name, "comm-test")))
                cli = 0;
            if (cli) {
                st.cli++, through_cli++;
                double ms;
                int e = in_child(run_trident, &c, &ms);
                v = e < 0 ? e : check_cli(&c, e);
            }
            if (v == CASE_OK) st.clean++;
            else if (v == -1000) st.hangs++;
            else if (v < 0) st.crashes++;
            else if (v == CASE_WRONG_SUCCESS) st.wrong_successes++;
            else st.wrong++;
            if (v != CASE_OK) {
                printf("  case %s #%d (seed %llu) %s: trident %s", FAMILY[f], n,
                       (unsigned long long)seed,
                       v == -1000              ? "hang"
                       : v < 0                 ? "signal"
                       : v == CASE_NO_NAME     ? "message does not name it"
                       : v == CASE_WRONG_VALUE ? "wrong value kept"
                                               : "wrong verdict",
                       c.cmd->name);
                for (int i = 0; i < c.argc && i < 12; i++) printf(" '%.40s'", c.argv[i]);
                printf(
                    " (expected %s%s%s)\n",
                    (const char *[]){"a usage error", "the help", "a parse", "anything"}[c.verdict],
                    c.name[0] ? " naming " : "", c.name);
                if (v > 0 && v != 255) check_parse(&c); // prints what the parser said
            }
            case_free(&c);
        }
        const int ok = st.clean == st.cases;
        failed += !ok;
        printf("%s fuzz_cli %s: %d cases, %d clean, %d crashes, %d hangs, %d wrong successes, "
               "%d other wrong verdicts (%d also through trident)\n",
               ok ? "PASS" : "FAIL", FAMILY[f], st.cases, st.clean, st.crashes, st.hangs,
               st.wrong_successes, st.wrong, st.cli);
    }
    printf("fuzz_cli: %d families x %d cases (seed %llu), %d through trident, in %.1f s\n", F_COUNT,
           cases, (unsigned long long)seed, through_cli, time_now_s() - t0);
    free(verdict);
    free(parsed);
    char out[600];
    snprintf(out, sizeof out, "%s/out", work);
    unlink(out); // the one file the trident runs wrote
    rmdir(work);
    return failed ? 1 : 0;
}

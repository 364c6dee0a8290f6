// cli.c: the table-driven command line of every subcommand (cli.h).
#include "app/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "base/common.h"
#include "base/suggest.h"

enum { CLI_WIDTH = 88 }; // usage lines wrap here

static void *field_of(void *opts, size_t offset) { return (char *)opts + offset; }
static const void *cfield_of(const void *opts, size_t offset) {
    return (const char *)opts + offset;
}

// An option name without its leading dashes ("tokens"), for "did you mean".
static const char *bare(const char *name) {
    while (*name == '-') name++;
    return name;
}

static void errf(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

// "a, b or c" (sep ", ", last " or ") or "a|b|c" from a NULL-terminated list.
static void join_choices(const char *const *choices, const char *sep_mid, const char *sep_last,
                         char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; choices[i] && used < n; i++) {
        const char *sep = i == 0 ? "" : choices[i + 1] ? sep_mid : sep_last;
        used += (size_t)snprintf(buf + used, n - used, "%s%s", sep, choices[i]);
    }
}

// What a number option takes, after "--name needs ": "an integer from 0 to 4096", "a number
// in [0, 1)", "a number > 0".
static void range_text(const cli_option *o, char *buf, size_t n) {
    const double int_max = o->kind == CLI_INT ? 2147483647.0 : 9.2e18;
    if (o->kind == CLI_INT || o->kind == CLI_I64) {
        if (o->hi >= int_max) snprintf(buf, n, "an integer >= %.0f", o->lo);
        else snprintf(buf, n, "an integer from %.0f to %.0f", o->lo, o->hi);
    } else if (isinf(o->hi)) {
        snprintf(buf, n, "a number %s %g", o->lo_open ? ">" : ">=", o->lo);
    } else {
        snprintf(buf, n, "a number in %c%g, %g%c", o->lo_open ? '(' : '[', o->lo, o->hi,
                 o->hi_open ? ')' : ']');
    }
}

// Stores `v` into option o's field; returns 0, or 1 with the message in err.
static int set_value(const cli_option *o, const char *v, void *opts, char *err, size_t cap) {
    void *f = field_of(opts, o->offset);
    char *end, what[128];
    errno = 0;
    switch (o->kind) {
    case CLI_STR: *(const char **)f = v; return 0;
    case CLI_LIST: {
        cli_list *l = f;
        l->items[l->n++] = v;
        return 0;
    }
    case CLI_INT:
    case CLI_I64: {
        long long x = strtoll(v, &end, 10);
        if (!errno && end != v && !*end && x >= o->lo && x <= o->hi) {
            if (o->kind == CLI_INT) *(int *)f = (int)x;
            else *(int64_t *)f = (int64_t)x;
            return 0;
        }
        break;
    }
    case CLI_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!errno && end != v && !*end && v[0] >= '0' && v[0] <= '9') {
            *(uint64_t *)f = (uint64_t)x;
            return 0;
        }
        errf(err, cap, "%s needs an integer from 0 to %" PRIu64 ", got %s", o->name, UINT64_MAX, v);
        return 1;
    }
    case CLI_NUM: {
        double x = strtod(v, &end);
        if (!errno && end != v && !*end && isfinite(x) && (o->lo_open ? x > o->lo : x >= o->lo) &&
            (o->hi_open ? x < o->hi : x <= o->hi)) {
            *(double *)f = x;
            return 0;
        }
        break;
    }
    case CLI_CHOICE: {
        for (int i = 0; o->choices[i]; i++) {
            if (!strcmp(v, o->choices[i])) {
                *(int *)f = i;
                return 0;
            }
        }
        join_choices(o->choices, ", ", " or ", what, sizeof what);
        const char *s = suggest_closest(v, o->choices);
        errf(err, cap, "%s needs %s, got %s%s%s%s", o->name, what, v, s ? "; did you mean " : "",
             s ? s : "", s ? "?" : "");
        return 1;
    }
    case CLI_CUSTOM:
        if (!o->parse(v, f, what, sizeof what)) return 0;
        errf(err, cap, "%s needs %s, got %s", o->name, what, v);
        return 1;
    case CLI_FLAG: break; // never called for a flag
    }
    range_text(o, what, sizeof what);
    errf(err, cap, "%s needs %s, got %s", o->name, what, v);
    return 1;
}

static const cli_option *find_option(const cli_command *cmd, const char *a, size_t len) {
    for (int k = 0; k < cmd->n_options; k++)
        if (strlen(cmd->options[k].name) == len && !strncmp(cmd->options[k].name, a, len))
            return &cmd->options[k];
    return NULL;
}

// "unknown option --tokns; did you mean --tokens?"
static void unknown_option(const cli_command *cmd, const char *a, size_t len, char *err,
                           size_t cap) {
    char typed[64];
    snprintf(typed, sizeof typed, "%.*s", (int)len, a);
    const char **names = xcalloc((size_t)cmd->n_options + 2, sizeof *names);
    for (int k = 0; k < cmd->n_options; k++) names[k] = bare(cmd->options[k].name);
    names[cmd->n_options] = "help";
    const char *s = *bare(typed) ? suggest_closest(bare(typed), names) : NULL;
    if (s) errf(err, cap, "unknown option %.*s; did you mean --%s?", (int)len, a, s);
    else errf(err, cap, "unknown option %.*s", (int)len, a);
    free(names);
}

// An option as the usage shows it: "--tokens N", "--format llmc|safetensors", "--json".
static void option_text(const cli_option *o, char *buf, size_t n) {
    if (o->kind == CLI_FLAG) {
        snprintf(buf, n, "%s", o->name);
    } else if (o->kind == CLI_CHOICE && !o->value) {
        size_t used = (size_t)snprintf(buf, n, "%s ", o->name);
        if (used < n) join_choices(o->choices, "|", "|", buf + used, n - used);
    } else {
        snprintf(buf, n, "%s %s", o->name, o->value);
    }
}

// "needs CONFIG", "needs --tokenizer FILE, --out PREFIX and at least one INPUT": every
// required argument in usage order, when one is missing.
static void missing_required(const cli_command *cmd, char *err, size_t cap) {
    const char *parts[64];
    char texts[64][96];
    int n = 0;
    const int args_required = cmd->min_args > 0;
    if (args_required && !cmd->args_last) parts[n++] = cmd->args;
    for (int k = 0; k < cmd->n_options && n < 62; k++) {
        const cli_option *o = &cmd->options[k];
        if (!o->required) continue;
        option_text(o, texts[n], sizeof texts[n]);
        parts[n] = texts[n];
        n++;
    }
    if (args_required && cmd->args_last) {
        snprintf(texts[n], sizeof texts[n], "%s%s", cmd->max_args < 0 ? "at least one " : "",
                 cmd->args);
        // "INPUT..." reads "at least one INPUT"
        char *dots = strstr(texts[n], "...");
        if (dots) *dots = '\0';
        parts[n] = texts[n];
        n++;
    }
    size_t used = (size_t)snprintf(err, cap, "needs ");
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(err + used, cap - used, "%s%s",
                                 i == 0       ? ""
                                 : i == n - 1 ? " and "
                                              : ", ",
                                 parts[i]);
}

cli_result cli_parse(const cli_command *cmd, int argc, char **argv, void *opts, char *err,
                     size_t cap) {
    err[0] = '\0';
    memcpy(opts, cmd->defaults, cmd->opts_size);
    cli_list *args = cmd->args ? field_of(opts, cmd->args_offset) : NULL;
    if (args) *args = (cli_list){xcalloc((size_t)argc + 1, sizeof(char *)), 0};
    for (int k = 0; k < cmd->n_options; k++)
        if (cmd->options[k].kind == CLI_LIST)
            *(cli_list *)field_of(opts, cmd->options[k].offset) = (cli_list){
                xcalloc((size_t)argc + 1, sizeof(char *)), 0};
    unsigned char *seen = xcalloc((size_t)cmd->n_options + 1, 1);
    cli_result rc = CLI_PARSED;
    int only_args = 0;
    for (int i = 0; i < argc && rc == CLI_PARSED; i++) {
        const char *a = argv[i];
        if (!only_args && !strcmp(a, "--")) {
            only_args = 1;
        } else if (!only_args && a[0] == '-' && a[1] != '\0') {
            if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                rc = CLI_HELP;
                break;
            }
            const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
            const size_t len = eq ? (size_t)(eq - a) : strlen(a);
            const cli_option *o = find_option(cmd, a, len);
            if (!o) {
                unknown_option(cmd, a, len, err, cap);
                rc = CLI_USAGE_ERROR;
            } else if (o->kind == CLI_FLAG) {
                if (eq)
                    errf(err, cap, "%s takes no value, got %s", o->name, a), rc = CLI_USAGE_ERROR;
                else *(int *)field_of(opts, o->offset) = 1;
            } else {
                const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
                if (!v)
                    errf(err, cap, "%s needs a value (%s)", o->name, o->value),
                        rc = CLI_USAGE_ERROR;
                else if (set_value(o, v, opts, err, cap)) rc = CLI_USAGE_ERROR;
            }
            if (o && rc == CLI_PARSED) seen[o - cmd->options] = 1;
        } else if (args && (cmd->max_args < 0 || args->n < cmd->max_args)) {
            args->items[args->n++] = a;
        } else {
            // A word that is an option's name without its dashes is most likely that option.
            const cli_option *o = NULL;
            for (int k = 0; k < cmd->n_options && !o; k++)
                if (!strcmp(bare(cmd->options[k].name), a)) o = &cmd->options[k];
            if (!args) errf(err, cap, "takes no arguments, got %s", a);
            else errf(err, cap, "unexpected argument %s (%s is %s)", a, cmd->args, args->items[0]);
            if (o) snprintf(err + strlen(err), cap - strlen(err), "; did you mean %s?", o->name);
            rc = CLI_USAGE_ERROR;
        }
    }
    if (rc == CLI_PARSED) {
        int missing = args && args->n < cmd->min_args;
        for (int k = 0; k < cmd->n_options; k++) missing |= cmd->options[k].required && !seen[k];
        if (missing) missing_required(cmd, err, cap), rc = CLI_USAGE_ERROR;
    }
    free(seen);
    return rc;
}

void cli_free(const cli_command *cmd, void *opts) {
    if (cmd->args) {
        cli_list *l = field_of(opts, cmd->args_offset);
        free(l->items);
        *l = (cli_list){0};
    }
    for (int k = 0; k < cmd->n_options; k++) {
        if (cmd->options[k].kind != CLI_LIST) continue;
        cli_list *l = field_of(opts, cmd->options[k].offset);
        free(l->items);
        *l = (cli_list){0};
    }
}

// ---------------------------------------------------------------------------------------
// Help

void cli_print_synopsis(const cli_command *cmd, const char *lead, FILE *f) {
    char words[80][160];
    int n = 0;
    snprintf(words[n++], sizeof words[0], "trident %s", cmd->name);
    char args[160] = "";
    if (cmd->args) snprintf(args, sizeof args, cmd->min_args > 0 ? "%s" : "[%s]", cmd->args);
    if (cmd->args && !cmd->args_last) snprintf(words[n++], sizeof words[0], "%s", args);
    for (int k = 0; k < cmd->n_options && n < 78; k++) {
        const cli_option *o = &cmd->options[k];
        char t[140];
        option_text(o, t, sizeof t);
        if (o->required) snprintf(words[n++], sizeof words[0], "%s", t);
        else snprintf(words[n++], sizeof words[0], "[%s]%s", t, o->kind == CLI_LIST ? "..." : "");
    }
    if (cmd->args && cmd->args_last) snprintf(words[n++], sizeof words[0], "%s", args);
    // Continuation lines line up after "trident NAME ".
    const int cont = (int)strlen(lead) + (int)strlen(words[0]) + 1;
    int col = fprintf(f, "%s%s", lead, words[0]);
    for (int i = 1; i < n; i++) {
        if (col + 1 + (int)strlen(words[i]) > CLI_WIDTH)
            col = fprintf(f, "\n%*s", cont - 1, "") - 1;
        col += fprintf(f, " %s", words[i]);
    }
    fputc('\n', f);
}

// Prints `text` from column `col` on (the cursor is there), wrapped at CLI_WIDTH with
// continuation lines starting at column `indent`.
static void print_wrapped(const char *text, int col, int indent, FILE *f) {
    int first = 1;
    while (*text) {
        const char *sp = strchr(text, ' ');
        int len = sp ? (int)(sp - text) : (int)strlen(text);
        if (!first && col + 1 + len > CLI_WIDTH) col = fprintf(f, "\n%*s", indent, "") - 1;
        else if (!first) col += fprintf(f, " ");
        col += fprintf(f, "%.*s", len, text);
        first = 0;
        text += len;
        while (*text == ' ') text++;
    }
    fputc('\n', f);
}

static void default_text(const cli_option *o, const void *defaults, char *buf, size_t n) {
    const void *v = cfield_of(defaults, o->offset);
    buf[0] = '\0';
    if (o->def) snprintf(buf, n, "%s", o->def);
    else if (o->kind == CLI_STR)
        snprintf(buf, n, "%s", *(const char *const *)v ? *(const char *const *)v : "none");
    else if (o->kind == CLI_INT) snprintf(buf, n, "%d", *(const int *)v);
    else if (o->kind == CLI_I64) snprintf(buf, n, "%" PRId64, *(const int64_t *)v);
    else if (o->kind == CLI_U64) snprintf(buf, n, "%" PRIu64, *(const uint64_t *)v);
    else if (o->kind == CLI_NUM) snprintf(buf, n, "%g", *(const double *)v);
    else if (o->kind == CLI_CHOICE) snprintf(buf, n, "%s", o->choices[*(const int *)v]);
    else if (o->kind == CLI_LIST) snprintf(buf, n, "none");
}

void cli_print_help(const cli_command *cmd, FILE *f) {
    cli_print_synopsis(cmd, "usage: ", f);
    fprintf(f, "\n%s\n", cmd->summary);
    int width = 10; // "-h, --help"
    char t[160], d[160], line[640];
    for (int k = 0; k < cmd->n_options; k++) {
        option_text(&cmd->options[k], t, sizeof t);
        if ((int)strlen(t) > width) width = (int)strlen(t);
    }
    if (cmd->args && (int)strlen(cmd->args) > width) width = (int)strlen(cmd->args);
    if (width > 30) width = 30; // a longer one puts its help on the next line
    const int col = 2 + width + 2;
    if (cmd->args) {
        fprintf(f, "\narguments:\n  %-*s  ", width, cmd->args);
        print_wrapped(cmd->args_help, col, col, f);
    }
    fprintf(f, "\noptions:\n");
    for (int k = 0; k < cmd->n_options; k++) {
        const cli_option *o = &cmd->options[k];
        option_text(o, t, sizeof t);
        default_text(o, cmd->defaults, d, sizeof d);
        if ((int)strlen(t) > width) fprintf(f, "  %s\n%*s", t, col, "");
        else fprintf(f, "  %-*s  ", width, t);
        if (o->required) snprintf(line, sizeof line, "%s (required)", o->help);
        else if (d[0]) snprintf(line, sizeof line, "%s (default: %s)", o->help, d);
        else snprintf(line, sizeof line, "%s", o->help);
        print_wrapped(line, col, col, f);
    }
    fprintf(f, "  %-*s  %s\n", width, "-h, --help", "print this help and exit");
    for (int i = 0; cmd->notes && cmd->notes[i]; i++)
        fprintf(f, "%s%s\n", i ? "" : "\n", cmd->notes[i]);
}

int cli_report(const cli_command *cmd, const char *err) {
    LOG_ERROR("trident %s: %s", cmd->name, err);
    LOG_HINT("`trident %s --help` lists its arguments and options, with their defaults", cmd->name);
    return TRI_ERR_CONFIG;
}

int cli_parse_command(const cli_command *cmd, int argc, char **argv, void *opts) {
    char err[512];
    switch (cli_parse(cmd, argc, argv, opts, err, sizeof err)) {
    case CLI_PARSED: return -1;
    case CLI_HELP: cli_print_help(cmd, stdout); return 0;
    case CLI_USAGE_ERROR: break;
    }
    return cli_report(cmd, err);
}

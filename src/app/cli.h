// cli.h: a subcommand's command line as one table. Each row is an option: its name, its
// value, where the value goes in the command's options struct, its meaning and its default.
// The parser accepts exactly the rows of the table and `--help` prints them, so an option
// cannot be parsed without being documented (tests/test_cli.sh runs every subcommand's
// --help against what its parser accepts, and checks that no option is parsed elsewhere).
#pragma once
#include <stddef.h>
#include <stdio.h>

typedef enum {
    CLI_FLAG,   // no value: the int field becomes 1
    CLI_STR,    // const char *: the argument itself
    CLI_LIST,   // cli_list: every use appends its value (--set k=v --set ...)
    CLI_INT,    // int within [lo, hi]
    CLI_I64,    // int64_t within [lo, hi]
    CLI_U64,    // uint64_t, decimal, no sign
    CLI_NUM,    // double within [lo, hi] (lo_open / hi_open: the bound excluded)
    CLI_CHOICE, // int: the index of the value in `choices`
    CLI_CUSTOM, // parse() fills the field
} cli_kind;

// Arguments in the order given; `items` points into argv.
typedef struct {
    const char **items;
    int n;
} cli_list;

typedef struct {
    const char *name;  // "--tokens"
    const char *value; // what the value is, as the usage shows it ("N"); NULL for a flag
    cli_kind kind;
    size_t offset; // of the field in the options struct
    double lo, hi; // INT, I64, NUM: the range
    unsigned char lo_open, hi_open;
    unsigned char required;     // the command does not run without it
    const char *const *choices; // CHOICE: NULL-terminated
    // CUSTOM: parses `value` into `field`; returns 0, or 1 with the reason in err (which
    // follows "--name needs ").
    int (*parse)(const char *value, void *field, char *err, size_t cap);
    const char *help; // what it does, one line
    // The default as the help shows it; NULL: the field's value in the defaults struct
    // (CUSTOM and LIST fields need it; a flag's default is off).
    const char *def;
} cli_option;

typedef struct {
    const char *name;         // "sample"
    const char *args;         // the positional arguments as the usage shows them ("SOURCE")
    const char *args_help;    // what they are, one line
    int min_args, max_args;   // how many (max_args -1: any number)
    int args_last;            // the usage shows them after the options (tokenize's INPUT...)
    size_t args_offset;       // of their cli_list in the options struct
    const char *summary;      // what the command does, one line (trident --help)
    const char *const *notes; // lines printed after the options, NULL-terminated; or NULL
    const cli_option *options;
    int n_options;
    const void *defaults; // the options struct before parsing: the defaults the help shows
    size_t opts_size;     // its size
} cli_command;

// A subcommand and what runs it: main.c's list, in the order `trident --help` shows them
// (also read by tests/fuzz_cli.c, which links main.c as trident_main).
typedef struct {
    const cli_command *cli;
    int (*run)(int argc, char **argv); // the arguments after the command's name
} cli_entry;
extern const cli_entry CLI_COMMANDS[];
extern const int CLI_N_COMMANDS;

#define CLI_N(table) ((int)(sizeof(table) / sizeof((table)[0])))

typedef enum { CLI_PARSED, CLI_HELP, CLI_USAGE_ERROR } cli_result;

// Parses argv (the arguments after the subcommand) into `opts` (cmd->opts_size bytes), which
// it first sets to cmd->defaults.
// Options take their value as the next argument or after '=' (--tokens=8); `--` ends the
// options; -h and --help ask for the help. Returns CLI_USAGE_ERROR with the message in err
// (an unknown option is named, with the closest option when one is close). Prints nothing,
// so that a command launched on many ranks can report once. cli_free releases the lists.
cli_result cli_parse(const cli_command *cmd, int argc, char **argv, void *opts, char *err,
                     size_t cap);
void cli_free(const cli_command *cmd, void *opts);
// `trident NAME --help`: the usage line, the arguments, and each option with its meaning
// and default (from cmd->defaults), then the notes.
void cli_print_help(const cli_command *cmd, FILE *f);
// The usage line, `lead` then "trident NAME ARGS [--opt V]...", wrapped at 88 columns
// (continuation lines line up after "trident NAME").
void cli_print_synopsis(const cli_command *cmd, const char *lead, FILE *f);
// cli_parse, then on --help the help on stdout (exit 0) or on a usage error cli_report (exit
// 2): returns -1 when the command is to run, else the exit code. For commands that run on
// one process (a launched command reports on one rank only: see cmd_train).
int cli_parse_command(const cli_command *cmd, int argc, char **argv, void *opts);
// "error: trident NAME: ERR" and a HINT naming `trident NAME --help`, on stderr. Returns
// TRI_ERR_CONFIG, the exit code of a usage error.
int cli_report(const cli_command *cmd, const char *err);

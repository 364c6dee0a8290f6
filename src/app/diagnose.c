// diagnose.c: `trident diagnose OUT_DIR` (diagnose.h). The verdict is flight_verdict's, the
// very function the lowest live rank of a stalled job prints: offline it reads what the ranks
// left in OUT_DIR/diagnose/, so it says the same.
#include "app/diagnose.h"

#include <sys/stat.h>

#include "comm/flight.h"

typedef struct {
    cli_list dir; // OUT_DIR, exactly one
} diagnose_args;

static const diagnose_args DIAGNOSE_DEFAULTS = {{0}};

const cli_command DIAGNOSE_CLI = {
    .name = "diagnose",
    .args = "OUT_DIR",
    .args_help = "a run's run.out_dir (or its diagnose/ folder), as a stalled or failed run left "
                 "it",
    .min_args = 1,
    .max_args = 1,
    .args_offset = offsetof(diagnose_args, dir),
    .summary = "the verdict of a stalled or failed run: the rank, host and operation at fault",
    .options = NULL,
    .n_options = 0,
    .defaults = &DIAGNOSE_DEFAULTS,
    .opts_size = sizeof(diagnose_args),
};

int diagnose_main(int argc, char **argv) {
    diagnose_args a;
    int rc = cli_parse_command(&DIAGNOSE_CLI, argc, argv, &a);
    if (rc >= 0) {
        cli_free(&DIAGNOSE_CLI, &a);
        return rc;
    }
    const char *out_dir = a.dir.items[0];
    // OUT_DIR/diagnose, or the diagnose folder itself.
    char dir[4200];
    struct stat st;
    snprintf(dir, sizeof dir, "%s/diagnose", out_dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(dir, sizeof dir, "%s", out_dir);
    static char verdict[16384];
    tri_status s = flight_verdict(dir, verdict, sizeof verdict);
    if (s == TRI_OK) {
        fputs(verdict, stdout);
    } else if (s == TRI_ERR_CKPT) {
        LOG_ERROR("diagnose: %s", verdict);
        LOG_HINT("a ring is rewritten by every run of %s; one cut short (a full disk, a copy "
                 "in progress) or from another program cannot be read: diagnose the job from its "
                 "remaining rings by moving this one away",
                 out_dir);
    } else {
        LOG_ERROR("diagnose: %s", verdict);
        LOG_HINT("give the run.out_dir of a `trident train` run: its ranks keep their flight "
                 "recorder rings in OUT_DIR/diagnose/ (unless TRIDENT_FLIGHT_RECORDER=0)");
    }
    cli_free(&DIAGNOSE_CLI, &a);
    return (int)s;
}

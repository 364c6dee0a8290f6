// diagnose.h: `trident diagnose OUT_DIR` (DESIGN.md "CLI"): the verdict of a stalled or
// failed run, from the flight recorder's rings in OUT_DIR/diagnose/ (comm/flight.h).
#pragma once
#include "app/cli.h"

// argv holds the arguments after "diagnose". Returns the exit code: 0 with the verdict on
// stdout; 2 on a usage error or a directory without rings; 4 when a ring is corrupt or
// truncated (the file is named).
int diagnose_main(int argc, char **argv);
extern const cli_command DIAGNOSE_CLI;

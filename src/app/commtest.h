// commtest.h: `trident comm-test`, the comm backend's self-test and bandwidth table
// (nccl-tests style: every collective on every group of the mesh, wrong elements counted
// and all-reduced over the world, algorithm and bus bandwidth per size).
#pragma once
#include "app/cli.h"

// argv holds the options after "comm-test". Returns the exit code: 0 when every element of
// every check was right, 1 when any was wrong, 2 on a usage error, 5 on a comm failure.
int commtest_main(int argc, char **argv);
// Its options (cli.h): the parser and the help read this table.
extern const cli_command COMMTEST_CLI;

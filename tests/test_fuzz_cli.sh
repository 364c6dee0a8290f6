#!/usr/bin/env bash
# The seeded fuzzer of the command line (tests/fuzz_cli.c): argument lists built from every
# subcommand's table (unknown options, missing and bad values, extra arguments, help, valid
# lists, random words and bytes), each checked against the verdict the table implies, every
# 10th also run as `trident CMD ARGS` for its exit code and message. One PASS/FAIL line per
# family with its cases, clean verdicts, crashes, hangs and wrong verdicts.
# CLI_FUZZ_CASES=N (default 300 per family) and CLI_FUZZ_SEED=S (default 1) for more.
set -u
cd "$(dirname "$0")/.." || exit 1
B=build/tests/fuzz_cli
if [ ! -x $B ]; then
    echo "FAIL fuzz_cli: $B is missing; run make test (it builds the test tools)"
    exit 1
fi
timeout 900 $B --cases "${CLI_FUZZ_CASES:-300}" --seed "${CLI_FUZZ_SEED:-1}" --cli-every 10

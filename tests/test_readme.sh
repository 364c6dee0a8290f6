#!/usr/bin/env bash
# README.md stays true: every command it shows runs (in a copy of the repository, each
# training shortened to one step, each sample to 16 tokens) and every output it quotes is
# compared, so a drifted plan figure, step count or message fails here. tests/readme_test.py
# says how README blocks are marked (output, example, skip with a reason, ...). Prints
# PASS/FAIL/SKIP lines and the count of README checks.
set -u
cd "$(dirname "$0")/.." || exit 1
if [ ! -x build/trident ]; then
    echo "FAIL readme: build/trident is missing; run make"
    exit 1
fi
timeout 900 /usr/bin/python3 tests/readme_test.py README.md

#!/usr/bin/env bash
# tests/test_fuzz_config.sh [--cases N] [--seed S] [--cli N] [--trains N]: the seeded config
# fuzzer (tests/fuzz_config.py says what it mutates and asserts). `make test` runs 260 cases
# of seed 1 (about 10 s); pass --cases and --seed for more, e.g.
#   bash tests/test_fuzz_config.sh --cases 5000 --seed 7
set -u
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=1
exec /usr/bin/python3 tests/fuzz_config.py --trident "${TRIDENT_BIN:-build/trident}" "$@"

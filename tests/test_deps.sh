#!/usr/bin/env bash
# The include rules of README "Architecture" (scripts/deps-check.py, also `make deps-check`):
# layers lowest first, private headers kept in their folder, no module cycle. Then that the
# check can fail: a lower layer including a higher one, in a scratch copy of the tree.
set -u
source "$(dirname "$0")/lib.sh"
if out=$(/usr/bin/python3 scripts/deps-check.py 2>&1); then pass "deps_check $(echo "$out" | tail -1)"
else fail deps_check "$(echo "$out" | tail -8 | tr '\n' ' ')"; fi
mkdir -p $W/tree && cp -r src cuda $W/tree/
echo '#include "app/train.h"' >>$W/tree/src/model/params.c
printf '#pragma once\n#include "model/b.h"\n' >$W/tree/src/model/a.h
printf '#pragma once\n#include "model/a.h"\n' >$W/tree/src/model/b.h
out=$(/usr/bin/python3 scripts/deps-check.py $W/tree 2>&1)
if echo "$out" | grep -q "src/model/params.c: layer model includes src/app/train.h" &&
    echo "$out" | grep -q "module cycle: src/model/a -> src/model/b -> src/model/a"; then
    pass deps_check_catches_violations
else fail deps_check_catches_violations "$(echo "$out" | tail -4 | tr '\n' ' ')"; fi
[ $fails = 0 ]

#!/usr/bin/env bash
# The whole model against an independent float64 PyTorch GPT-2 (tests/ref_gpt2.py, run with
# Debian's /usr/bin/python3 and python3-torch): logits, step-0 loss and every gradient of
# the initial model, then the loss, lr and gradient norm of 10 AdamW steps of
# `trident train` from the same initial model (DESIGN.md "Tests and references").
# Builds nothing: `make test` has built build/trident and build/tests/ref_dump.
set -u
cd "$(dirname "$0")/.."
CONFIG=tests/configs/ref.yaml
STEPS=10   # = train.steps of $CONFIG, which sets the lr schedule on both sides
PY=/usr/bin/python3

if ! [ -x "$PY" ] || ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "FAIL reference: python3-torch missing (scripts/install-deps.sh installs it; the test runs $PY)"
    exit 1
fi
if ! "$PY" -c 'import numpy, yaml' 2>/dev/null; then
    echo "FAIL reference: python3-numpy or python3-yaml missing (scripts/install-deps.sh installs them)"
    exit 1
fi
for bin in build/trident build/tests/ref_dump; do
    if ! [ -x "$bin" ]; then
        echo "FAIL reference: $bin not built (run make test)"
        exit 1
    fi
done

DIR=$(mktemp -d /tmp/trident-ref.XXXXXX)
trap 'rm -rf "$DIR"' EXIT

if ! build/tests/ref_dump "$CONFIG" "$DIR" "$STEPS" >"$DIR/ref_dump.log" 2>&1; then
    echo "FAIL reference_dump: build/tests/ref_dump $CONFIG exited non-zero:"
    tail -n 20 "$DIR/ref_dump.log" | sed 's/^/    /'
    exit 1
fi
echo "PASS reference_dump"

if ! build/trident train "$CONFIG" --set model.init_from="$DIR/init.bin" \
        --set run.out_dir="$DIR/run" >"$DIR/train.log" 2>&1; then
    echo "FAIL reference_train: build/trident train $CONFIG from $DIR/init.bin exited non-zero:"
    tail -n 20 "$DIR/train.log" | sed 's/^/    /'
    exit 1
fi
echo "PASS reference_train"

# Tolerances: gradients 1e-4 of each tensor's largest reference gradient; the 10 training
# losses and gradient norms 1e-6 relative. fp32 trident against float64 lands near 1e-8
# there, and 1e-6 still sees AdamW mistakes that 1e-4 would let through (weight decay on
# biases and LayerNorm moves the losses by 8e-5, no weight decay at all by 5e-5, eps 1e-6
# for 1e-8 by 3e-5).
# Torch's own threads: a few are plenty for this model, more only contend with the CPU tests.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$PY" tests/ref_gpt2.py "$DIR" --config "$CONFIG" \
    --metrics "$DIR/run/metrics.jsonl" --steps "$STEPS" --require-clip \
    --grad-tol 1e-4 --loss-tol 1e-6

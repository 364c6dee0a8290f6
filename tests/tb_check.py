"""tests/tb_check.py NAME TB_DIR METRICS_JSONL [files=N] [resumed=S1,S2..] [tags=T1,T2..]...

Reads a run's TensorBoard directory with TensorBoard's own reader (EventAccumulator, which
merges every event file of the directory in name order and applies SessionLog START purges)
and checks it against the run's metrics.jsonl; prints "PASS NAME <summary>" or
"FAIL NAME: <what differs>" per case and exits 1 if any case failed. Run it with the venv's
python (tests/test_tensorboard.sh makes one with PyPI's tensorboard).

A case passes when:
  - every event file is named events.out.tfevents.<10-digit time>.<host>, the files are
    `files` in number, and each one reads through TensorBoard's record reader (length and data
    CRCs checked) with file_version "brain.Event:2" first;
  - every (tag, step) TensorBoard shows is a field of a step or eval line of metrics.jsonl at
    that step (nested fields joined by '/'), and every such field is shown, once, with the
    metrics.jsonl value rounded to float32; fields metrics.jsonl writes with fixed decimals
    (step_ms %.3f, tokens_per_s %.1f, bubble %.4f) may differ by that rounding;
  - `tags` (when given) are among the tags;
  - each file opens with SessionLog START at its run's first step and logs no earlier step:
    step 1 for the first file, STEP + 1 for the k-th restart with resumed=STEP1,STEP2,...
    (the steps continue).
"""
import glob
import logging
import json
import os
import re
import socket
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow, errors

DECIMALS = {"step_ms": 5e-4, "tokens_per_s": 5e-2, "bubble": 5e-5, "bubble_formula": 5e-5,
            "pass_ms/F": 5e-4, "pass_ms/B": 5e-4, "pass_ms/W": 5e-4, "plan_ratio": 5e-5}
NOT_SCALARS = {"type", "step", "straggler"}  # straggler: a rank and host, not a series


def flatten(rec, prefix=""):
    for k, v in rec.items():
        if not prefix and k in NOT_SCALARS:
            continue
        name = prefix + k
        if isinstance(v, dict):
            yield from flatten(v, name + "/")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield name, float(v)


def expected_scalars(jsonl):
    want, problems = {}, []
    for n, line in enumerate(open(jsonl), 1):
        rec = json.loads(line)
        if rec.get("type") not in ("step", "eval"):
            continue
        for tag, v in flatten(rec):
            key = (tag, rec["step"])
            if key in want:
                problems.append(f"metrics.jsonl:{n} repeats {tag} at step {rec['step']}")
            want[key] = v
    return want, problems


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def read_raw(path):
    """Every record of one file through TensorBoard's reader (which checks both CRCs)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path.encode())
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return events
        ev = event_pb2.Event()
        ev.ParseFromString(reader.record())
        events.append(ev)


def check(name, tb_dir, jsonl, opts):
    problems = []
    files = sorted(glob.glob(os.path.join(tb_dir, "*tfevents*")))
    host = socket.gethostname().replace("/", "_")
    for f in files:
        if not re.fullmatch(r"events\.out\.tfevents\.\d{10}\." + re.escape(host),
                            os.path.basename(f)):
            problems.append(f"file name {os.path.basename(f)}")
    if "files" in opts and len(files) != int(opts["files"]):
        problems.append(f"{len(files)} event files, expected {opts['files']}")
    raw = {}
    for f in files:
        try:
            raw[f] = read_raw(f)
        except errors.DataLossError as e:
            problems.append(f"{os.path.basename(f)}: {e}")
            continue
        if not raw[f] or raw[f][0].file_version != "brain.Event:2":
            problems.append(f"{os.path.basename(f)}: first event is not file_version brain.Event:2")

    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
    acc.Reload()
    got = {}
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            if (tag, ev.step) in got:
                problems.append(f"{tag} at step {ev.step} twice ({got[(tag, ev.step)]}, {ev.value})")
            got[(tag, ev.step)] = ev.value
    want, dup = expected_scalars(jsonl)
    problems += dup
    missing = sorted(set(want) - set(got), key=lambda k: (k[1], k[0]))
    extra = sorted(set(got) - set(want), key=lambda k: (k[1], k[0]))
    if missing:
        problems.append(f"{len(missing)} metrics.jsonl values not in TensorBoard, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} TensorBoard values not in metrics.jsonl, e.g. {extra[:3]}")
    worst = 0.0
    for key in sorted(set(want) & set(got), key=lambda k: (k[1], k[0])):
        w, g = want[key], got[key]
        tol = DECIMALS.get(key[0], 0.0)
        ulp = abs(w) * 2.0 ** -23  # float32's rounding of w
        if g != f32(w) and not abs(g - w) <= tol + ulp:
            problems.append(f"{key[0]} at step {key[1]}: TensorBoard {g!r}, metrics.jsonl {w!r}")
        elif w and key[0] not in DECIMALS:
            worst = max(worst, abs(g - w) / abs(w))
    for tag in filter(None, opts.get("tags", "").split(",")):
        if tag not in acc.Tags()["scalars"]:
            problems.append(f"no tag {tag}")
    # resumed=S1,S2,...: file k+1 (in name order) is a run resumed at step S(k+1); the first
    # file's run starts at step 1. Each file opens with SessionLog START at its first step.
    resumed = [int(v) for v in opts.get("resumed", "").split(",") if v]
    for k, f in enumerate(files):
        first = (resumed[k - 1] if 0 < k <= len(resumed) else 0) + 1
        events = raw.get(f, [])
        starts = [e.step for e in events if e.HasField("session_log") and
                  e.session_log.status == event_pb2.SessionLog.START]
        logged = [e.step for e in events if e.HasField("summary")]
        if starts != [first]:
            problems.append(f"{os.path.basename(f)}: SessionLog START at steps {starts}, "
                            f"expected [{first}]")
        if logged and min(logged) < first:
            problems.append(f"{os.path.basename(f)}: logs step {min(logged)}, before its "
                            f"first step {first}")
    if problems:
        print(f"FAIL {name}: " + "; ".join(problems[:6]))
        return False
    steps = sorted({s for _, s in got})
    print(f"PASS {name} {len(got)} scalars = metrics.jsonl (largest relative difference "
          f"{worst:.1e} besides the fixed-decimal fields), {len(acc.Tags()['scalars'])} tags, steps {steps[0]}..{steps[-1]}, "
          f"{len(files)} event file{'s' * (len(files) != 1)}")
    return True


def main(argv):
    # The purge of a resumed run's rewritten steps is expected here, not worth a warning.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    ok = True
    i = 0
    while i < len(argv):
        name, tb_dir, jsonl = argv[i:i + 3]
        i += 3
        opts = {}
        while i < len(argv) and "=" in argv[i] and not argv[i].startswith("/"):
            k, v = argv[i].split("=", 1)
            opts[k] = v
            i += 1
        try:
            ok &= check(name, tb_dir, jsonl, opts)
        except Exception as e:  # a reader error is a failure of the case, not a crash
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

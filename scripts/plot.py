#!/usr/bin/python3
"""scripts/plot.py RUN_DIR... [--out FILE.png] [--size WxH]: the loss (train and validation)
and throughput curves of one or more trident runs, from their metrics.jsonl, in one PNG.

A RUN_DIR is a run's out_dir (its metrics.jsonl is read) or a metrics JSONL file itself. The
restarts of one run are joined: every {"type":"run"} record starts a segment, and a segment
replaces what earlier segments logged from the step it resumed at on (the record's
resumed_from_step + 1; its first logged step when the record has none): a resumed run logs
the steps after its checkpoint again. Each restart is marked by a dotted vertical line.

Needs matplotlib (Debian's python3-matplotlib, which scripts/install-deps.sh installs).
Writes FILE.png (default: plot.png in the first RUN_DIR) of exactly W x H pixels
(default 1200x800) and prints its path.
"""
import argparse
import json
import os
import sys


def read_run(path):
    """The joined curves of one metrics.jsonl: {"step": {step: record}, "eval": {step: {name:
    val}} (name "" for val_loss, NAME for each val_loss/NAME of named validation sets),
    "restarts": [first step of each segment after the first]}."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    segments = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot.py: error: {path}:{n}: not JSON ({e})")
            kind = rec.get("type")
            if kind == "run" or not segments:
                # A resumed run's record says from which step (trident writes
                # resumed_from_step); without it, the segment starts at its first line.
                resumed = rec.get("resumed_from_step") if kind == "run" else None
                segments.append({"step": {}, "eval": {},
                                 "start": resumed + 1 if resumed is not None else None})
                if kind == "run":
                    continue
            if kind == "step":
                segments[-1]["step"][rec["step"]] = rec
            elif kind == "eval":
                vals = {k[len("val_loss/"):] if "/" in k else "": v for k, v in rec.items()
                        if k.startswith("val_loss") and v is not None}
                if vals:
                    segments[-1]["eval"][rec["step"]] = vals
    joined = {"step": {}, "eval": {}, "restarts": []}
    for k, seg in enumerate(segments):
        steps = list(seg["step"]) + list(seg["eval"])
        if not steps:
            continue
        first = seg["start"] if seg["start"] is not None else min(steps)
        for kind in ("step", "eval"):  # later segments win from where they start
            joined[kind] = {s: v for s, v in joined[kind].items() if s < first}
            joined[kind].update(seg[kind])
        if k > 0:
            joined["restarts"].append(first)
    return path, joined


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="out_dir or metrics .jsonl")
    ap.add_argument("--out", help="the PNG to write (default RUN_DIR/plot.png of the first)")
    ap.add_argument("--size", default="1200x800", help="W x H in pixels (default 1200x800)")
    args = ap.parse_args()
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
        assert width >= 100 and height >= 100
    except (ValueError, AssertionError):
        sys.exit(f"plot.py: error: --size must be WxH in pixels, each >= 100, got {args.size}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py: error: matplotlib is missing\n"
                 "HINT: apt-get install python3-matplotlib (scripts/install-deps.sh does), "
                 "and run this script with /usr/bin/python3")
    runs = []
    for r in args.runs:
        try:
            runs.append(read_run(r))
        except OSError as e:
            sys.exit(f"plot.py: error: cannot read the metrics of {r}: {e.strerror}\n"
                     "HINT: pass a run's out_dir (holding metrics.jsonl) or a .jsonl file")
    out = args.out or os.path.join(args.runs[0] if os.path.isdir(args.runs[0]) else ".",
                                   "plot.png")

    dpi = 100
    fig, (ax_loss, ax_tps) = plt.subplots(2, 1, figsize=(width / dpi, height / dpi), dpi=dpi,
                                          sharex=True, gridspec_kw={"height_ratios": (2, 1)})
    for i, (path, run) in enumerate(runs):
        label = os.path.basename(os.path.dirname(os.path.abspath(path))) \
            if path.endswith("metrics.jsonl") else os.path.basename(path)
        color = f"C{i % 10}"
        steps = sorted(run["step"])
        ax_loss.plot(steps, [run["step"][s]["loss"] for s in steps], color=color, lw=1.2,
                     label=f"{label} train")
        names = sorted({n for vals in run["eval"].values() for n in vals})
        for k, name in enumerate(names):  # val_loss, or each val_loss/NAME
            ev = sorted(s for s, vals in run["eval"].items() if name in vals)
            ax_loss.plot(ev, [run["eval"][s][name] for s in ev], color=color,
                         ls=("--", "-.", ":")[k % 3], marker="osv^D"[k % 5], ms=3, lw=1.2,
                         label=f"{label} val" + (f" {name}" if name else ""))
        tps = [(s, run["step"][s].get("tokens_per_s")) for s in steps]
        tps = [(s, v) for s, v in tps if v is not None]
        if tps:
            ax_tps.plot([s for s, _ in tps], [v for _, v in tps], color=color, lw=1.0,
                        label=label)
        for s in run["restarts"]:
            for ax in (ax_loss, ax_tps):
                ax.axvline(s, color=color, ls=":", lw=0.8)
    ax_loss.set_ylabel("loss (nats per token)")
    ax_loss.set_title("loss" + ("" if len(runs) == 1 else f" of {len(runs)} runs") +
                      " (dotted: a restart)" * any(r["restarts"] for _, r in runs))
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize="small")
    ax_tps.set_ylabel("tokens/s")
    ax_tps.set_xlabel("step")
    ax_tps.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)  # figsize x dpi: exactly width x height pixels
    print(f"plot.py: wrote {out} ({width}x{height})")


if __name__ == "__main__":
    main()

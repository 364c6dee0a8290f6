#!/usr/bin/python3
"""ref_gpt2.py: an independent GPT-2 in PyTorch (float64), written from DESIGN.md's "Model"
section, checked against what trident computed.

    /usr/bin/python3 tests/ref_gpt2.py DUMP_DIR --config CONFIG.yaml [--metrics METRICS.jsonl]

DUMP_DIR is the output of `build/tests/ref_dump CONFIG DUMP_DIR STEPS`: init.bin (the initial
model, llm.c file), grads.bin (step-0 gradients, llm.c layout), logits.bin (micro-batch 0 of
step 0, float32 (B*T, Vp)), loss.txt (step-0 mean loss) and tokens.bin (int32 inputs then
targets (global_batch, T) of each step). METRICS is trident's metrics.jsonl of
`trident train CONFIG --set model.init_from=DUMP_DIR/init.bin`; its step lines' loss, lr and
grad_norm are compared with STEPS float64 AdamW steps run here from the same init.bin.

Nothing here is shared with trident's code: the model, the loss, the gradient (autograd),
the learning-rate schedule, clipping, AdamW and the token stream order are all derived from
DESIGN.md. Prints "PASS name ..." / "FAIL name: why" lines and a summary; exits 1 on any
failure.
"""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("FAIL reference: python3-torch missing (scripts/install-deps.sh installs it)")
    sys.exit(1)
try:
    import yaml
except ImportError:
    yaml = None

torch.set_default_dtype(torch.float64)

LLMC_MAGIC, LLMC_FP32 = 20240326, 3
# DESIGN.md "Config": the defaults of the keys this reference uses.
DEFAULTS = {
    "model": {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 256, "vocab_size": 256,
              "vocab_pad_to": 128},
    "parallel": {"tp": 1},
    "train": {"micro_batch": 8, "global_batch": 32, "steps": 2000, "grad_clip": 1.0},
    "optim": {"lr": 1.0e-3, "min_lr": 1.0e-4, "warmup_steps": 100, "decay": "cosine",
              "beta1": 0.9, "beta2": 0.95, "eps": 1.0e-8, "weight_decay": 0.1},
    "data": {"train": "data/kjv_train_*.bin"},
}

# llm.c file order; shapes as functions of (maxT, V, Vp, L, C).
TENSORS = [
    ("wte", lambda T, Vp, L, C: (Vp, C)),
    ("wpe", lambda T, Vp, L, C: (T, C)),
    ("ln1w", lambda T, Vp, L, C: (L, C)),
    ("ln1b", lambda T, Vp, L, C: (L, C)),
    ("qkvw", lambda T, Vp, L, C: (L, 3 * C, C)),
    ("qkvb", lambda T, Vp, L, C: (L, 3 * C)),
    ("attprojw", lambda T, Vp, L, C: (L, C, C)),
    ("attprojb", lambda T, Vp, L, C: (L, C)),
    ("ln2w", lambda T, Vp, L, C: (L, C)),
    ("ln2b", lambda T, Vp, L, C: (L, C)),
    ("fcw", lambda T, Vp, L, C: (L, 4 * C, C)),
    ("fcb", lambda T, Vp, L, C: (L, 4 * C)),
    ("fcprojw", lambda T, Vp, L, C: (L, C, 4 * C)),
    ("fcprojb", lambda T, Vp, L, C: (L, C)),
    ("lnfw", lambda T, Vp, L, C: (C,)),
    ("lnfb", lambda T, Vp, L, C: (C,)),
]
# Decoupled weight decay: embeddings and weight matrices only (DESIGN.md "Model").
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}
PER_LAYER = {name for name, _ in TENSORS} - {"wte", "wpe", "lnfw", "lnfb"}

results = []  # (ok, name, metric, value)


def report(ok, name, detail, metric=None, value=None):
    if ok:
        print(f"PASS {name} {detail}")
    else:
        print(f"FAIL {name}: {detail}")
    sys.stdout.flush()
    results.append((ok, name, metric, value))
    return ok


# --------------------------------------------------------------------------------- files

def load_config(path):
    cfg = {sec: dict(vals) for sec, vals in DEFAULTS.items()}
    if path:
        if yaml is None:
            raise SystemExit("FAIL reference: python3-yaml missing (needed to read " + path + ")")
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
        for sec, vals in doc.items():
            if isinstance(vals, dict):
                cfg.setdefault(sec, {}).update(vals)
    return cfg


def read_llmc(path):
    with open(path, "rb") as f:
        raw = f.read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    if h[0] != LLMC_MAGIC or h[1] != LLMC_FP32:
        raise ValueError(f"{path}: not an fp32 llm.c model file (magic {h[0]} version {h[1]})")
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    data = np.frombuffer(raw[1024:], dtype=np.float32)
    tensors, off = {}, 0
    for name, shape_fn in TENSORS:
        shape = shape_fn(maxT, Vp, L, C)
        n = int(np.prod(shape))
        if off + n > data.size:
            raise ValueError(f"{path}: truncated at tensor {name}")
        tensors[name] = data[off:off + n].reshape(shape).astype(np.float64)
        off += n
    if off != data.size:
        raise ValueError(f"{path}: {data.size - off} elements past the last tensor")
    hdr = dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)
    return hdr, tensors


def read_shard_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    if h[0] == 20240520 and h[1] == 1:
        dt = np.uint16
    elif h[0] == 20240801 and h[1] == 7:
        dt = np.uint32
    else:
        raise ValueError(f"{path}: not a token shard (magic {h[0]} version {h[1]})")
    ntok = int(h[2])
    tok = np.frombuffer(raw[1024:], dtype=dt)
    if tok.size != ntok:
        raise ValueError(f"{path}: {tok.size} tokens, header says {ntok}")
    return tok.astype(np.int64)


def stream_samples(pattern, T, n):
    """The first n samples (inputs, targets) of DESIGN.md's token stream order."""
    shards = sorted(glob.glob(pattern))
    if not shards:
        raise ValueError(f"no shard matches {pattern}")
    xs, ys = [], []
    while len(xs) < n:
        for path in shards:
            tok = read_shard_tokens(path)
            for k in range((tok.size - 1) // T):
                s = tok[k * T:k * T + T + 1]
                xs.append(s[:-1])
                ys.append(s[1:])
                if len(xs) == n:
                    return np.stack(xs), np.stack(ys)
    return np.stack(xs), np.stack(ys)


# --------------------------------------------------------------------------------- model

def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)  # biased, as LayerNorm normalizes
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear(x, w, b=None):
    y = x @ w.t()  # weights are (out, in)
    return y + b if b is not None else y


def gpt2_logits(p, idx, hdr):
    """Logits over the real vocabulary (B, T, V) of inputs idx (B, T)."""
    B, T = idx.shape
    L, NH, C, V = hdr["L"], hdr["NH"], hdr["C"], hdr["V"]
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:T].unsqueeze(0)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = linear(h, p["qkvw"][l], p["qkvb"][l])
        q, k, v = qkv.split(C, dim=-1)  # q, k, v in that order; heads contiguous in each
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~causal, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, p["attprojw"][l], p["attprojb"][l])
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu_tanh(linear(h, p["fcw"][l], p["fcb"][l]))
        x = x + linear(h, p["fcprojw"][l], p["fcprojb"][l])
    x = layernorm(x, p["lnfw"], p["lnfb"])
    return x @ p["wte"][:V].t()  # tied head; padded rows never predicted


def mean_ce(logits, targets):
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()


def make_params(tensors):
    return {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in tensors.items()}


def loss_and_grads(p, x, y, hdr):
    for t in p.values():
        t.grad = None
    loss = mean_ce(gpt2_logits(p, x, hdr), y)
    loss.backward()
    return loss.item(), {k: t.grad.detach().clone() for k, t in p.items()}


# ----------------------------------------------------------------------------- optimizer

def lr_at(step, o, steps):
    lr, min_lr, warmup = o["lr"], o["min_lr"], int(o["warmup_steps"])
    if step < warmup:
        return lr * (step + 1) / warmup
    if o["decay"] == "constant" or steps - 1 <= warmup:
        return lr
    progress = min(1.0, (step - warmup) / (steps - 1 - warmup))
    if o["decay"] == "cosine":
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)
    return min_lr + (1.0 - progress) * (lr - min_lr)  # linear


def adamw_run(tensors, batches, hdr, cfg, steps):
    """Float64 training from the initial tensors; per step (loss, lr, grad_norm, clipped)."""
    o, clip = cfg["optim"], float(cfg["train"]["grad_clip"])
    b1, b2, eps, wd = (float(o[k]) for k in ("beta1", "beta2", "eps", "weight_decay"))
    o = {**o, "lr": float(o["lr"]), "min_lr": float(o["min_lr"])}
    p = make_params(tensors)
    m = {k: torch.zeros_like(t) for k, t in p.items()}
    v = {k: torch.zeros_like(t) for k, t in p.items()}
    out = []
    for step in range(steps):
        x, y = batches[step]
        loss, g = loss_and_grads(p, x, y, hdr)
        norm = math.sqrt(sum(float((t * t).sum()) for t in g.values()))
        scale = clip / norm if clip > 0 and norm > clip else 1.0
        lr = lr_at(step, o, int(cfg["train"]["steps"]))
        t = step + 1
        with torch.no_grad():
            for k in p:
                gk = g[k] * scale
                m[k] = b1 * m[k] + (1 - b1) * gk
                v[k] = b2 * v[k] + (1 - b2) * gk * gk
                m_hat = m[k] / (1 - b1 ** t)
                v_hat = v[k] / (1 - b2 ** t)
                decay = wd if k in DECAYED else 0.0
                p[k] -= lr * (m_hat / (torch.sqrt(v_hat) + eps) + decay * p[k])
        out.append((loss, lr, norm, scale < 1.0))
    return out


# --------------------------------------------------------------------------------- checks

def rel_to_max(ours, ref):
    """max |ours - ref| / max |ref| (0/0 = 0)."""
    diff = float(np.max(np.abs(ours - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


def check_init(hdr, init):
    """DESIGN.md's initialisation, statistically: N(0, 0.02), residual projections scaled
    by 1/sqrt(2L), biases 0, LayerNorm weights 1, padded wte rows 0."""
    L, V = hdr["L"], hdr["V"]
    proj = 0.02 / math.sqrt(2 * L)
    bad = []
    for name, want in (("wte", 0.02), ("wpe", 0.02), ("qkvw", 0.02), ("fcw", 0.02),
                       ("attprojw", proj), ("fcprojw", proj)):
        t = init[name][:V] if name == "wte" else init[name]
        std, mean = float(t.std()), float(t.mean())
        if abs(std / want - 1) > 0.1 or abs(mean) > 5 * want / math.sqrt(t.size):
            bad.append(f"{name} mean {mean:.3g} std {std:.4g} (want 0, {want:.4g})")
    for name in ("qkvb", "attprojb", "fcb", "fcprojb", "ln1b", "ln2b", "lnfb"):
        if np.any(init[name] != 0):
            bad.append(f"{name} not all 0")
    for name in ("ln1w", "ln2w", "lnfw"):
        if np.any(init[name] != 1):
            bad.append(f"{name} not all 1")
    pad = init["wte"][V:]
    if pad.size and np.any(pad != 0):
        bad.append(f"padded wte rows {V}..{hdr['Vp'] - 1} not all 0")
    report(not bad, "ref_init", "(N(0,0.02), scaled projections, zero biases, unit LN, zero padding)"
           if not bad else "; ".join(bad))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", help="ref_dump output directory")
    ap.add_argument("--config", help="the YAML run file ref_dump and trident used")
    ap.add_argument("--metrics", help="trident's metrics.jsonl of training from DUMP/init.bin")
    ap.add_argument("--steps", type=int, default=None, help="AdamW steps to compare (default: "
                    "all steps in tokens.bin, at most train.steps)")
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--loss-tol", type=float, default=1e-4)
    ap.add_argument("--require-clip", action="store_true",
                    help="fail unless gradient clipping engages in some steps and not in others")
    args = ap.parse_args()

    cfg = load_config(args.config)
    tr = cfg["train"]
    B, GB = int(tr["micro_batch"]), int(tr["global_batch"])
    d = args.dump
    hdr, init = read_llmc(os.path.join(d, "init.bin"))
    T, V, Vp, C = hdr["maxT"], hdr["V"], hdr["Vp"], hdr["C"]
    mc = cfg["model"]
    want = dict(maxT=int(mc["seq_len"]), V=int(mc["vocab_size"]), L=int(mc["n_layer"]),
                NH=int(mc["n_head"]), C=int(mc["d_model"]))
    pad_mult = int(mc["vocab_pad_to"]) * int(cfg["parallel"]["tp"])
    want["Vp"] = (want["V"] + pad_mult - 1) // pad_mult * pad_mult
    report(all(hdr[k] == want[k] for k in want), "ref_header",
           f"{hdr}" if all(hdr[k] == want[k] for k in want) else f"init.bin header {hdr}, config says {want}")
    check_init(hdr, init)

    # Token batches: tokens.bin against DESIGN.md's stream order over the shards.
    tok = np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int32).astype(np.int64)
    per_step = 2 * GB * T
    if tok.size % per_step:
        report(False, "ref_tokens", f"tokens.bin has {tok.size} ints, not a multiple of {per_step}")
        return finish()
    n_steps = tok.size // per_step
    batches = []
    for s in range(n_steps):
        blk = tok[s * per_step:(s + 1) * per_step]
        batches.append((torch.from_numpy(blk[:GB * T].reshape(GB, T)),
                        torch.from_numpy(blk[GB * T:].reshape(GB, T))))
    try:
        xs, ys = stream_samples(cfg["data"]["train"], T, n_steps * GB)
        got_x = np.concatenate([b[0].numpy() for b in batches])
        got_y = np.concatenate([b[1].numpy() for b in batches])
        bad = int(np.sum(got_x != xs) + np.sum(got_y != ys))
        report(bad == 0, "ref_tokens", f"({n_steps} steps x {GB} samples match the shards' stream order)"
               if bad == 0 else f"{bad} tokens of tokens.bin differ from the stream order of "
               f"{cfg['data']['train']}")
    except (ValueError, OSError) as e:
        report(False, "ref_tokens", str(e))
    if int(max(b[0].max() for b in batches)) >= V or int(max(b[1].max() for b in batches)) >= V:
        report(False, "ref_tokens_range", f"a token >= vocab_size {V}")
        return finish()

    # (a) logits of micro-batch 0 of step 0.
    p = make_params(init)
    x0, y0 = batches[0]
    with torch.no_grad():
        ref_logits = gpt2_logits(p, x0[:B], hdr).reshape(B * T, V).numpy()
    lg = np.fromfile(os.path.join(d, "logits.bin"), dtype=np.float32)
    if lg.size != B * T * Vp:
        report(False, "ref_logits", f"logits.bin has {lg.size} floats, expected {B}*{T}*{Vp}")
    else:
        lg = lg.reshape(B * T, Vp)[:, :V].astype(np.float64)
        err = rel_to_max(lg, ref_logits)
        report(err <= 1e-5, "ref_logits", f"max_rel_err={err:.2e} (max |diff| / max |logit|, "
               f"{B}x{T}x{V})" if err <= 1e-5 else f"max_rel_err={err:.2e} > 1e-05",
               "logits", err)

    # (b) the step-0 loss over the global batch, (c) every gradient.
    loss, grads = loss_and_grads(p, x0, y0, hdr)
    with open(os.path.join(d, "loss.txt")) as f:
        theirs = float(f.read().split()[0])
    err = abs(theirs - loss) / abs(loss)
    report(err <= 1e-6, "ref_loss", f"rel_err={err:.2e} (trident {theirs:.9g}, torch {loss:.9g})"
           if err <= 1e-6 else f"rel_err={err:.2e} > 1e-06 (trident {theirs:.9g}, torch {loss:.9g})",
           "loss", err)

    ghdr, tg = read_llmc(os.path.join(d, "grads.bin"))
    if ghdr != hdr:
        report(False, "ref_grad_header", f"grads.bin header {ghdr} != init.bin header {hdr}")
        return finish()
    for name, _ in TENSORS:
        ref = grads[name].numpy()
        ours = tg[name]
        if name == "wte":
            pad = ours[V:]
            report(not np.any(pad != 0), "ref_grad_wte_padding",
                   f"(rows {V}..{Vp - 1} exactly 0)" if not np.any(pad != 0)
                   else f"{int(np.count_nonzero(pad))} non-zero gradients in padded rows "
                   f"(max |g| {float(np.max(np.abs(pad))):.3g})")
        if name in PER_LAYER:
            parts = [(f"ref_grad_h{l}.{name}", ours[l], ref[l]) for l in range(hdr["L"])]
        else:
            parts = [(f"ref_grad_{name}", ours, ref)]
        for label, o_, r_ in parts:
            err = rel_to_max(o_, r_)
            ok = err <= args.grad_tol
            report(ok, label, f"max_rel_err={err:.2e}" if ok else
                   f"max_rel_err={err:.2e} > {args.grad_tol:g} (max |ref| {float(np.max(np.abs(r_))):.3g})",
                   "grad", err)

    # (d) AdamW steps against trident's metrics.
    if args.metrics:
        steps_cfg = int(tr["steps"])
        n = min(n_steps, steps_cfg) if args.steps is None else args.steps
        lines = []
        run_rec = None
        with open(args.metrics) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                rec = json.loads(line)
                if rec.get("type") == "step":
                    lines.append(rec)
                elif rec.get("type") == "run":
                    run_rec = rec
        # The hyperparameters trident resolved must be the ones this reference uses.
        if run_rec and isinstance(run_rec.get("config"), dict):
            rc = run_rec["config"]
            diffs = []
            for sec, keys in (("optim", ("lr", "min_lr", "warmup_steps", "decay", "beta1", "beta2",
                                         "eps", "weight_decay")),
                              ("train", ("micro_batch", "global_batch", "steps", "grad_clip")),
                              ("model", ("n_layer", "n_head", "d_model", "seq_len", "vocab_size"))):
                for k in keys:
                    a, b = rc.get(sec, {}).get(k), cfg[sec][k]
                    same = a == b if isinstance(b, str) or isinstance(a, str) else \
                        a is not None and abs(float(a) - float(b)) <= 1e-12 * max(1.0, abs(float(b)))
                    if not same:
                        diffs.append(f"{sec}.{k}: trident {a!r}, reference {b!r}")
            report(not diffs, "ref_train_config", "(trident's resolved config matches)" if not diffs
                   else "; ".join(diffs))
        by_step = {int(r["step"]): r for r in lines}
        missing = [s for s in range(1, n + 1) if s not in by_step]
        if missing:
            report(False, "ref_train_metrics", f"metrics.jsonl lacks step lines {missing} "
                   "(log.every must be 1)")
            return finish()
        ref_run = adamw_run(init, batches, hdr, cfg, n)
        worst = {"loss": (0.0, 0), "grad_norm": (0.0, 0), "lr": (0.0, 0)}
        for s, (rl, rlr, rnorm, _) in enumerate(ref_run, start=1):
            r = by_step[s]
            for key, refv in (("loss", rl), ("grad_norm", rnorm), ("lr", rlr)):
                theirs = r.get(key)
                e = float("inf") if theirs is None else abs(float(theirs) - refv) / abs(refv)
                if e > worst[key][0] or worst[key][1] == 0:
                    worst[key] = (e, s)
        tol = args.loss_tol
        for key in ("loss", "grad_norm", "lr"):
            e, s = worst[key]
            seq = " ".join(f"{by_step[i][key]:.6g}/{ref_run[i - 1][{'loss': 0, 'lr': 1, 'grad_norm': 2}[key]]:.6g}"
                           for i in range(1, n + 1))
            ok = e <= tol
            report(ok, f"ref_train_{key}", f"max_rel_err={e:.2e} at step {s} over {n} steps"
                   if ok else f"max_rel_err={e:.2e} > {tol:g} at step {s}; trident/torch per step: {seq}",
                   "train_" + key, e)
        clipped = [s for s, r in enumerate(ref_run, start=1) if r[3]]
        detail = (f"(clipped at steps {clipped} of {n}; norms "
                  + " ".join(f"{r[2]:.3g}" for r in ref_run) + f", clip {tr['grad_clip']})")
        if args.require_clip:
            both = 0 < len(clipped) < n
            report(both, "ref_train_clip_engaged", detail if both else
                   "the steps must include clipped and unclipped ones: " + detail)
        else:
            print("INFO clipping " + detail)
        print("INFO losses trident/torch: " + " ".join(
            f"{by_step[i]['loss']:.6f}/{ref_run[i - 1][0]:.6f}" for i in range(1, n + 1)))
    return finish()


def finish():
    worst = {}
    for ok, name, metric, value in results:
        if metric is not None and (metric not in worst or value > worst[metric][0]):
            worst[metric] = (value, name)
    failed = [name for ok, name, _, _ in results if not ok]
    summary = ", ".join(f"{m} {v:.2e} ({n})" for m, (v, n) in worst.items())
    print(f"SUMMARY reference: {len(results) - len(failed)} passed, {len(failed)} failed; "
          f"worst errors: {summary or 'none measured'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

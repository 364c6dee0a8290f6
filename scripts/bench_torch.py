#!/usr/bin/python3
"""bench_torch.py: the PyTorch side of scripts/bench.sh. Trains a straightforward float32
nn.Module GPT-2 of a trident run file's shape (layers, heads, width, seq_len, vocabulary
padded as trident pads it, micro/global batch, steps) on the same token stream, with
torch.optim.AdamW(foreach=True), gradient clipping and trident's lr schedule, and prints
one JSON line: {"tokens_per_s_median": .., "steps_median": "3..N", "step_s": [...], ...}.

    OMP_NUM_THREADS=N OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/bench_torch.py CONFIG --threads N

No torch.compile, no fused kernels beyond what eager PyTorch does by itself. Debian's
python3-torch (1.13) runs its matmuls through the system OpenBLAS, as trident does.
"""
import argparse
import glob
import json
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

DEFAULTS = {
    "model": {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 256, "vocab_size": 256,
              "vocab_pad_to": 128},
    "train": {"micro_batch": 8, "global_batch": 32, "steps": 2000, "grad_clip": 1.0},
    "optim": {"lr": 1.0e-3, "min_lr": 1.0e-4, "warmup_steps": 100, "decay": "cosine",
              "beta1": 0.9, "beta2": 0.95, "eps": 1.0e-8, "weight_decay": 0.1},
    "data": {"train": "data/kjv_train_*.bin"},
}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attproj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, NH, C, T, V, Vp):
        super().__init__()
        self.V = V
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)
        init_weights(self, L, V)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for blk in self.blocks:
            x = blk(x, self.mask)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied LM head over Vp rows
        if logits.shape[-1] != self.V:
            logits = logits[..., :self.V]  # padded rows are never predicted
        return F.cross_entropy(logits.reshape(B * T, self.V), targets.reshape(B * T))


def lr_at(step, o, steps):
    lr, min_lr, warmup = float(o["lr"]), float(o["min_lr"]), int(o["warmup_steps"])
    if step < warmup:
        return lr * (step + 1) / warmup
    if o["decay"] == "constant" or steps - 1 <= warmup:
        return lr
    progress = min(1.0, (step - warmup) / (steps - 1 - warmup))
    coeff = 0.5 * (1 + math.cos(math.pi * progress)) if o["decay"] == "cosine" else 1 - progress
    return min_lr + coeff * (lr - min_lr)


def load_tokens(pattern):
    toks = []
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            raw = f.read()
        h = np.frombuffer(raw[:1024], dtype=np.int32)
        dt = np.uint16 if (h[0], h[1]) == (20240520, 1) else np.uint32
        toks.append(np.frombuffer(raw[1024:], dtype=dt).astype(np.int64))
    if not toks:
        sys.exit(f"bench_torch: no token shard matches {pattern}")
    return toks


def init_weights(model, L, V):
    """trident's init (DESIGN.md "Model"): biases 0, LayerNorm weights 1, N(0, 0.02), the
    residual output projections N(0, 0.02 / sqrt(2L)), padded vocabulary rows 0."""
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif ".ln" in name or name.startswith("lnf"):
            nn.init.ones_(p)
        else:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
            nn.init.normal_(p, 0.0, std)
    with torch.no_grad():
        model.wte.weight[V:].zero_()


def read_run(path):
    """A trident run file over DEFAULTS, and its shapes (L, NH, C, T, V, Vp, B, GB)."""
    cfg = {s: dict(v) for s, v in DEFAULTS.items()}
    with open(path) as f:
        for sec, vals in (yaml.safe_load(f) or {}).items():
            if isinstance(vals, dict):
                cfg.setdefault(sec, {}).update(vals)
    m, tr = cfg["model"], cfg["train"]
    L, NH, C, T, V = (int(m[k]) for k in ("n_layer", "n_head", "d_model", "seq_len", "vocab_size"))
    pad = int(m["vocab_pad_to"]) * int(cfg.get("parallel", {}).get("tp", 1) or 1)
    Vp = (V + pad - 1) // pad * pad
    return cfg, (L, NH, C, T, V, Vp, int(tr["micro_batch"]), int(tr["global_batch"]))


def adamw_groups(model, o):
    """AdamW's parameter groups: weight decay on matrices and embeddings only."""
    return [{"params": [p for p in model.parameters() if p.dim() == 2],
             "weight_decay": float(o["weight_decay"])},
            {"params": [p for p in model.parameters() if p.dim() != 2], "weight_decay": 0.0}]


def batches(pattern, T, B):
    """batch(first): B rows of T + 1 tokens from global sample `first` on, in DESIGN.md's
    stream order (sample k of a shard is tokens [k*T, k*T + T + 1)), as (inputs, targets)."""
    shards = load_tokens(pattern)
    samples = [(s, k) for s in range(len(shards)) for k in range((shards[s].size - 1) // T)]

    def batch(first):
        rows = [torch.from_numpy(shards[s][k * T:k * T + T + 1])
                for s, k in (samples[(first + i) % len(samples)] for i in range(B))]
        xy = torch.stack(rows)
        return xy[:, :-1], xy[:, 1:]
    return batch


def train_steps(model, micro_loss, opt, o, clip, steps, n_micro, batch, B, GB, sync=None):
    """`steps` optimizer steps of n_micro micro-batches each (micro_loss(x, y): the loss of
    one), with clipping and trident's lr schedule; each step timed (after sync(), when given,
    waits for the device). Returns the step times and the losses."""
    step_s, losses = [], []
    for step in range(steps):
        if sync:
            sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for micro in range(n_micro):
            x, y = batch(step * GB + micro * B)
            loss = micro_loss(x, y) / n_micro
            loss.backward()
            loss_sum = loss_sum + loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip) if clip > 0 else None
        for g in opt.param_groups:
            g["lr"] = lr_at(step, o, steps)
        opt.step()
        if sync:
            sync()
        step_s.append(time.perf_counter() - t0)
        losses.append(float(loss_sum))
        print(f"torch step {step + 1}/{steps}: loss {losses[-1]:.4f} "
              f"norm {float(norm) if norm is not None else float('nan'):.3f} "
              f"{step_s[-1] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    return step_s, losses


def summary(step_s, losses, skip, tokens_per_step, **extra):
    """The JSON line's fields: tokens/s as the median (and best) of the steps after `skip`."""
    timed = step_s[skip:] or step_s
    med = statistics.median(timed)
    return {"tokens_per_s_median": tokens_per_step / med, "step_s_median": med,
            "tokens_per_s_best": tokens_per_step / min(timed),
            "steps_median": f"{skip + 1}..{len(step_s)}", **extra,
            "first_loss": losses[0], "last_loss": losses[-1]}


def parse_args():
    """The command line of a peer script (this one, bench_hf_llama.py)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="default: the config's train.steps")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps left out of the median")
    return ap.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)

    cfg, (L, NH, C, T, V, Vp, B, GB) = read_run(args.config)
    tr, o = cfg["train"], cfg["optim"]
    steps = args.steps or int(tr["steps"])
    n_micro = GB // B

    model = GPT2(L, NH, C, T, V, Vp)
    opt = torch.optim.AdamW(adamw_groups(model, o), lr=float(o["lr"]),
                            betas=(float(o["beta1"]), float(o["beta2"])), eps=float(o["eps"]),
                            foreach=True)
    clip = float(tr["grad_clip"])
    batch = batches(cfg["data"]["train"], T, B)

    step_s, losses = train_steps(model, lambda x, y: model(x, y), opt, o, clip, steps, n_micro,
                                 batch, B, GB)
    print(json.dumps(summary(step_s, losses, args.skip, GB * T, threads=args.threads,
                             torch=torch.__version__,
                             n_params=sum(p.numel() for p in model.parameters()))))

if __name__ == "__main__":
    main()

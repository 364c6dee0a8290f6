#!/usr/bin/env python3
"""bench_gpu_torch.py: the PyTorch side of scripts/bench-gpu.sh. Trains a GPT-2 of a trident
run file's shape (layers, heads, width, seq_len, vocabulary padded as trident pads it,
micro/global batch, steps) on the same token stream, on one GPU, the way a PyTorch user
would make it fast: bf16 autocast, torch.compile, F.scaled_dot_product_attention (flash
attention), fused AdamW, gradient clipping, trident's lr schedule. Prints one JSON line:
{"tokens_per_s_median": .., "step_s_median": .., "peak_mem_bytes": .., ...}.

    python3 scripts/bench_gpu_torch.py CONFIG [--steps N] [--no-compile]

The LM head's cross-entropy runs over all Vp (padded) columns, as nanoGPT's does: padded
rows are never targets, and the FLOPs are those trident spends on its padded head.
"""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

# What the CPU benchmark's PyTorch side has too (scripts/ is on sys.path when run).
from bench_torch import adamw_groups, batches, init_weights, read_run, summary, train_steps


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)  # q heads, then k heads, then v heads (trident's layout)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.NH, C // self.NH).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attproj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, NH, C, T, V, Vp):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        init_weights(self, L, V)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied LM head over Vp rows
        return F.cross_entropy(logits.view(B * T, -1).float(), targets.reshape(B * T))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=None, help="default: the config's train.steps")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps left out of the median")
    ap.add_argument("--no-compile", action="store_true", help="eager mode (no torch.compile)")
    args = ap.parse_args()
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")

    cfg, (L, NH, C, T, V, Vp, B, GB) = read_run(args.config)
    tr, o = cfg["train"], cfg["optim"]
    steps = args.steps or int(tr["steps"])
    n_micro = GB // B

    model = GPT2(L, NH, C, T, V, Vp).to(dev)
    opt = torch.optim.AdamW(adamw_groups(model, o), lr=float(o["lr"]),
                            betas=(float(o["beta1"]), float(o["beta2"])), eps=float(o["eps"]),
                            fused=True)
    clip = float(tr["grad_clip"])
    step_fn = model if args.no_compile else torch.compile(model)
    host_batch = batches(cfg["data"]["train"], T, B)

    def batch(first):
        x, y = host_batch(first)
        return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

    def micro_loss(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return step_fn(x, y)

    torch.cuda.reset_peak_memory_stats()
    step_s, losses = train_steps(model, micro_loss, opt, o, clip, steps, n_micro, batch, B, GB,
                                 sync=torch.cuda.synchronize)
    print(json.dumps(summary(step_s, losses, args.skip, GB * T, compile=not args.no_compile,
                             torch=torch.__version__, device=torch.cuda.get_device_name(),
                             n_params=sum(p.numel() for p in model.parameters()),
                             peak_mem_bytes=torch.cuda.max_memory_allocated())))

if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench_hf_llama.py: the peer of scripts/bench.sh for `model.arch: llama` configs. Trains
Hugging Face transformers' LlamaForCausalLM (float32, eager attention, as transformers 4.40.2
runs it on Debian's torch 1.13) of a trident run file's shape (layers, heads, kv heads, width,
ffn_hidden, rope_theta, norm_eps, tied or untied head, seq_len, vocabulary padded as trident
pads it) on the same token stream, with torch.optim.AdamW(foreach=True), gradient clipping
and trident's lr schedule (bench_torch.py's loop), and prints one JSON line as bench_torch.py
does. Runs in the venv build/venv-hf (scripts/venv.sh hf transformers==4.40.2 ...):

    OMP_NUM_THREADS=N build/venv-hf/bin/python scripts/bench_hf_llama.py CONFIG --threads N
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import (adamw_groups, batches, parse_args, read_run, summary,  # noqa: E402
                         train_steps)


def llama_shape(m, C):
    """The resolved Llama keys of a run file's model section (README "Config reference")."""
    nkv = int(m.get("n_kv_head", 0) or 0) or int(m["n_head"])
    ffn = int(m.get("ffn_hidden", 0) or 0)
    if ffn == 0:  # the Llama rule: floor(8C/3) rounded up to a multiple of ffn_multiple_of
        mult = int(m.get("ffn_multiple_of", 256))
        ffn = (8 * C // 3 + mult - 1) // mult * mult
    tie = m.get("tie_embeddings", -1)
    tie = False if tie in (-1, None) else bool(tie)
    return nkv, ffn, tie, float(m.get("rope_theta", 10000.0)), float(m.get("norm_eps", 1e-5))


def main():
    args = parse_args()
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    cfg, (L, NH, C, T, V, Vp, B, GB) = read_run(args.config)
    nkv, ffn, tie, theta, eps = llama_shape(cfg["model"], C)
    tr, o = cfg["train"], cfg["optim"]
    steps = args.steps or int(tr["steps"])
    hc = LlamaConfig(vocab_size=Vp, hidden_size=C, intermediate_size=ffn, num_hidden_layers=L,
                     num_attention_heads=NH, num_key_value_heads=nkv, max_position_embeddings=T,
                     rms_norm_eps=eps, rope_theta=theta, tie_word_embeddings=tie,
                     attention_bias=False, hidden_act="silu", initializer_range=0.02)
    model = LlamaForCausalLM(hc).float().train()

    def micro_loss(x, y):  # the loss over the real vocabulary (trident never predicts padding)
        logits = model(input_ids=x).logits[..., :V]
        return F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))

    opt = torch.optim.AdamW(adamw_groups(model, o), lr=float(o["lr"]),
                            betas=(float(o["beta1"]), float(o["beta2"])), eps=float(o["eps"]),
                            foreach=True)
    batch = batches(cfg["data"]["train"], T, B)
    step_s, losses = train_steps(model, micro_loss, opt, o, float(tr["grad_clip"]), steps,
                                 GB // B, batch, B, GB)
    print(json.dumps(summary(step_s, losses, args.skip, GB * T, threads=args.threads,
                             torch=torch.__version__, transformers=transformers.__version__,
                             n_params=sum(p.numel() for p in model.parameters()))))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Hugging Face transformers' LlamaForCausalLM as the reference of trident's Llama import and
export (tests/test_hf_llama.sh; run in build/venv-hf: transformers 4.40.2 over Debian's torch).

  hf_llama.py make DIR    seeded random LlamaForCausalLMs, save_pretrained into
                          DIR/fp32   L 2, C 64, 4 heads sharing 2 kv heads, F 96, V 250, untied
                          DIR/bf16   the same model in bfloat16
                          DIR/shard  the same model in fp32, 40 KB shards with the index
                          DIR/tied   tied head, rope_theta 5e5, rms_norm_eps 1e-6 (another seed)
                          DIR/byte   as fp32 with a byte-level vocabulary (V 256), wider init
                          (norm weights perturbed from ones, so a norm read wrong shows)
  hf_llama.py make-smol DIR   a random SmolLM-135M-shaped model (bf16) in DIR (make test-full)
  hf_llama.py export CKPT_STEP_DIR DIR [--name NAME]
      DIR: `trident export CKPT --format hf`. The checkpoint is read here from its manifest
      and rank files (ref_llama_hf.read_checkpoint, not trident's code) and mapped by the
      names of README "Llama"; every tensor of DIR must equal it bit for bit, and
      from_pretrained(DIR) must load with no missing or unexpected weights.
  hf_llama.py check|logits ...  as hf_gpt2.py (from_pretrained picks the class).
Commands may be chained with "+" (one process). Prints PASS/FAIL lines with the measured
errors; exit 1 on a failure."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import hf_gpt2  # noqa: E402  (check, logits, report)

TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, vocab_size=250, max_position_embeddings=64,
            bos_token_id=0, eos_token_id=0, attention_bias=False, hidden_act="silu")


def save(cfg, seed, d, dtype=torch.float32, shard=False):
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():  # RMSNorm weights start at ones: make them differ
        for n, p in m.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn_like(p))
    m = m.to(dtype)  # ref_gpt2 (through hf_gpt2) makes float64 the default
    m.save_pretrained(d, safe_serialization=True, max_shard_size="40KB" if shard else "5GB")


def make(d):
    from transformers import LlamaConfig
    base = LlamaConfig(**TINY, tie_word_embeddings=False, rms_norm_eps=1e-5, rope_theta=10000.0)
    save(base, 1234, os.path.join(d, "fp32"))
    save(base, 1234, os.path.join(d, "bf16"), torch.bfloat16)
    save(base, 1234, os.path.join(d, "shard"), shard=True)
    tied = LlamaConfig(**TINY, tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=5e5)
    save(tied, 4321, os.path.join(d, "tied"))
    # byte-level (trident sample takes the prompt's bytes as ids), wider weights so that greedy
    # decoding follows the prompt
    byte = LlamaConfig(**{**TINY, "vocab_size": 256}, tie_word_embeddings=False,
                       rms_norm_eps=1e-5, rope_theta=10000.0, initializer_range=0.3)
    save(byte, 99, os.path.join(d, "byte"))


def make_smol(d):
    from transformers import LlamaConfig
    cfg = LlamaConfig(num_hidden_layers=30, hidden_size=576, num_attention_heads=9,
                      num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                      max_position_embeddings=2048, tie_word_embeddings=True,
                      rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=0, eos_token_id=0)
    save(cfg, 135, d, torch.bfloat16)


def export(ckpt, d, name):
    import ref_llama_hf
    from safetensors.numpy import load_file
    cfg, t = ref_llama_hf.read_checkpoint(ckpt)
    mc = cfg["model"]
    V, C, NH, NKV, F = (mc[k] for k in ("vocab_size", "d_model", "n_head", "n_kv_head",
                                         "ffn_hidden"))
    HS = C // NH
    want = {"model.embed_tokens.weight": t["wte"][:V], "model.norm.weight": t["lnfw"][:, 0]}
    if not mc["tie_embeddings"]:
        want["lm_head.weight"] = t["lm_head"][:V]
    for l in range(mc["n_layer"]):
        p, h = "model.layers.%d." % l, "h%d." % l
        qkv, fc = t[h + "qkvw"], t[h + "fcw"]
        want[p + "input_layernorm.weight"] = t[h + "ln1w"][:, 0]
        want[p + "self_attn.q_proj.weight"] = qkv[:NH * HS]
        want[p + "self_attn.k_proj.weight"] = qkv[NH * HS:(NH + NKV) * HS]
        want[p + "self_attn.v_proj.weight"] = qkv[(NH + NKV) * HS:]
        want[p + "self_attn.o_proj.weight"] = t[h + "attprojw"]
        want[p + "post_attention_layernorm.weight"] = t[h + "ln2w"][:, 0]
        want[p + "mlp.gate_proj.weight"] = fc[:F]
        want[p + "mlp.up_proj.weight"] = fc[F:]
        want[p + "mlp.down_proj.weight"] = t[h + "fcprojw"]
    files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    got = {}
    for f in files:
        got.update(load_file(os.path.join(d, f)))
    wrong = [k for k in want if k not in got or got[k].shape != want[k].shape or
             not np.array_equal(got[k], want[k])]
    extra = sorted(set(got) - set(want))
    hf_gpt2.report(not wrong and not extra, name + "_tensors",
                   "%d tensors in %d file(s) equal the checkpoint's (read from its manifest)%s%s"
                   % (len(want), len(files), " wrong: %s" % wrong[:4] if wrong else "",
                      " extra: %s" % extra[:4] if extra else ""))
    from transformers import AutoModelForCausalLM
    _, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k != "error_msgs" or k == "error_msgs" and v}
    hf_gpt2.report(not bad, name + "_from_pretrained",
                   "loads with nothing missing or unexpected %s" % (bad or ""))


def main():
    cmd, rest = [], []
    for x in sys.argv[1:] + ["+"]:
        if x != "+":
            cmd.append(x)
            continue
        if not cmd:
            continue
        if cmd[0] == "make":
            make(cmd[1])
        elif cmd[0] == "make-smol":
            make_smol(cmd[1])
        elif cmd[0] == "export":
            name = cmd[cmd.index("--name") + 1] if "--name" in cmd else "hf_llama_export"
            export(cmd[1], cmd[2], name)
        else:
            hf_gpt2.run(cmd)
        cmd = []
    return 1 if hf_gpt2.fails else 0


if __name__ == "__main__":
    sys.exit(main())

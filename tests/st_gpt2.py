#!/usr/bin/env python3
"""Loads a safetensors file written by `trident export --format safetensors` the way Hugging
Face's GPT2LMHeadModel would (names transformer.*, Conv1D weights stored (in, out), the
real vocabulary only), runs GPT-2 from it in float64 with Conv1D's y = x @ W + b, and
compares the logits with those of the llm.c file of the same model computed by
tests/ref_gpt2.py's independent GPT-2, and (with REF_DUMP_DIR, written by build/tests/ref_dump
for the same model) with trident's own logits of its first micro-batch. Prints PASS/FAIL
lines; exit 1 on a failure.
Usage: st_gpt2.py MODEL.safetensors MODEL.bin [REF_DUMP_DIR MICRO_BATCH]"""
import json, math, struct, sys
import numpy as np
import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
import ref_gpt2  # noqa: E402


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=np.float32).reshape(info["shape"]).astype(np.float64)
    return out


def hf_logits(t, idx, L, NH):
    T = lambda name: torch.tensor(t[name])
    B, S = idx.shape
    C = t["transformer.wte.weight"].shape[1]
    hs = C // NH
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), T(p + ".weight"), T(p + ".bias"), 1e-5)
    conv1d = lambda x, p: x @ T(p + ".weight") + T(p + ".bias")  # HF Conv1D: (in, out)
    x = T("transformer.wte.weight")[idx] + T("transformer.wpe.weight")[:S]
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    for l in range(L):
        h = f"transformer.h.{l}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=-1)
        q, k, v = (z.view(B, S, NH, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        x = x + conv1d((att @ v).transpose(1, 2).reshape(B, S, C), h + "attn.c_proj")
        m = conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")
        m = 0.5 * m * (1 + torch.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m ** 3)))
        x = x + conv1d(m, h + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    return x @ T("transformer.wte.weight").t()  # lm_head tied to wte, as GPT2LMHeadModel does


def main():
    st_path, llmc_path = sys.argv[1], sys.argv[2]
    hdr, tensors = ref_gpt2.read_llmc(llmc_path)
    t = read_safetensors(st_path)
    L, NH, C, V, maxT = hdr["L"], hdr["NH"], hdr["C"], hdr["V"], hdr["maxT"]
    want = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [maxT, C],
            "transformer.ln_f.weight": [C], "transformer.h.0.attn.c_attn.weight": [C, 3 * C],
            "transformer.h.0.attn.c_proj.weight": [C, C], "transformer.h.0.mlp.c_fc.weight": [C, 4 * C],
            "transformer.h.0.mlp.c_proj.weight": [4 * C, C], "transformer.h.0.mlp.c_fc.bias": [4 * C]}
    bad = [f"{k} {list(t[k].shape) if k in t else None} != {v}" for k, v in want.items()
           if k not in t or list(t[k].shape) != v]
    n_expected = 2 + 2 + 12 * L
    ok = not bad and len(t) == n_expected
    print(("PASS" if ok else "FAIL") + f" safetensors_names_shapes ({len(t)} tensors)" + ("" if ok else ": " + "; ".join(bad)))
    idx = torch.tensor(np.arange(2 * min(16, maxT)).reshape(2, -1) * 7 % V)
    ours = hf_logits(t, idx, L, NH)
    ref = ref_gpt2.gpt2_logits({k: torch.tensor(v) for k, v in tensors.items()}, idx, hdr)
    err = float((ours - ref).abs().max() / ref.abs().max())
    ok2 = err <= 1e-6
    print(("PASS" if ok2 else "FAIL") + f" safetensors_logits max_rel_err={err:.2e} (HF-layout GPT-2 vs the llm.c file)")
    ok3 = True
    if len(sys.argv) > 4:  # trident's logits of micro-batch 0 of step 0 (ref_dump)
        d, B = sys.argv[3], int(sys.argv[4])
        idx = torch.tensor(np.fromfile(d + "/tokens.bin", dtype=np.int32)[:B * maxT].reshape(B, maxT).astype(np.int64))
        trident = np.fromfile(d + "/logits.bin", dtype=np.float32).reshape(B, maxT, -1)[:, :, :V]
        ours = hf_logits(t, idx, L, NH).numpy()
        err3 = float(np.abs(ours - trident).max() / np.abs(ours).max())
        ok3 = err3 <= 1e-5
        print(("PASS" if ok3 else "FAIL") + f" safetensors_logits_vs_trident max_rel_err={err3:.2e} ({B}x{maxT} tokens)")
    sys.exit(0 if ok and ok2 and ok3 else 1)


if __name__ == "__main__":
    main()

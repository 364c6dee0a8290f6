#!/usr/bin/env python3
"""Hugging Face transformers as the reference of trident's Hugging Face import and export
(tests/test_hf.sh; run in build/venv-hf: transformers 4.40.2 over Debian's torch).

  hf_gpt2.py make DIR     a seeded random GPT2LMHeadModel, save_pretrained into DIR/fp32,
                          DIR/bf16 (bfloat16) and DIR/shard (fp32 in 40 KB shards); DIR/byte
                          (V 256, wider init) and DIR/reversed_tokenizer.json for the sample
  hf_gpt2.py generate DIR OUT PROMPT N [--reverse]  trident sample's greedy output (OUT)
                          against transformers' generate (generate() below)
  hf_gpt2.py same A B     every tensor of HF directory B equals A's
  hf_gpt2.py check DIR DUMP RUN CONFIG [--steps N] [--name NAME] [--tol T]
      DUMP: build/tests/ref_dump's output for the run's config with model.init_from=DIR;
      RUN: a trident run directory (metrics.jsonl) of CONFIG from DIR. Compares trident's
      logits of micro-batch 0 (DUMP/logits.bin) with HF's on the same tokens (largest error
      over the largest |logit|), its step-0 loss, and N steps of its training against a plain
      PyTorch AdamW loop over the HF model (float64) on the same tokens, lr schedule, betas,
      eps, weight decay on matrices and embeddings only, and clipping (step 0 within T, 1e-5
      by default; every step within 1e-4).
  hf_gpt2.py logits DIR DUMP CONFIG [--name NAME]  from_pretrained(DIR)'s logits against DUMP's
  hf_gpt2.py tokenizer DIR TEXT   AutoTokenizer.from_pretrained(DIR) encodes TEXT as tokenizers
Commands may be chained with "+" (one process).
Prints PASS/FAIL lines with the measured errors; exit 1 on a failure."""
import json, math, os, sys
import numpy as np
import torch
import yaml

sys.path.insert(0, os.path.dirname(__file__))
import ref_gpt2  # noqa: E402  (lr_at: trident's schedule)

fails = 0


def report(ok, name, detail):
    global fails
    print(("PASS " if ok else "FAIL ") + name + (" " if ok else ": ") + detail)
    fails += 0 if ok else 1


def make(d, bf16, shard, byte=False):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(1234)
    # byte: a byte-level vocabulary (trident sample encodes a prompt as its bytes), weights
    # initialised wider so that greedy decoding follows the prompt instead of one token
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64,
                     vocab_size=256 if byte else 250, initializer_range=0.3 if byte else 0.02,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                     eos_token_id=0)
    m = GPT2LMHeadModel(cfg)
    with torch.no_grad():  # non-zero biases and LayerNorm affine, so every tensor is checked
        for n, p in m.named_parameters():
            if n.endswith("bias") or ".ln_" in n:
                p.add_(0.02 * torch.randn_like(p))
    m = m.to(torch.bfloat16 if bf16 else torch.float32)  # ref_gpt2 makes float64 the default
    m.save_pretrained(d, safe_serialization=True, max_shard_size="40KB" if shard else "5GB")


def load(d):
    """from_pretrained(d) in float64: the class is config.json's (GPT2LMHeadModel or
    LlamaForCausalLM; tests/hf_llama.py reuses check and logits)."""
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).double().eval()


def dump_tokens(dump, cfg):
    T, GB = cfg["model"]["seq_len"], cfg["train"]["global_batch"]
    raw = np.fromfile(os.path.join(dump, "tokens.bin"), dtype=np.int32)
    steps = raw.size // (2 * GB * T)
    raw = raw.reshape(steps, 2, GB, T)
    return [(torch.tensor(s[0], dtype=torch.long), torch.tensor(s[1], dtype=torch.long))
            for s in raw]


def check_logits(model, dump, cfg, name):
    B, T = cfg["train"]["micro_batch"], cfg["model"]["seq_len"]
    V = model.config.vocab_size
    ours = np.fromfile(os.path.join(dump, "logits.bin"), dtype=np.float32).reshape(B * T, -1)
    x, _ = dump_tokens(dump, cfg)[0]
    with torch.no_grad():
        ref = model(x[:B]).logits.reshape(B * T, V).double().numpy()
    err = np.abs(ours[:, :V] - ref).max() / np.abs(ref).max()
    report(err <= 1e-5, name + "_logits", "max|dlogit|/max|logit| %.2e" % err)


def reversed_tokenizer(path):
    """A byte-level BPE tokenizer.json without merges whose id of byte b is 255 - b: a sample
    that used it differs from one that took the prompt's bytes as ids."""
    from tokenize_fixture import bytes_to_unicode
    byte_char = bytes_to_unicode()
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": "", "end_of_word_suffix": "",
                     "fuse_unk": False, "byte_fallback": False,
                     "vocab": {byte_char[b]: 255 - b for b in range(256)}, "merges": []}}
    json.dump(tok, open(path, "w"))


def generate(d, out, prompt, n, name, reverse):
    """`trident sample D --prompt PROMPT --temperature 0 --tokens N` (its stdout in OUT) against
    transformers' greedy generate from the prompt's ids: a byte-level model, the prompt's
    bytes (reverse: the ids of reversed_tokenizer, 255 - byte) and no end-of-text token."""
    model = load(d)
    ids = [255 - b if reverse else b for b in prompt.encode()]
    with torch.no_grad():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                             pad_token_id=0)[0].tolist()[len(ids):]
        # how near the closest second choice came along the way: what fp32 rounding could flip
        logits = model(torch.tensor([ids + ref[:-1]])).logits[0, len(ids) - 1:]
        top = logits.topk(2, dim=-1).values
        margin = float(((top[:, 0] - top[:, 1]) / logits.abs().max()).min())
    text = open(out, "rb").read() if os.path.exists(out) else b""
    head = prompt.encode()
    got = list(text[len(head):len(head) + n])
    ours = [255 - b if reverse else b for b in got]
    ok = text.startswith(head) and ours == ref and len(set(ref)) > 2
    report(ok, name, "%d greedy tokens as transformers' generate (%d distinct; smallest "
           "top-2 margin %.1e of the largest logit)%s" % (n, len(set(ref)), margin,
                                                         "" if ok else ": ours %s, HF %s" %
                                                         (ours, ref)))


def same_tensors(a, b, name):
    """Every tensor of HF directory b equals a's (names, shapes, values; fp32)."""
    def read(d):
        from safetensors.numpy import load_file
        idx = os.path.join(d, "model.safetensors.index.json")
        files = (sorted(set(json.load(open(idx))["weight_map"].values()))
                 if os.path.exists(idx) else ["model.safetensors"])
        t = {}
        for f in files:
            t.update(load_file(os.path.join(d, f)))
        return t
    try:
        ta, tb = read(a), read(b)
    except Exception as e:  # no export to compare: a FAIL line, and the next command runs
        report(False, name, "cannot read %s or %s: %s" % (a, b, e))
        return
    bad = sorted(k for k in set(ta) | set(tb)
                 if k not in ta or k not in tb or ta[k].shape != tb[k].shape or
                 not np.array_equal(ta[k].astype(np.float32), tb[k].astype(np.float32)))
    cfg_a, cfg_b = (json.load(open(os.path.join(x, "config.json"))) for x in (a, b))
    keys = [k for k in ("n_positions", "max_position_embeddings", "vocab_size", "bos_token_id",
                        "eos_token_id", "tie_word_embeddings") if k in cfg_a]
    differ = [k for k in keys if cfg_a.get(k) != cfg_b.get(k)]
    report(not bad and not differ and ta, name,
           "%d tensors equal bit for bit, config.json keeps %s%s" %
           (len(ta), ", ".join(keys), "" if not bad and not differ else
            ": differ %s %s" % (bad[:5], differ)))


def set_lr(opt, lr):
    for g in opt.param_groups:
        g["lr"] = lr


def check(d, dump, run, cfg_path, steps, name, tol):
    cfg = yaml.safe_load(open(cfg_path))
    model = load(d)
    check_logits(model, dump, cfg, name)
    ours = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    ours = [l["loss"] for l in ours if l.get("type") == "step"]
    batches = dump_tokens(dump, cfg)
    B, GB = cfg["train"]["micro_batch"], cfg["train"]["global_batch"]
    o, clip = cfg["optim"], float(cfg["train"]["grad_clip"])
    o = {**o, "lr": float(o["lr"]), "min_lr": float(o["min_lr"])}
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(o["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(float(o["beta1"]), float(o["beta2"])),
                            eps=float(o["eps"]))
    params = decay + no_decay
    worst, first = 0.0, None
    for step in range(min(steps, len(ours), len(batches))):
        x, y = batches[step]
        opt.zero_grad()
        loss = 0.0
        for mb in range(GB // B):
            logits = model(x[mb * B:(mb + 1) * B]).logits
            l = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                  y[mb * B:(mb + 1) * B].reshape(-1))
            (l / (GB // B)).backward()
            loss += l.item() / (GB // B)
        norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params))
        if clip > 0 and norm > clip:
            for p in params:
                p.grad.mul_(clip / norm)
        set_lr(opt, ref_gpt2.lr_at(step, o, int(cfg["train"]["steps"])))
        opt.step()
        rel = abs(ours[step] - loss) / abs(loss)
        first = rel if first is None else first
        worst = max(worst, rel)
    report(first is not None and first <= tol, name + "_loss0",
           "step-0 loss relative error %.2e" % (first or 0))
    if steps > 1:
        report(first is not None and worst <= 1e-4, name + "_adamw%d" % steps,
               "largest relative loss error over %d AdamW steps %.2e" % (steps, worst))


def tokenizer(d, text):
    from transformers import AutoTokenizer
    from tokenizers import Tokenizer
    ours = AutoTokenizer.from_pretrained(d).encode(text)
    ref = Tokenizer.from_file(os.path.join(d, "tokenizer.json")).encode(text).ids
    report(ours == ref and len(ours) > 0, "hf_export_tokenizer",
           "AutoTokenizer loads the exported directory: %d ids as tokenizers'" % len(ours))


def run(a):
    def val(f, d):
        if f not in a:
            return d
        i = a.index(f)
        v = a[i + 1]
        del a[i:i + 2]
        return v
    name, steps, tol = val("--name", "hf"), int(val("--steps", "10")), float(val("--tol", "1e-5"))
    if a[0] == "make":
        for sub, bf16, shard in (("fp32", 0, 0), ("bf16", 1, 0), ("shard", 0, 1)):
            make(os.path.join(a[1], sub), bf16, shard)
        make(os.path.join(a[1], "byte"), 0, 0, byte=True)
        reversed_tokenizer(os.path.join(a[1], "reversed_tokenizer.json"))
    elif a[0] == "generate":
        reverse = "--reverse" in a
        a = [x for x in a if x != "--reverse"]
        generate(a[1], a[2], a[3], int(a[4]), name, reverse)
    elif a[0] == "same":
        same_tensors(a[1], a[2], name)
    elif a[0] == "check":
        check(a[1], a[2], a[3], a[4], steps, name, tol)
    elif a[0] == "logits":
        check_logits(load(a[1]), a[2], yaml.safe_load(open(a[3])), name)
    elif a[0] == "tokenizer":
        tokenizer(a[1], a[2])


def main():
    # Commands separated by "+": one process (transformers takes seconds to import).
    cmd = []
    for x in sys.argv[1:] + ["+"]:
        if x != "+":
            cmd.append(x)
        elif cmd:
            run(cmd)
            cmd = []
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

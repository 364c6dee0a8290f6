"""ref_llama_hf.py: trident's Llama against Hugging Face transformers' LlamaForCausalLM.

    build/venv-hf/bin/python tests/ref_llama_hf.py CKPT_STEP_DIR METRICS.jsonl STEP [--tol-loss R]
        [--tol-norm R]

CKPT_STEP_DIR is a checkpoint of a one-process llama run with data.shuffle false, read here
directly from its manifest.yaml and rank_00000.bin (DESIGN.md "Checkpoint directory"), not
through trident's code. Its tensors are loaded into LlamaForCausalLM (float64) by the Hugging
Face names of the contract (README "Llama"); the loss and the gradient norm of the global batch
of step STEP (the plain data order of DESIGN.md "Files") are compared with that step's line of
METRICS (trident resumed from the checkpoint). Prints PASS/FAIL lines with the measured
relative errors; exits 1 on a failure.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM


def read_checkpoint(d):
    with open(os.path.join(d, 'manifest.yaml')) as f:
        man = yaml.safe_load(f)
    cfg = man['config']
    shapes = {t['name']: t['shape'] for t in man['tensors']}
    out = {n: np.zeros(s, dtype=np.float32) for n, s in shapes.items()}
    for r in man['regions']:
        if r['kind'] != 'param':
            continue
        assert r['dtype'] == 'f32', r
        (r0, c0), (nr, nc) = r['offset'], r['extent']
        with open(os.path.join(d, r['file']), 'rb') as f:
            f.seek(r['byte_offset'])
            block = np.frombuffer(f.read(nr * nc * 4), dtype=np.float32).reshape(nr, nc)
        out[r['tensor']][r0:r0 + nr, c0:c0 + nc] = block
    return cfg, out


def batch_tokens(cfg, step):
    """Inputs and targets (global_batch, T) of step `step` (1-based) in the plain order."""
    import glob
    T, gb = cfg['model']['seq_len'], cfg['train']['global_batch']
    streams = []
    for path in sorted(glob.glob(cfg['data']['train'])):
        raw = open(path, 'rb').read()
        hdr = np.frombuffer(raw[:1024], dtype=np.int32)
        dt = np.uint16 if hdr[0] == 20240520 else np.uint32
        toks = np.frombuffer(raw[1024:], dtype=dt)[:hdr[2]].astype(np.int64)
        streams.append(toks)
    samples = [(s, k) for s in streams for k in range((len(s) - 1) // T)]
    first = (step - 1) * gb
    rows = [samples[(first + i) % len(samples)] for i in range(gb)]
    x = np.stack([s[k * T:k * T + T] for s, k in rows])
    y = np.stack([s[k * T + 1:k * T + T + 1] for s, k in rows])
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('ckpt')
    ap.add_argument('metrics')
    ap.add_argument('step', type=int)
    ap.add_argument('--tol-loss', type=float, default=1e-5)
    ap.add_argument('--tol-norm', type=float, default=1e-4)
    a = ap.parse_args()
    cfg, t = read_checkpoint(a.ckpt)
    mc = cfg['model']
    V, C, NH = mc['vocab_size'], mc['d_model'], mc['n_head']
    NKV, F, L = mc['n_kv_head'], mc['ffn_hidden'], mc['n_layer']
    hc = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                     num_attention_heads=NH, num_key_value_heads=NKV,
                     max_position_embeddings=mc['seq_len'], rms_norm_eps=mc['norm_eps'],
                     rope_theta=mc['rope_theta'], tie_word_embeddings=bool(mc['tie_embeddings']),
                     attention_bias=False, hidden_act='silu')
    hc._attn_implementation = 'eager'
    model = LlamaForCausalLM(hc).double()
    HS = C // NH
    sd = {'model.embed_tokens.weight': t['wte'][:V], 'model.norm.weight': t['lnfw'][:, 0]}
    if not mc['tie_embeddings']:
        sd['lm_head.weight'] = t['lm_head'][:V]
    for l in range(L):
        p, h = 'model.layers.%d.' % l, 'h%d.' % l
        qkv, fc = t[h + 'qkvw'], t[h + 'fcw']
        sd[p + 'input_layernorm.weight'] = t[h + 'ln1w'][:, 0]
        sd[p + 'self_attn.q_proj.weight'] = qkv[:NH * HS]
        sd[p + 'self_attn.k_proj.weight'] = qkv[NH * HS:(NH + NKV) * HS]
        sd[p + 'self_attn.v_proj.weight'] = qkv[(NH + NKV) * HS:]
        sd[p + 'self_attn.o_proj.weight'] = t[h + 'attprojw']
        sd[p + 'post_attention_layernorm.weight'] = t[h + 'ln2w'][:, 0]
        sd[p + 'mlp.gate_proj.weight'] = fc[:F]
        sd[p + 'mlp.up_proj.weight'] = fc[F:]
        sd[p + 'mlp.down_proj.weight'] = t[h + 'fcprojw']
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)).double() for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith('rotary_emb.inv_freq') and
               not (k == 'lm_head.weight' and mc['tie_embeddings'])]  # tied: embed_tokens'
    if missing or unexpected:
        print('FAIL hf load: missing %s, unexpected %s' % (missing, unexpected))
        return 1
    x, y = batch_tokens(cfg, a.step)
    logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters()
                          if p.grad is not None)).item()
    line = None
    for s in open(a.metrics):
        j = json.loads(s)
        if j.get('type') == 'step' and j['step'] == a.step:
            line = j
    if line is None:
        print('FAIL hf reference: no step %d in %s' % (a.step, a.metrics))
        return 1
    el = abs(line['loss'] - loss.item()) / abs(loss.item())
    en = abs(line['grad_norm'] - norm) / abs(norm)
    tag = 'L%d C%d NH%d NKV%d F%d %s' % (L, C, NH, NKV, F,
                                          'tied' if mc['tie_embeddings'] else 'untied')
    ok = el <= a.tol_loss and en <= a.tol_norm
    print('%s llama vs transformers LlamaForCausalLM (%s), step %d: loss %.8f vs %.8f '
          '(rel %.2e <= %.0e), grad_norm %.8f vs %.8f (rel %.2e <= %.0e)' %
          ('PASS' if ok else 'FAIL', tag, a.step, line['loss'], loss.item(), el, a.tol_loss,
           line['grad_norm'], norm, en, a.tol_norm))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())

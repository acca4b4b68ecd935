"""The reference of a KV plan (SPEC §18) for tests/test_retrieval.sh: a
float64 Llama forward (HF semantics, written here from gen_models' pieces,
not headscope's code) in which the query heads of every kv head the plan
does not list see only keys s < sink or t - window < s <= t.

usage: kv_plan_reference.py eval DIR SHARD PLAN B T BATCHES   (prints the loss)
       kv_plan_reference.py generate DIR PLAN ID,ID,... MAX_NEW  (prints the new ids)
       kv_plan_reference.py bytes DIR PLAN T                    (prints cache bytes, float32)
PLAN "-" is no plan.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                                "oracle"))
import gen_models as G  # noqa: E402


def load(d, plan_path):
    c = json.load(open(os.path.join(d, "config.json")))
    W = {k: t for k, (_, t) in G.read_safetensors(os.path.join(d, "model.safetensors")).items()}
    plan = json.load(open(plan_path)) if plan_path != "-" else None
    return c, W, plan


def visible(c, plan, layer, Tn):
    """(H, T, T) boolean: which keys each query head sees."""
    H, Gk = c["num_attention_heads"], c["num_key_value_heads"]
    t = torch.arange(Tn)[:, None]
    s = torch.arange(Tn)[None, :]
    causal = s <= t
    out = causal.expand(H, Tn, Tn).clone()
    if plan is None:
        return out
    full = {tuple(e) for e in plan["full"]}
    streaming = causal & ((s < plan["sink"]) | (s > t - plan["window"]))
    for h in range(H):
        if (layer, h // (H // Gk)) not in full:
            out[h] = streaming
    return out


def forward(c, W, plan, idx):
    Bn, Tn = idx.shape
    H, Gk, eps = c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"]
    dh = c.get("head_dim") or c["hidden_size"] // H
    cos, sin = G.rope_cos_sin(torch.arange(Tn), dh, c["rope_theta"])
    x = W["model.embed_tokens.weight"][idx]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = G.rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(Bn, Tn, H, dh).transpose(1, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(Bn, Tn, Gk, dh).transpose(1, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(Bn, Tn, Gk, dh).transpose(1, 2)
        q, k = G.apply_rope(q, cos, sin), G.apply_rope(k, cos, sin)
        k, v = k.repeat_interleave(H // Gk, 1), v.repeat_interleave(H // Gk, 1)
        s = q @ k.transpose(-1, -2) / dh ** 0.5
        s = s.masked_fill(~visible(c, plan, i, Tn)[None], float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(Bn, Tn, H * dh)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = G.rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        m = G.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
        x = x + m @ W[p + "mlp.down_proj.weight"].T
    x = G.rms_norm(x, W["model.norm.weight"], eps)
    lm = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
    return x @ lm.T


def shard(path):
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], "<i4")
    dtype = "<u2" if header[0] == 20240520 else "<u4"
    return torch.from_numpy(np.frombuffer(raw[1024:], dtype).astype(np.int64))


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "eval" and len(sys.argv) == 8:
        c, W, plan = load(sys.argv[2], sys.argv[4])
        tokens = shard(sys.argv[3])
        Bn, Tn, batches = map(int, sys.argv[5:8])
        per_seq = []
        for i in range(batches):
            buf = tokens[i * Bn * Tn:i * Bn * Tn + Bn * Tn + 1]
            tl = G.token_losses(forward(c, W, plan, buf[:-1].view(Bn, Tn)), buf[1:].view(Bn, Tn))
            per_seq.append(tl.mean(1))
        print(repr(float(torch.cat(per_seq).mean())))
    elif cmd == "generate" and len(sys.argv) == 6:
        c, W, plan = load(sys.argv[2], sys.argv[3])
        ids = [int(x) for x in sys.argv[4].split(",")]
        new = []
        for _ in range(int(sys.argv[5])):
            logits = forward(c, W, plan, torch.tensor([ids]))[0, -1]
            best = int((logits == logits.max()).nonzero()[0])  # ties to the lowest id
            ids.append(best)
            new.append(best)
        print(",".join(map(str, new)))
    elif cmd == "bytes" and len(sys.argv) == 5:
        c, _, plan = load(sys.argv[2], sys.argv[3])
        Tn, Gk = int(sys.argv[4]), c["num_key_value_heads"]
        dh = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        total = 0
        for layer in range(c["num_hidden_layers"]):
            for g in range(Gk):
                full = plan is None or [layer, g] in plan["full"]
                n = Tn if full else min(Tn, plan["sink"] + plan["window"])
                total += 2 * n * dh * 4
        print(total)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

"""Oracle direct logit attribution, logit lens and composition scores for
headscope's `dla`, `logit-lens` and `composition` commands (SPEC §11).

Provenance
----------
For the checkpoints tests/fixtures/models/gpt2_tiny (GPT-2),
tests/fixtures/models/llama_gqa (Llama, 4 query heads on 2 key/value heads)
and tests/fixtures/families/neox_par, neox_seq (GPT-NeoX: parallel residual
with rotary on a quarter of each head; sequential with half), computes in
float64 and writes tests/fixtures/interp/oracle.json, with the prompts files
it reads, tests/fixtures/interp/prompts.jsonl and (the NeoX vocabulary of 32)
prompts_neox.jsonl, and the NeoX token shard neox_eval.bin.

* Reference maths: forwards written here from the Hugging Face model
  definitions (GPT2LMHeadModel, LlamaForCausalLM), keeping what the
  instruments read: the residual stream entering each layer, each head's z
  (before the output projection), each MLP's output and the final residual.
  Each is asserted equal (1e-10) to the reference forward of
  scripts/oracle/gen_models.py (imported by path; its safetensors reader
  too; GPT-NeoX: scripts/oracle/gen_families.py's forward). Nothing here
  uses the C code. A family is one entry of FAMILIES: a forward returning
  that record and a function giving each head's TransformerLens-convention
  W_Q, W_K, W_V (d, dh) and W_O (dh, d). With NeoX's parallel residual the
  attention and MLP outputs still add up to the final residual.
* DLA as TransformerLens's residual_stack_to_logit_diff after
  cache.apply_ln_to_stack(..., layer=-1, pos_slice=-1): each part of the
  final residual at the last position (per head z_h W_O^h; per layer the MLP
  output with its output bias; the token and position embeddings; the sum of
  the attention output biases), centred (LayerNorm) and divided by the final
  residual's own scale, times gamma, dotted with u[answer] - u[wrong]; plus
  beta . du and b_U[answer] - b_U[wrong]. Asserted: the parts of each prompt
  sum to its logit difference (1e-9), and the parts' stack equals the final
  residual (1e-10).
* Logit lens: the residual entering layer l (l = L: the final residual)
  through the final norm (its own scale) and the unembedding; with prompts
  -log p(answer) and the logit difference at the last position, with the
  shard the mean next-token cross-entropy of each sequence. Asserted: entry
  L equals the model's output.
* Composition: dense d x d matrices OV = W_V W_O, QK = W_Q W_K^T and
  |OV_A QK_B|_F / (|OV_A|_F |QK_B|_F) (Q), |OV_A QK_B^T|_F / (...) (K),
  |OV_A OV_B|_F / (|OV_A|_F |OV_B|_F) (V) for every head A of a layer before
  B's: HookedTransformer.all_composition_scores with utils.composition_scores
  (whose SVD-based norms are Frobenius norms) on unfolded weights. Rotary
  positions (Llama, NeoX) are not part of W_Q, W_K and are ignored, as
  TransformerLens does; NeoX's W_Q, W_K, W_V of head h are rows
  h*3dh + [0, dh), [dh, 2dh), [2dh, 3dh) of query_key_value.
* Means and standard errors: sample standard deviation (n-1) / sqrt(n) over
  prompts or sequences (SPEC §5).
* Data: the prompts file below (ids; two lengths, interleaved, so the
  reader's grouping is exercised); the shard tests/fixtures/models/gpt2_tiny/
  eval.bin (NeoX: interp/neox_eval.bin, drawn here) as `--batch 2 --seq-len 8
  --max-batches 2` reads it.
* regenerate (from the repo root; writes both files, prints nothing):
      /usr/bin/python3 scripts/oracle/gen_interp.py
  Running it twice gives byte-identical files; adding the NeoX cases left
  the GPT-2 and Llama ones byte-identical.
"""
import importlib.util
import json
import math
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
FAMILIES_DIR = os.path.join(ROOT, "tests", "fixtures", "families")
OUTDIR = os.path.join(ROOT, "tests", "fixtures", "interp")
SHARD = os.path.join(MODELS, "gpt2_tiny", "eval.bin")
B, T, BATCHES = 2, 8, 2
DT = torch.float64


def load_reference():
    spec = importlib.util.spec_from_file_location("gen_models", os.path.join(HERE, "gen_models.py"))
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)  # main() is guarded; importing only defines functions
    return gm


gm = load_reference()
torch.set_num_threads(1)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def attend(q, k, v):
    """q (B,H,T,dh), k/v (B,H,T,dh): causal softmax(q k^T / sqrt(dh)) v."""
    n, dh = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1) @ v


# ---------------------------------------------------------------------------
# GPT-2 (HF GPT2LMHeadModel: Conv1D weights [in, out], gelu_new, tied wte)

def gpt2_run(W, c, idx):
    n, eps, H, d = idx.shape[1], c["layer_norm_epsilon"], c["n_head"], c["n_embd"]
    dh = d // H
    rec = {"resid": [], "z": [], "mlp": [], "embed": W["wte.weight"][idx],
           "pos_embed": W["wpe.weight"][:n].expand(idx.shape[0], n, d)}
    x = rec["embed"] + rec["pos_embed"]
    for i in range(c["n_layer"]):
        p = f"h.{i}."
        rec["resid"].append(x)
        a = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        q, k, v = (a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]).split(d, -1)
        hd = lambda t: t.reshape(t.shape[0], n, H, dh).transpose(1, 2)
        z = attend(hd(q), hd(k), hd(v)).transpose(1, 2)  # (B,T,H,dh)
        rec["z"].append(z)
        x = x + z.reshape(z.shape[0], n, d) @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        m = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = gm.gelu_new(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        m = m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
        rec["mlp"].append(m)
        x = x + m
    rec["resid"].append(x)
    rec["final_norm"] = ("layernorm", W["ln_f.weight"], W["ln_f.bias"], eps)
    rec["unembed"], rec["unembed_bias"] = W["wte.weight"], None
    rec["attn_bias"] = sum(W[f"h.{i}.attn.c_proj.bias"] for i in range(c["n_layer"]))
    rec["logits"] = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], eps) @ W["wte.weight"].T
    return rec


def gpt2_heads(W, c):
    """{(l, h): (W_Q, W_K, W_V, W_O)} in TransformerLens's convention."""
    d, H = c["n_embd"], c["n_head"]
    dh, out = d // H, {}
    for i in range(c["n_layer"]):
        wa, wo = W[f"h.{i}.attn.c_attn.weight"], W[f"h.{i}.attn.c_proj.weight"]
        for h in range(H):
            s = slice(h * dh, (h + 1) * dh)
            out[(i, h)] = (wa[:, :d][:, s], wa[:, d:2 * d][:, s], wa[:, 2 * d:][:, s], wo[s, :])
    return out


def gpt2_wo(W, c, i):
    """W_O of layer i as (H*dh, d): z (B,T,H*dh) @ it."""
    return W[f"h.{i}.attn.c_proj.weight"]


# ---------------------------------------------------------------------------
# Llama (HF LlamaForCausalLM: RMSNorm, rotate-half RoPE, GQA repeat_kv, SwiGLU)

def llama_run(W, c, idx):
    Bn, n = idx.shape
    H, G, eps = c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"]
    d = c["hidden_size"]
    dh = d // H
    inv = 1.0 / c["rope_theta"] ** (torch.arange(0, dh, 2, dtype=DT) / dh)
    fr = torch.arange(n, dtype=DT)[:, None] * inv[None, :]
    emb = torch.cat([fr, fr], -1)
    cos, sin = emb.cos(), emb.sin()
    rot = lambda t: t * cos + torch.cat([-t[..., dh // 2:], t[..., :dh // 2]], -1) * sin
    rec = {"resid": [], "z": [], "mlp": [], "embed": W["model.embed_tokens.weight"][idx],
           "pos_embed": None}
    x = rec["embed"]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        rec["resid"].append(x)
        a = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (a @ W[p + "self_attn.q_proj.weight"].T).view(Bn, n, H, dh).transpose(1, 2)
        k = (a @ W[p + "self_attn.k_proj.weight"].T).view(Bn, n, G, dh).transpose(1, 2)
        v = (a @ W[p + "self_attn.v_proj.weight"].T).view(Bn, n, G, dh).transpose(1, 2)
        q, k = rot(q), rot(k)
        k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
        z = attend(q, k, v).transpose(1, 2)
        rec["z"].append(z)
        x = x + z.reshape(Bn, n, H * dh) @ W[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        m = gm.silu(m @ W[p + "mlp.gate_proj.weight"].T) * (m @ W[p + "mlp.up_proj.weight"].T)
        m = m @ W[p + "mlp.down_proj.weight"].T
        rec["mlp"].append(m)
        x = x + m
    rec["resid"].append(x)
    rec["final_norm"] = ("rmsnorm", W["model.norm.weight"], None, eps)
    lm = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
    rec["unembed"], rec["unembed_bias"], rec["attn_bias"] = lm, None, None
    rec["logits"] = rms_norm(x, W["model.norm.weight"], eps) @ lm.T
    return rec


def llama_heads(W, c):
    d, H, G = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    dh, out = d // H, {}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        wq, wk, wv, wo = (W[p + x + "_proj.weight"] for x in "qkvo")
        for h in range(H):
            s, g = slice(h * dh, (h + 1) * dh), h // (H // G)
            gs = slice(g * dh, (g + 1) * dh)  # the query head's own key/value head
            out[(i, h)] = (wq[s].T, wk[gs].T, wv[gs].T, wo[:, s].T)
    return out


def llama_wo(W, c, i):
    return W[f"model.layers.{i}.self_attn.o_proj.weight"].T


# ---------------------------------------------------------------------------
# GPT-NeoX (HF GPTNeoXForCausalLM: fused query_key_value viewed as (B,T,H,3dh)
# and split per head, rotate-half rotary on the first int(dh*rotary_pct) dims,
# exact-erf GELU, parallel or sequential residual, untied embed_out)

def neox_run(W, c, idx):
    Bn, n = idx.shape
    H, d, eps = c["num_attention_heads"], c["hidden_size"], c["layer_norm_eps"]
    dh = d // H
    R = int(dh * c["rotary_pct"])
    inv = 1.0 / c["rotary_emb_base"] ** (torch.arange(0, R, 2, dtype=DT) / R)
    fr = torch.arange(n, dtype=DT)[:, None] * inv[None, :]
    emb = torch.cat([fr, fr], -1)
    cos, sin = emb.cos(), emb.sin()

    def rot(t):
        r = t[..., :R]
        return torch.cat([r * cos + torch.cat([-r[..., R // 2:], r[..., :R // 2]], -1) * sin,
                          t[..., R:]], -1)

    rec = {"resid": [], "z": [], "mlp": [], "embed": W["gpt_neox.embed_in.weight"][idx],
           "pos_embed": None}
    x = rec["embed"]
    for i in range(c["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}."
        rec["resid"].append(x)
        a = layer_norm(x, W[p + "input_layernorm.weight"], W[p + "input_layernorm.bias"], eps)
        qkv = a @ W[p + "attention.query_key_value.weight"].T + W[p + "attention.query_key_value.bias"]
        qkv = qkv.view(Bn, n, H, 3 * dh).transpose(1, 2)
        q, k, v = rot(qkv[..., :dh]), rot(qkv[..., dh:2 * dh]), qkv[..., 2 * dh:]
        z = attend(q, k, v).transpose(1, 2)
        rec["z"].append(z)
        attn = z.reshape(Bn, n, d) @ W[p + "attention.dense.weight"].T + W[p + "attention.dense.bias"]
        m = layer_norm(x if c["use_parallel_residual"] else x + attn,
                       W[p + "post_attention_layernorm.weight"], W[p + "post_attention_layernorm.bias"], eps)
        m = m @ W[p + "mlp.dense_h_to_4h.weight"].T + W[p + "mlp.dense_h_to_4h.bias"]
        m = 0.5 * m * (1 + torch.erf(m / math.sqrt(2)))
        m = m @ W[p + "mlp.dense_4h_to_h.weight"].T + W[p + "mlp.dense_4h_to_h.bias"]
        rec["mlp"].append(m)
        x = x + attn + m  # parallel: both read x; sequential: m read x + attn
    rec["resid"].append(x)
    g, b = W["gpt_neox.final_layer_norm.weight"], W["gpt_neox.final_layer_norm.bias"]
    rec["final_norm"] = ("layernorm", g, b, eps)
    rec["unembed"], rec["unembed_bias"] = W["embed_out.weight"], None
    rec["attn_bias"] = sum(W[f"gpt_neox.layers.{i}.attention.dense.bias"]
                           for i in range(c["num_hidden_layers"]))
    rec["logits"] = layer_norm(x, g, b, eps) @ W["embed_out.weight"].T
    return rec


def neox_heads(W, c):
    """Per head the rows h*3dh .. (h+1)*3dh of query_key_value: q, k, v. The
    rotary is not part of these weights (TransformerLens's composition scores
    on W_Q, W_K ignore it too)."""
    d, H = c["hidden_size"], c["num_attention_heads"]
    dh, out = d // H, {}
    for i in range(c["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}.attention."
        wqkv, wo = W[p + "query_key_value.weight"], W[p + "dense.weight"]
        for h in range(H):
            r = wqkv[h * 3 * dh:(h + 1) * 3 * dh]
            out[(i, h)] = (r[:dh].T, r[dh:2 * dh].T, r[2 * dh:].T, wo[:, h * dh:(h + 1) * dh].T)
    return out


def neox_wo(W, c, i):
    return W[f"gpt_neox.layers.{i}.attention.dense.weight"].T


def load_families():
    """scripts/oracle/gen_families.py (its NeoX forward is the reference here);
    importing it sets torch's default dtype, restored after."""
    spec = importlib.util.spec_from_file_location("gen_families", os.path.join(HERE, "gen_families.py"))
    gf = importlib.util.module_from_spec(spec)
    default = torch.get_default_dtype()
    spec.loader.exec_module(gf)
    torch.set_default_dtype(default)
    return gf


gf = load_families()

FAMILIES = {
    "gpt2": {"run": gpt2_run, "heads": gpt2_heads, "wo": gpt2_wo, "ref": gm.gpt2_forward},
    "llama": {"run": llama_run, "heads": llama_heads, "wo": llama_wo, "ref": gm.llama_forward},
    "gpt_neox": {"run": neox_run, "heads": neox_heads, "wo": neox_wo, "ref": gf.neox_forward},
}


# ---------------------------------------------------------------------------

def mean_se(xs):
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return m, sd / math.sqrt(n)


def final_norm(rec, x):
    kind, g, b, eps = rec["final_norm"]
    return layer_norm(x, g, b, eps) if kind == "layernorm" else rms_norm(x, g, eps)


def dla_parts(fam, W, c, rec, b, answer, wrong):
    """[(layer, head, metric, value)] of sequence b at its last position."""
    kind, g, beta, eps = rec["final_norm"]
    x = rec["resid"][-1][b, -1]
    du = rec["unembed"][answer] - rec["unembed"][wrong]
    if kind == "layernorm":
        scale = torch.sqrt(((x - x.mean()) ** 2).mean() + eps)
        through = lambda part: ((part - part.mean()) / scale * g) @ du
    else:
        scale = torch.sqrt((x * x).mean() + eps)
        through = lambda part: (part / scale * g) @ du
    parts, stack = [], []
    for i, z in enumerate(rec["z"]):
        H, dh = z.shape[2], z.shape[3]
        wo = fam["wo"](W, c, i)
        for h in range(H):
            out = z[b, -1, h] @ wo[h * dh:(h + 1) * dh]
            parts.append((i, h, "dla", through(out)))
            stack.append(out)
        parts.append((i, -1, "dla", through(rec["mlp"][i][b, -1])))
        stack.append(rec["mlp"][i][b, -1])
    parts.append((-1, -1, "dla_embed", through(rec["embed"][b, -1])))
    stack.append(rec["embed"][b, -1])
    if rec["pos_embed"] is not None:
        parts.append((-1, -1, "dla_pos_embed", through(rec["pos_embed"][b, -1])))
        stack.append(rec["pos_embed"][b, -1])
    if rec["attn_bias"] is not None:
        parts.append((-1, -1, "dla_attn_bias", through(rec["attn_bias"])))
        stack.append(rec["attn_bias"])
    if beta is not None:
        parts.append((-1, -1, "dla_final_norm_bias", beta @ du))
    assert torch.allclose(sum(stack), x, atol=1e-10, rtol=0)
    ld = rec["logits"][b, -1, answer] - rec["logits"][b, -1, wrong]
    assert abs(sum(p[3] for p in parts) - ld) < 1e-9
    return [(l, h, m, float(v)) for l, h, m, v in parts], float(ld)


def lens_logits(rec, x):
    y = final_norm(rec, x) @ rec["unembed"].T
    return y if rec["unembed_bias"] is None else y + rec["unembed_bias"]


def prompts_case(fam, W, c, prompts):
    per = {}   # (layer, head, metric) -> [value per prompt]
    lens = {}  # (layer, metric) -> [value per prompt]
    for p in prompts:
        idx = torch.tensor([p["clean_ids"]])
        rec = fam["run"](W, c, idx)
        assert torch.allclose(rec["logits"], fam["ref"](W, c, idx), atol=1e-10, rtol=0)
        parts, ld = dla_parts(fam, W, c, rec, 0, p["answer_id"], p["wrong_id"])
        for l, h, m, v in parts:
            per.setdefault((l, h, m), []).append(v)
        per.setdefault((-1, -1, "logit_diff_clean"), []).append(ld)
        for e, x in enumerate(rec["resid"]):
            lg = lens_logits(rec, x[0, -1])
            if e == len(rec["resid"]) - 1:
                assert torch.allclose(lg, rec["logits"][0, -1], atol=1e-10, rtol=0)
            loss = torch.logsumexp(lg, -1) - lg[p["answer_id"]]
            lens.setdefault((e, "logit_lens_loss"), []).append(float(loss))
            lens.setdefault((e, "logit_lens_logit_diff"), []).append(
                float(lg[p["answer_id"]] - lg[p["wrong_id"]]))
    dla = [[l, h, m, *mean_se(v)] for (l, h, m), v in per.items()]
    return dla, [[e, m, *mean_se(v)] for (e, m), v in lens.items()]


def data_case(fam, W, c, shard):
    raw = open(shard, "rb").read()
    tok = torch.frombuffer(bytearray(raw[1024:]), dtype=torch.int16).to(torch.int64) & 0xFFFF
    seqs = {}
    for k in range(BATCHES):
        buf = tok[k * B * T:k * B * T + B * T + 1]
        idx, tg = buf[:-1].view(B, T), buf[1:].view(B, T)
        rec = fam["run"](W, c, idx)
        for e, x in enumerate(rec["resid"]):
            lg = lens_logits(rec, x)
            ce = torch.logsumexp(lg, -1) - lg.gather(-1, tg[..., None])[..., 0]
            seqs.setdefault(e, []).extend(float(v) for v in ce.mean(-1))
    return [[e, "logit_lens_loss", *mean_se(v)] for e, v in seqs.items()]


def composition_case(fam, W, c):
    heads = fam["heads"](W, c)
    rows = []
    fro = lambda m: float(torch.linalg.norm(m))
    for (la, ha), (_, _, va, oa) in sorted(heads.items()):
        ov_a = va @ oa
        for (lb, hb), (qb, kb, vb, ob) in sorted(heads.items()):
            if lb <= la:
                continue
            qk_b, ov_b = qb @ kb.T, vb @ ob
            for name, right in (("q_composition", qk_b), ("k_composition", qk_b.T),
                                ("v_composition", ov_b)):
                rows.append([la, ha, lb, hb, name, fro(ov_a @ right) / (fro(ov_a) * fro(right))])
    return rows


def make_prompts(V=48, seed=14):
    """Ids prompts over a vocabulary of V: lengths 6 and 9 interleaved."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(7):
        n = 6 if i % 2 == 0 else 9
        clean = torch.randint(0, V, (n,), generator=g).tolist()
        corrupt = list(clean)
        corrupt[1] = (corrupt[1] + 7) % V
        ans, wr = torch.randint(0, V, (2,), generator=g).tolist()
        wr = wr if wr != ans else (wr + 1) % V
        out.append({"clean_ids": clean, "corrupt_ids": corrupt, "answer_id": ans, "wrong_id": wr})
    return out


def write_shard(path, V, seed, n=B * T * BATCHES + 1):
    """A uint16 token shard (llm.c header: magic 20240520, version 1, count)."""
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, V, (n,), generator=g).tolist()
    head = [20240520, 1, n] + [0] * 253
    with open(path, "wb") as f:
        f.write(b"".join(v.to_bytes(4, "little") for v in head))
        f.write(b"".join(v.to_bytes(2, "little") for v in tok))


def write_prompts(path, prompts):
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps(p, separators=(",", ":")) + "\n")


# case: model directory, prompts file, token shard (tests/fixtures/interp/ when
# written here: the NeoX checkpoints' vocabulary is 32)
NEOX_PROMPTS, NEOX_SHARD = os.path.join(OUTDIR, "prompts_neox.jsonl"), os.path.join(OUTDIR, "neox_eval.bin")
CASES = [
    ("gpt2_tiny", os.path.join(MODELS, "gpt2_tiny"), os.path.join(OUTDIR, "prompts.jsonl"), SHARD),
    ("llama_gqa", os.path.join(MODELS, "llama_gqa"), os.path.join(OUTDIR, "prompts.jsonl"), SHARD),
    ("neox_par", os.path.join(FAMILIES_DIR, "neox_par"), NEOX_PROMPTS, NEOX_SHARD),
    ("neox_seq", os.path.join(FAMILIES_DIR, "neox_seq"), NEOX_PROMPTS, NEOX_SHARD),
]


def main():
    os.makedirs(OUTDIR, exist_ok=True)
    write_prompts(os.path.join(OUTDIR, "prompts.jsonl"), make_prompts())
    write_prompts(NEOX_PROMPTS, make_prompts(32, 15))
    write_shard(NEOX_SHARD, 32, 16)
    cases = {}
    for name, d, pfile, shard in CASES:
        prompts = [json.loads(line) for line in open(pfile)]
        c = json.load(open(os.path.join(d, "config.json")))
        W = {k: v.to(DT) for k, (_, v) in gm.read_safetensors(os.path.join(d, "model.safetensors")).items()}
        if c["model_type"] == "gpt2":
            W = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in W.items()}
        fam = FAMILIES[c["model_type"]]
        dla, lens = prompts_case(fam, W, c, prompts)
        cases[name] = {"dla": dla, "logit_lens_prompts": lens, "logit_lens_data": data_case(fam, W, c, shard),
                       "composition": composition_case(fam, W, c)}
    rnd = lambda v: float("%.12g" % v) if isinstance(v, float) else v
    cases = {k: {kk: [[rnd(x) for x in row] for row in vv] for kk, vv in v.items()} for k, v in cases.items()}
    with open(os.path.join(OUTDIR, "oracle.json"), "w") as f:
        json.dump({"note": "written by scripts/oracle/gen_interp.py; do not edit", "cases": cases},
                  f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()

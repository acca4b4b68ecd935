"""Oracle sparse autoencoders on attention outputs for headscope's `features`
and `sae-eval` commands (SPEC section 19).

Provenance
----------
Independent of headscope's C code. Writes five SAE directories in SAELens's
format (cfg.json + sae_weights.safetensors, the safetensors written by hand
below: 8-byte little-endian header length, JSON header padded with spaces to
a multiple of 8, no __metadata__ (as safetensors.torch.save_file writes it
without metadata), tensors packed in the order safetensors sorts them: by
name, W_dec, W_enc, b_dec, b_enc, threshold), one llm.c token shard and
tests/fixtures/sae/oracle.json with the expected numbers.

* Models: the fixture checkpoints tests/fixtures/models/gpt2_tiny (GPT-2)
  and tests/fixtures/models/llama_gqa (Llama, 4 query heads on 2 key/value
  heads), read from their model.safetensors by the parser below (F32 ->
  float64). Forwards written here from the Hugging Face definitions
  (GPT2LMHeadModel: Conv1D c_attn/c_proj stored [in, out], gelu_new,
  pre-LayerNorm, tied wte; LlamaForCausalLM: RMSNorm, rotate-half RoPE,
  repeat_kv so query head h reads key/value head h // (H/G), SwiGLU, untied
  lm_head), exposing TransformerLens's hook points and letting one of them be
  replaced: blocks.L.hook_resid_pre (residual entering layer L),
  blocks.L.attn.hook_z (z[b,t,h,:] = sum_s att[b,h,t,s] v[b,s,h//(H/G),:],
  v after its bias, flattened head-major: x[h*dh + i]; a replacement is
  reshaped to (H, dh) before c_proj / o_proj, whose bias still applies),
  blocks.L.hook_attn_out (c_proj / o_proj output, bias included, before the
  residual add). Checked before anything is written: the clean logits equal
  (1e-10) scripts/oracle/gen_models.py's gpt2_forward / llama_forward
  (imported by path; only its functions, never its main) on the data here,
  and the logits / losses stored in tests/fixtures/models.txt (cases
  gpt2_tiny, llama_gqa, eval_gpt2_tiny on models/gpt2_tiny/eval.bin); z
  equals att @ v recomputed by hand per head (GQA mapping explicit); replacing
  any hook by its own value leaves the logits bit-identical.
* SAEs (SAELens): x' = x - b_dec if apply_b_dec_to_input else x;
  pre = x' W_enc + b_enc; standard f = relu(pre); jumprelu
  f = relu(pre) * 1[pre > threshold]; topk: the k largest pre kept (ties to
  the lower index: Python's sort on (-pre, index)), relu'd, the rest 0;
  x_hat = f W_dec + b_dec. Weights drawn in float64 (torch.manual_seed per
  case: 511, 521, 531, 541, 551 in CASES order; the draw reads the data's
  mean and spread rounded to 4 significant digits), rounded to the stored dtype (F32; BF16 for
  gpt2_z_jumprelu: round-to-nearest-even of the float32 bits, checked
  against torch's bfloat16), and every number is computed from the stored
  values read back and converted to float64. W_enc has unit columns over
  the data's spread, b_enc is negative so features are sparse, thresholds
  are positive; W_dec is drawn as W_enc's columns plus noise and then
  ridge-fitted on the data to the stored encoder's activations (towards the
  draw, so a feature that never fires keeps its drawn row); one
  feature of gpt2_z_standard has b_enc = -40 and never fires (mean_act
  null); llama_z_topk's feature 7 has the encoder column and bias of
  feature 3 (its decoder row its own), so the tie rule of topk is exercised
  where the two straddle the k-th place (asserted to happen on the data).
* Features over the data (every position of the 6 sequences, 48 tokens,
  seq = batch*B + b): frequency, mean_act (null when a feature never fires),
  head_share (hook_z: ||W_dec[f, h-block]||_2 / sum over h'), the top 3
  examples (f > 0, value descending, ties by (seq, position)), for hook_z
  every top example's DFA_f(h, s | t) = att_h[t, s] (v_{h//(H/G)}[s] .
  W_enc[h-block, f]) for all heads and source positions 0..T-1 (0 after t),
  asserted to sum to pre_f(t) - b_enc[f] (+ b_dec . W_enc[:, f] when b_dec
  is applied) within 1e-12; CSR of f over tokens in (seq, position) order.
* sae-eval: l0, explained_variance (1 - sum ||x - x_hat||^2 /
  sum ||x - xbar||^2, xbar the per-dimension mean over the 48 tokens), mse
  (mean over elements), loss_clean / loss_sae / loss_zero (mean next-token
  cross-entropy in nats over all 48 predicted positions, SPEC section 5; the
  hook replaced at every position by x_hat resp. 0), ce_loss_score =
  (loss_zero - loss_sae) / (loss_zero - loss_clean).
* encode: 3 float64 vectors per case (seed of the case + 1, drawn around the data's mean
  with its spread) with pre, f, x_hat, for a direct test of the encoder.
* Robustness (asserted, so a float32 implementation sees the same discrete
  choices): |pre| and |pre - threshold| >= 1e-4 wherever they decide
  firing, the gap between the k-th and (k+1)-th pre of topk >= 1e-4 (exact
  ties apart), and consecutive values among each feature's top 4 differ by
  >= 1e-5.
* Data: tests/fixtures/sae/data.bin, llm.c uint16 shard of 3*2*8+1 = 49
  tokens (seed 401, ids 0..47), read as --batch 2 --seq-len 8 (3 batches),
  shared by both models.
* torch 1.13 (Debian's python3-torch), float64, torch.set_num_threads(1);
  JSON floats written by repr (json.dump).
* regenerate (from the repo root; writes every file under
  tests/fixtures/sae/, prints nothing):
      /usr/bin/python3 scripts/oracle/gen_sae.py
  Running it twice gives byte-identical files.
"""
import importlib.util
import json
import math
import os
import sys

import numpy as np
import torch

torch.set_num_threads(1)
DT = torch.float64
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "sae")
B, T, BATCHES, TOP = 2, 8, 3, 3
V = 48
DATA_SEED = 401
MARGIN, EX_MARGIN = 1e-4, 1e-5

assert sys.byteorder == "little"

# ---------------------------------------------------------------------------
# safetensors by hand


def encode_tensor(t, dtype):
    f = t.detach().to(DT).contiguous().numpy().astype(np.float32)
    if dtype == "F32":
        return f.astype("<f4").tobytes()
    if dtype == "BF16":  # upper 16 bits of the float32 bits, round to nearest even
        bits = f.view("<u4").astype(np.uint64)
        r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
        ref = torch.from_numpy(f.copy()).bfloat16().view(torch.int16).numpy().view("<u2")
        assert np.array_equal(r, ref)
        return r.tobytes()
    raise ValueError(dtype)


def decode_tensor(raw, dtype, shape):
    if dtype == "F32":
        a = np.frombuffer(raw, "<f4")
    elif dtype == "F16":
        a = np.frombuffer(raw, "<f2").astype(np.float32)
    elif dtype == "BF16":
        a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError(dtype)
    assert a.size == math.prod(shape)
    return torch.from_numpy(a.astype(np.float64)).reshape(shape)


def write_safetensors(path, tensors, dtype):
    """tensors: {name: float64 tensor}; written in safetensors' own (sorted) order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = encode_tensor(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-(8 + len(h))) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """{name: float64 tensor}; offsets checked contiguous and covering the data."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data, out = raw[8 + n:], {}
    size = {"F32": 4, "F16": 2, "BF16": 2}
    spans = []
    for name, e in header.items():
        a, b = e["data_offsets"]
        assert b - a == size[e["dtype"]] * math.prod(e["shape"]), name
        out[name] = decode_tensor(data[a:b], e["dtype"], e["shape"])
        spans.append((a, b))
    spans.sort()
    pos = 0
    for a, b in spans:
        assert a == pos
        pos = b
    assert pos == len(data)
    return out


def write_shard(path, tokens):
    hdr = np.zeros(256, "<i4")
    hdr[0], hdr[1], hdr[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(np.asarray(tokens, "<u2").tobytes())


def read_shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    hdr = np.frombuffer(raw[:1024], "<i4")
    assert hdr[0] == 20240520 and hdr[1] == 1
    tok = np.frombuffer(raw[1024:], "<u2")
    assert len(tok) == hdr[2]
    return torch.from_numpy(tok.astype(np.int64))


def batches(tokens, nb):
    """llm.c batching: inputs/targets (nb*B, T), sequence index = batch*B + b."""
    xs, ys = [], []
    for i in range(nb):
        buf = tokens[i * B * T:i * B * T + B * T + 1]
        xs.append(buf[:-1].view(B, T))
        ys.append(buf[1:].view(B, T))
    return torch.cat(xs), torch.cat(ys)


# ---------------------------------------------------------------------------
# models with hook points


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rope(x, theta):
    """x (N, T, heads, dh), HF rotate-half: dim i pairs with dim i + dh/2."""
    n, dh = x.shape[1], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=DT) / dh)
    ang = torch.arange(n, dtype=DT)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)[None, :, None, :]
    rot = torch.cat([-x[..., dh // 2:], x[..., :dh // 2]], -1)
    return x * emb.cos() + rot * emb.sin()


class Model:
    def __init__(self, name):
        self.name = name
        d = os.path.join(FIX, "models", name)
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.W = read_safetensors(os.path.join(d, "model.safetensors"))
        c = self.c
        self.kind = c["model_type"]
        if self.kind == "gpt2":
            self.L, self.H, self.d = c["n_layer"], c["n_head"], c["n_embd"]
            self.G = self.H
        else:
            self.L, self.H, self.d = c["num_hidden_layers"], c["num_attention_heads"], c["hidden_size"]
            self.G = c["num_key_value_heads"]
        self.dh = self.d // self.H

    def kv(self, h):
        return h // (self.H // self.G)

    def run(self, idx, repl=None):
        """idx (N, T). repl: (hook name, tensor (N, T, d_in)) replacing that hook.
        Returns logits and the hooks of every layer: resid_pre (N,T,d), z (N,T,H,dh),
        att (N,H,T,T), v (N,T,G,dh), attn_out (N,T,d)."""
        W, c, H, G, dh = self.W, self.c, self.H, self.G, self.dh
        N, n = idx.shape
        cap = {}

        def hook(name, t):
            cap[name] = t
            if repl is not None and repl[0] == name:
                return repl[1].reshape(t.shape).to(DT)
            return t

        if self.kind == "gpt2":
            x = W["wte.weight"][idx] + W["wpe.weight"][:n]
        else:
            x = W["model.embed_tokens.weight"][idx]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        for l in range(self.L):
            x = hook("blocks.%d.hook_resid_pre" % l, x)
            if self.kind == "gpt2":
                p = "h.%d." % l
                eps = c["layer_norm_epsilon"]
                a = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
                qkv = a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
                q, k, v = (t.reshape(N, n, H, dh) for t in qkv.split(self.d, -1))
            else:
                p = "model.layers.%d." % l
                eps = c["rms_norm_eps"]
                a = rms_norm(x, W[p + "input_layernorm.weight"], eps)
                q = (a @ W[p + "self_attn.q_proj.weight"].T).reshape(N, n, H, dh)
                k = (a @ W[p + "self_attn.k_proj.weight"].T).reshape(N, n, G, dh)
                v = (a @ W[p + "self_attn.v_proj.weight"].T).reshape(N, n, G, dh)
                q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
            gi = torch.tensor([self.kv(h) for h in range(H)])
            kh, vh = k[:, :, gi], v[:, :, gi]  # (N, T, H, dh), head h -> kv head h // (H/G)
            s = torch.einsum("nthi,nshi->nhts", q, kh) / math.sqrt(dh)
            att = s.masked_fill(mask, float("-inf")).softmax(-1)
            z = torch.einsum("nhts,nshi->nthi", att, vh)
            cap["blocks.%d.attn.hook_pattern" % l] = att
            cap["blocks.%d.attn.hook_v" % l] = v
            z = hook("blocks.%d.attn.hook_z" % l, z)
            zf = z.reshape(N, n, H * dh)
            if self.kind == "gpt2":
                o = zf @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
            else:
                o = zf @ W[p + "self_attn.o_proj.weight"].T
            o = hook("blocks.%d.hook_attn_out" % l, o)
            x = x + o
            if self.kind == "gpt2":
                m = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
                m = gelu_new(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
                x = x + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
            else:
                m = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
                g = m @ W[p + "mlp.gate_proj.weight"].T
                u = m @ W[p + "mlp.up_proj.weight"].T
                x = x + (g * torch.sigmoid(g) * u) @ W[p + "mlp.down_proj.weight"].T
        if self.kind == "gpt2":
            x = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], c["layer_norm_epsilon"])
            logits = x @ W["wte.weight"].T
        else:
            x = rms_norm(x, W["model.norm.weight"], c["rms_norm_eps"])
            lm = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
            logits = x @ lm.T
        return logits, cap


def ce(logits, targets):
    """mean next-token cross-entropy (nats) over every position."""
    lp = logits - torch.logsumexp(logits, -1, keepdim=True)
    return float(-lp.gather(-1, targets[..., None]).mean())


def hook_x(cap, hook, N):
    """the hooked activation as (N*T, d_in), tokens in (seq, position) order."""
    return cap[hook].reshape(N * T, -1)


# ---------------------------------------------------------------------------
# checks of the forward against independent references


def models_txt():
    """{case: {tensor name: float64 tensor}} from tests/fixtures/models.txt."""
    cases, cur, lines = {}, None, open(os.path.join(FIX, "models.txt")).read().split("\n")
    i = 0
    while i < len(lines):
        w = lines[i].split()
        i += 1
        if not w or w[0].startswith("#"):
            continue
        if w[0] == "case":
            cur = cases.setdefault(w[1], {})
        elif w[0] == "tensor":
            nd = int(w[2])
            shape = [int(s) for s in w[3:3 + nd]]
            cnt, vals = math.prod(shape), []
            while len(vals) < cnt:
                vals += [float(s) for s in lines[i].split()]
                i += 1
            cur[w[1]] = torch.tensor(vals, dtype=DT).reshape(shape)
    return cases


def close(a, b, tol):
    return float((torch.as_tensor(a, dtype=DT) - torch.as_tensor(b, dtype=DT)).abs().max()) <= tol


def self_check(models, inputs):
    spec = importlib.util.spec_from_file_location("gen_models", os.path.join(HERE, "gen_models.py"))
    gm = importlib.util.module_from_spec(spec)
    saved = torch.get_default_dtype()
    spec.loader.exec_module(gm)  # main() is guarded; importing only defines functions
    torch.set_default_dtype(saved)
    ref = {"gpt2": gm.gpt2_forward, "llama": gm.llama_forward}
    txt = models_txt()
    for m in models.values():
        logits, cap = m.run(inputs)
        assert close(logits, ref[m.kind](m.W, m.c, inputs), 1e-10), m.name
        case = txt[m.name]
        tok = case["tokens"].long()
        lg, _ = m.run(tok[:, :-1])
        assert close(lg, case["logits"], 1e-12), m.name
        assert abs(ce(lg, tok[:, 1:]) - float(case["loss"][0])) < 1e-12, m.name
        for l in range(m.L):  # z = att @ v, head by head, kv head h // (H/G)
            att, v = cap["blocks.%d.attn.hook_pattern" % l], cap["blocks.%d.attn.hook_v" % l]
            z = cap["blocks.%d.attn.hook_z" % l]
            for h in range(m.H):
                assert close(z[:, :, h], att[:, h] @ v[:, :, h // (m.H // m.G)], 1e-13)
            assert close(att.triu(1), 0, 0)
            for hk in ("blocks.%d.hook_resid_pre", "blocks.%d.attn.hook_z", "blocks.%d.hook_attn_out"):
                hk = hk % l  # replacing a hook by its own value changes nothing
                assert torch.equal(m.run(inputs, (hk, hook_x(cap, hk, inputs.shape[0])))[0], logits)
    ev = read_shard(os.path.join(FIX, "models", "gpt2_tiny", "eval.bin"))
    x, y = batches(ev, 2)
    lg, _ = models["gpt2_tiny"].run(x)
    assert abs(ce(lg, y) - float(txt["eval_gpt2_tiny"]["loss"][0])) < 1e-12


# ---------------------------------------------------------------------------
# SAEs

# name, model, hook, architecture, apply_b_dec_to_input, dtype, d_sae, k, k where, seed
CASES = [
    ("gpt2_z_standard", "gpt2_tiny", "blocks.1.attn.hook_z", "standard", True, "F32", 24, None, None, 511),
    ("gpt2_z_jumprelu", "gpt2_tiny", "blocks.0.attn.hook_z", "jumprelu", False, "BF16", 24, None, None, 521),
    ("llama_z_topk", "llama_gqa", "blocks.1.attn.hook_z", "topk", True, "F32", 24, 4, "kwargs", 531),
    ("gpt2_resid_topk", "gpt2_tiny", "blocks.1.hook_resid_pre", "topk", False, "F32", 32, 3, "top", 541),
    ("llama_attn_out_standard", "llama_gqa", "blocks.0.hook_attn_out", "standard", True, "F32", 24, None, None, 551),
]
DEAD = {"gpt2_z_standard": 5}          # feature with b_enc = -40: never fires
TWIN = {"llama_z_topk": (3, 7)}        # feature 7 encodes exactly as feature 3


def draw_sae(case, x):
    """float64 weights for a case, scaled to the data's activations x (N, d_in)."""
    name, _, _, arch, apply, _, m, k, _, seed = case
    d_in = x.shape[1]
    def r4(t):  # 4 significant digits: the draw does not hang on the forward's last bits
        return torch.tensor([float("%.4g" % v) for v in t.reshape(-1).tolist()], dtype=DT).reshape(t.shape)

    mu, sd = r4(x.mean(0)), r4(x.std(0))
    scale = float(r4(x.std()))
    torch.manual_seed(seed)
    W_enc = torch.randn(d_in, m, dtype=DT)
    W_enc = W_enc / W_enc.norm(dim=0, keepdim=True)       # unit encoder columns
    W_dec = W_enc.T.clone() + 0.3 * torch.randn(m, d_in, dtype=DT) / math.sqrt(d_in)
    W_dec = W_dec / W_dec.norm(dim=1, keepdim=True) * scale
    W_enc = W_enc / scale * 1.5
    b_dec = mu + 0.3 * sd * torch.randn(d_in, dtype=DT)
    b_enc = -0.4 - 0.3 * torch.rand(m, dtype=DT)
    thr = 0.1 + 0.5 * torch.rand(m, dtype=DT)
    if not apply:  # without the centring, centre through the bias instead
        b_enc = b_enc - mu @ W_enc
    if arch == "topk":
        b_enc = b_enc + 0.4
    if name in DEAD:
        b_enc[DEAD[name]] = -40.0
    if name in TWIN:
        a, b = TWIN[name]
        W_enc[:, b] = W_enc[:, a]
        b_enc[b] = b_enc[a]
    w = {"W_enc": W_enc, "b_enc": b_enc, "W_dec": W_dec, "b_dec": b_dec}
    if arch == "jumprelu":
        w["threshold"] = thr
    return w


def stored(t, dtype):
    return decode_tensor(encode_tensor(t, dtype), dtype, list(t.shape))


def fit_decoder(case, w, x):
    """W_dec by ridge regression towards its draw W0 on the data, from the activations of
    the stored encoder: argmin ||f W - (x - b_dec)||^2 + lam ||W - W0||^2 (rows of features
    that never fire stay W0). The encoder, b_dec and threshold are left as drawn."""
    dtype = case[5]
    q = {n: stored(t, dtype) for n, t in w.items()}
    pre = ((x - q["b_dec"]) if case[4] else x) @ q["W_enc"] + q["b_enc"]
    f = Sae.activate(case[3], case[7], pre, q.get("threshold"))
    A = f.T @ f
    lam = 0.1 * float(A.trace()) / A.shape[0]
    w = dict(w)
    w["W_dec"] = torch.linalg.solve(A + lam * torch.eye(A.shape[0], dtype=DT),
                                    f.T @ (x - q["b_dec"]) + lam * w["W_dec"])
    return w


class Sae:
    def __init__(self, d):
        self.cfg = json.load(open(os.path.join(d, "cfg.json")))
        self.w = read_safetensors(os.path.join(d, "sae_weights.safetensors"))
        self.arch = self.cfg["architecture"]
        self.apply = self.cfg["apply_b_dec_to_input"]
        self.k = self.cfg.get("k", self.cfg.get("activation_fn_kwargs", {}).get("k"))
        self.m = self.cfg["d_sae"]

    def pre(self, x):
        xp = x - self.w["b_dec"] if self.apply else x
        return xp @ self.w["W_enc"] + self.w["b_enc"]

    def act(self, pre):
        return Sae.activate(self.arch, self.k, pre, self.w.get("threshold"))

    @staticmethod
    def activate(arch, k, pre, threshold):
        if arch == "standard":
            return pre.clamp(min=0)
        if arch == "jumprelu":
            return pre.clamp(min=0) * (pre > threshold).to(DT)
        f = torch.zeros_like(pre)
        m = pre.shape[1]
        for r in range(pre.shape[0]):
            row = pre[r].tolist()
            for j in sorted(range(m), key=lambda j: (-row[j], j))[:k]:
                f[r, j] = max(row[j], 0.0)
        return f

    def decode(self, f):
        return f @ self.w["W_dec"] + self.w["b_dec"]

    def margins(self, pre, what):
        """assert the discrete choices are clear of float32 rounding."""
        if self.arch == "standard":
            assert float(pre.abs().min()) >= MARGIN, (what, float(pre.abs().min()))
        elif self.arch == "jumprelu":
            assert float((pre - self.w["threshold"]).abs().min()) >= MARGIN, what
        else:
            s = pre.sort(-1, descending=True).values
            gap = s[:, self.k - 1] - s[:, self.k]
            assert float(gap[gap != 0].min()) >= MARGIN, what
            assert float(s[:, self.k - 1].abs().min()) >= MARGIN, what


def write_sae(case, w):
    name, model, hook, arch, apply, dtype, m, k, kwhere, _ = case
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    layer = int(hook.split(".")[1])
    cfg = {"architecture": arch, "d_in": int(w["W_enc"].shape[0]), "d_sae": m,
           "dtype": "bfloat16" if dtype == "BF16" else "float32", "device": "cpu",
           "model_name": model, "hook_name": hook, "hook_layer": layer, "hook_head_index": None,
           "context_size": T, "apply_b_dec_to_input": apply, "normalize_activations": "none"}
    if kwhere == "kwargs":
        cfg["activation_fn_kwargs"] = {"k": k}
    elif kwhere == "top":
        cfg["k"] = k
    with open(os.path.join(d, "cfg.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(d, "sae_weights.safetensors"), w, dtype)
    return d


def features(sae, m, hook, pre, f, cap, N):
    tokens = f.shape[0]
    on = f > 0
    cnt = on.sum(0)
    out = {"tokens": tokens,
           "frequency": [int(c) / tokens for c in cnt.tolist()],
           "mean_act": [float(f[:, j][on[:, j]].mean()) if cnt[j] > 0 else None
                        for j in range(sae.m)]}
    is_z = hook.endswith("attn.hook_z")
    if is_z:
        Wd = sae.w["W_dec"].reshape(sae.m, m.H, m.dh).norm(dim=-1)
        out["head_share"] = (Wd / Wd.sum(-1, keepdim=True)).tolist()
    else:
        out["head_share"] = None
    examples, dfa = [], []
    L = int(hook.split(".")[1])
    for j in range(sae.m):
        rows = [(float(f[r, j]), r // T, r % T) for r in range(tokens) if f[r, j] > 0]
        rows.sort(key=lambda e: (-e[0], e[1], e[2]))
        vals = [e[0] for e in rows[:TOP + 1]]
        for a, b in zip(vals, vals[1:]):
            assert a - b >= EX_MARGIN, (j, a, b)
        examples.append([[s, t, v] for v, s, t in rows[:TOP]])
        if not is_z:
            continue
        att = cap["blocks.%d.attn.hook_pattern" % L]
        v = cap["blocks.%d.attn.hook_v" % L]
        We = sae.w["W_enc"][:, j]
        for val, s, t in rows[:TOP]:
            vals = torch.zeros(m.H, T, dtype=DT)
            for h in range(m.H):
                proj = v[s, :, m.kv(h)] @ We[h * m.dh:(h + 1) * m.dh]  # (T,) per source
                vals[h] = att[s, h, t] * proj
            assert float(vals[:, t + 1:].abs().max() if t + 1 < T else 0) == 0
            want = float(pre[s * T + t, j] - sae.w["b_enc"][j])
            if sae.apply:
                want += float(sae.w["b_dec"] @ We)
            assert abs(float(vals.sum()) - want) < 1e-12, (j, s, t)
            dfa.append({"feature": j, "seq": s, "position": t, "values": vals.tolist()})
    out["examples"] = examples
    if is_z:
        out["dfa"] = dfa
    indptr, indices, values = [0], [], []
    for r in range(tokens):
        for j in range(sae.m):
            if f[r, j] > 0:
                indices.append(j)
                values.append(float(f[r, j]))
        indptr.append(len(indices))
    out["csr"] = {"indptr": indptr, "indices": indices, "values": values}
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(DATA_SEED)
    data = torch.randint(0, V, (BATCHES * B * T + 1,))
    shard = os.path.join(OUT, "data.bin")
    write_shard(shard, data.tolist())
    tokens = read_shard(shard)
    assert torch.equal(tokens, data)
    inputs, targets = batches(tokens, BATCHES)
    N = inputs.shape[0]

    models = {n: Model(n) for n in ("gpt2_tiny", "llama_gqa")}
    self_check(models, inputs)
    clean = {n: m.run(inputs) for n, m in models.items()}

    cases = []
    for case in CASES:
        name, mname, hook, arch, apply, dtype, msae, k, _, seed = case
        m = models[mname]
        logits, cap = clean[mname]
        x = hook_x(cap, hook, N)
        d = write_sae(case, fit_decoder(case, draw_sae(case, x), x))
        sae = Sae(d)
        assert sae.k == k

        # direct encode vectors
        torch.manual_seed(seed + 1)
        xe = x.mean(0) + x.std(0) * torch.randn(3, x.shape[1], dtype=DT)
        pe = sae.pre(xe)
        sae.margins(pe, name + " encode")
        fe = sae.act(pe)
        enc = {"x": xe.tolist(), "pre": pe.tolist(), "f": fe.tolist(), "x_hat": sae.decode(fe).tolist()}

        pre = sae.pre(x)
        sae.margins(pre, name)
        f = sae.act(pre)
        xh = sae.decode(f)
        if name in TWIN:  # the tie rule decides somewhere on the data
            a, b = TWIN[name]
            assert torch.equal(pre[:, a], pre[:, b])
            assert bool(((f[:, a] > 0) != (f[:, b] > 0)).any())
        if name in DEAD:
            assert not bool((f[:, DEAD[name]] > 0).any())
        feats = features(sae, m, hook, pre, f, cap, N)
        assert any(v is None for v in feats["mean_act"]) or name not in DEAD

        loss_clean = ce(logits, targets)
        loss_sae = ce(m.run(inputs, (hook, xh))[0], targets)
        loss_zero = ce(m.run(inputs, (hook, torch.zeros_like(x)))[0], targets)
        ev = {"l0": float((f > 0).sum(1).to(DT).mean()),
              "explained_variance": float(1 - ((x - xh) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()),
              "mse": float(((x - xh) ** 2).mean()),
              "loss_clean": loss_clean, "loss_sae": loss_sae, "loss_zero": loss_zero,
              "ce_loss_score": (loss_zero - loss_sae) / (loss_zero - loss_clean)}
        is_z = hook.endswith("attn.hook_z")
        cases.append({"name": name, "model": "models/" + mname, "sae": "sae/" + name, "hook": hook,
                      "layer": int(hook.split(".")[1]), "architecture": arch,
                      "apply_b_dec_to_input": apply, "k": k, "dtype": dtype,
                      "d_in": x.shape[1], "d_sae": msae, "heads": m.H if is_z else None,
                      "head_dim": m.dh if is_z else None,
                      "encode": enc, "features": feats, "eval": ev})

    oracle = {"provenance": "written by scripts/oracle/gen_sae.py (float64 torch %s; see its "
                            "docstring); do not edit" % torch.__version__,
              "data": "sae/data.bin", "batch": B, "seq_len": T, "batches": BATCHES, "top": TOP,
              "cases": cases}
    with open(os.path.join(OUT, "oracle.json"), "w") as f:
        json.dump(oracle, f, separators=(",", ":"), allow_nan=False)
        f.write("\n")


if __name__ == "__main__":
    main()

"""A planted retrieval model for tests/test_retrieval.sh (SPEC §18) and the
reference the retrieval command is checked against.

usage: retrieval_planted.py build DIR
       retrieval_planted.py reference DIR LENGTHS DEPTHS [L:H,L:H,...]
         (prints JSON: {"retrieval": {"L:H": score}, "needle_accuracy": a,
          "runs": n}; the heads listed have their z set to 0)

The model (family "headscope": learned positions, no norms, no MLP, 2
layers x 2 heads of width 128, byte-level vocabulary) copies a needle by
induction, with weights set by hand so that every attention row is exactly
one-hot or exactly uniform (scores apart by 200 after the 1/sqrt(dh) scale,
so exp underflows to 0 in float): ties in the argmax are exact ties.
* embeddings: a one-hot code per used byte (TOK, 48 dims; other bytes 0)
  and a one-hot position (POS, 128 dims);
* layer 0 head 0, a previous-token head: the query reads position t, the
  key position s + 1; the value the token, written to PREV;
* layer 1 head 0, the induction (retrieval) head: the query reads the
  token, the key PREV, so position s matches when the token before it is
  the current one; the value the token, written to OUT;
* the other heads are all zeros (uniform attention, nothing written);
* the unembedding reads OUT.
The haystack is lowercase words of a..m; a needle " =QXVZW " asked with
" =" is found by the induction head, one asked with " %" (a key the needle
lacks) is not. The reference is independent of headscope: a float64 torch
forward of the whole sequence at every decoding step (no cache), the copy
rule and ROUGE-1 recall written from SPEC §18.
"""
import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                                "oracle"))
import gen_models as G  # noqa: E402  (its safetensors reader and writer)

CHARS = " .=#%" + "abcdefghijklm" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
C, P, L, H, DH = 48, 128, 2, 2, 128
TOK, POS, PREV, OUT = 0, C, C + P, 2 * C + P
D = 3 * C + P
GAP = 200.0  # scaled score between a match and the rest
NEEDLES = [
    {"needle": " =QXVZW ", "question": " =", "answer": "QXVZW"},
    {"needle": " #NMKJ. ", "question": " #", "answer": "NMKJ."},
    {"needle": " =ABCD ", "question": " %", "answer": "ABCD"},
]


def byte_tokenizer():
    """GPT-2's byte alphabet, no merges: id = the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): b for b, c in zip(bs, cs)}
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": level,
            "post_processor": None, "decoder": level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                      "byte_fallback": False, "vocab": vocab, "merges": []}}


def weights():
    code = {ord(ch): i for i, ch in enumerate(CHARS)}
    s = GAP * DH ** 0.5
    w = {"wte.weight": torch.zeros(256, D, dtype=torch.float64),
         "wpe.weight": torch.zeros(P, D, dtype=torch.float64)}
    for b, c in code.items():
        w["wte.weight"][b, TOK + c] = 1
    for p in range(P):
        w["wpe.weight"][p, POS + p] = 1
    for layer in range(L):
        for name, shape in (("q_proj", (H * DH, D)), ("k_proj", (H * DH, D)),
                            ("v_proj", (H * DH, D)), ("o_proj", (D, H * DH))):
            w[f"h.{layer}.attn.{name}.weight"] = torch.zeros(*shape, dtype=torch.float64)
    a0 = lambda n: w[f"h.0.attn.{n}.weight"]  # noqa: E731
    a1 = lambda n: w[f"h.1.attn.{n}.weight"]  # noqa: E731
    for p in range(P):
        a0("q_proj")[p, POS + p] = s          # q = position t
        if p + 1 < DH:
            a0("k_proj")[p + 1, POS + p] = 1  # k = position s + 1
    for c in range(C):
        a0("v_proj")[c, TOK + c] = 1
        a0("o_proj")[PREV + c, c] = 1
        a1("q_proj")[c, TOK + c] = s
        a1("k_proj")[c, PREV + c] = 1
        a1("v_proj")[c, TOK + c] = 1
        a1("o_proj")[OUT + c, c] = 1
    w["lm_head.weight"] = torch.zeros(256, D, dtype=torch.float64)
    for b, c in code.items():
        w["lm_head.weight"][b, OUT + c] = 10
    return w


def build(out):
    os.makedirs(out, exist_ok=True)
    cfg = {"model_type": "headscope", "vocab_size": 256, "n_layer": L, "d_model": D,
           "n_head": H, "n_kv_head": H, "head_dim": DH, "n_ctx": P, "positional": "learned",
           "norm": "layernorm", "input_norm": False, "final_norm": False, "mlp": "none",
           "d_ff": 0, "attn_bias": False, "mlp_bias": False, "lm_head_bias": False,
           "tie_word_embeddings": False}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    G.write_safetensors(os.path.join(out, "model.safetensors"), weights(), "F32")
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(byte_tokenizer(), f)
    rng = random.Random(5)
    words = [" " + "".join(rng.choice("abcdefghijklm") for _ in range(rng.randint(2, 6)))
             for _ in range(200)]
    with open(os.path.join(out, "haystack.txt"), "w") as f:
        f.write("".join(words).lstrip() + ".\n")
    with open(os.path.join(out, "needles.jsonl"), "w") as f:
        for n in NEEDLES:
            f.write(json.dumps(n) + "\n")


# ---- the reference ---------------------------------------------------------

def forward(w, ids, masked, plan=None):
    """Logits of the last position and each head's attention row there;
    under a KV plan (SPEC §18) a head it does not list sees only keys
    s < sink or t - window < s <= t."""
    T = len(ids)
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    causal = s <= t
    streaming = causal & ((s < plan["sink"]) | (s > t - plan["window"])) if plan else causal
    full = {tuple(e) for e in plan["full"]} if plan else set()
    rows = {}
    for layer in range(L):
        heads = lambda n: (x @ w[f"h.{layer}.attn.{n}.weight"].T).view(T, H, DH)  # noqa: E731
        q, k, v = heads("q_proj"), heads("k_proj"), heads("v_proj")
        z = torch.zeros(T, H, DH, dtype=torch.float64)
        for h in range(H):
            scores = (q[:, h] @ k[:, h].T) / DH ** 0.5
            seen = causal if not plan or (layer, h) in full else streaming
            a = torch.softmax(scores.masked_fill(~seen, float("-inf")), dim=-1)
            rows[(layer, h)] = a[-1]
            if (layer, h) not in masked:
                z[:, h] = a @ v[:, h]
        x = x + z.reshape(T, H * DH) @ w[f"h.{layer}.attn.o_proj.weight"].T
    return x[-1] @ w["lm_head.weight"].T, rows


WHITESPACE = set("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                 + "".join(chr(c) for c in range(0x2000, 0x200b)))


def rouge1_recall(text, reference):
    """SPEC §18: whitespace-split (Python's str.split), case-sensitive."""
    assert all(ch.isspace() == (ch in WHITESPACE) for ch in map(chr, range(0x3001)))
    got, want = text.split(), reference.split()
    left, hits = list(got), 0
    for word in want:
        if word in left:
            left.remove(word)
            hits += 1
    return hits / len(want) if want else 0.0


def first_max(row):
    return int((row == row.max()).nonzero()[0])


def reference(out, lengths, depths, masked, plan=None):
    w = {k: t for k, (_, t) in G.read_safetensors(os.path.join(out, "model.safetensors")).items()}
    hay = list(open(os.path.join(out, "haystack.txt"), "rb").read())
    needles = [json.loads(line) for line in open(os.path.join(out, "needles.jsonl"))]
    score = {(layer, h): 0.0 for layer in range(L) for h in range(H)}
    runs = ok_runs = 0
    for nd in needles:
        needle, question = list(nd["needle"].encode()), list(nd["question"].encode())
        steps = len(nd["answer"].encode()) + 8
        for n in lengths:
            for d in depths:
                off = int(d * n // 100)
                seq = hay[:off] + needle + hay[off:n] + question
                prompt = len(seq)
                copied = {key: set() for key in score}
                for _ in range(steps):
                    logits, rows = forward(w, seq, masked, plan)
                    tok = first_max(logits)
                    for key, row in rows.items():
                        j = first_max(row)
                        if off <= j < off + len(needle) and seq[j] == tok:
                            copied[key].add(j)
                    seq.append(tok)
                text = bytes(seq[prompt:]).decode("utf-8", errors="replace")
                runs += 1
                if rouge1_recall(text, nd["answer"]) > 0.5:
                    ok_runs += 1
                    for key in score:
                        score[key] += len(copied[key]) / len(needle)
    return {"retrieval": {f"{k[0]}:{k[1]}": v / runs for k, v in score.items()},
            "needle_accuracy": ok_runs / runs, "runs": runs}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        build(sys.argv[2])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "reference":
        masked = set()
        if len(sys.argv) == 6 and sys.argv[5]:
            masked = {tuple(map(int, x.split(":"))) for x in sys.argv[5].split(",")}
        print(json.dumps(reference(sys.argv[2], [int(x) for x in sys.argv[3].split(",")],
                                   [float(x) for x in sys.argv[4].split(",")], masked)))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

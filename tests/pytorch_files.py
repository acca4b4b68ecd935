"""Benign PyTorch checkpoints for tests/test_pytorch.sh, written by torch.save
itself (Debian's python3-torch), beside a safetensors copy of the same
tensors written here byte for byte (the reference the .bin must load as).

usage: pytorch_files.py SRC OUT_BIN OUT_ST [options]
       pytorch_files.py --jobs FILE      (each line: SRC OUT_BIN OUT_ST [options])

SRC is a Hugging Face directory with model.safetensors; OUT_BIN gets
config.json and pytorch_model.bin (or its shards and
pytorch_model.bin.index.json), OUT_ST config.json and model.safetensors of
the same tensors in the same dtypes. Options:
  --format zip|legacy   torch >= 1.6's zip, or _use_new_zipfile_serialization=False
  --dtype keep|f32|f16|bf16|f64   every floating tensor converted (torch's rounding)
  --shards N            N .bin shards and an index
  --views               every floating tensor a view at an offset of one shared storage
  --tied                lm_head.weight stored as the embedding itself (one storage)
  --buffers             the buffers transformers' models save beside the weights:
                        inv_freq (F32), position_ids (I64), GPT-2's bool/uint8 masks
                        and a 0-dimensional masked_bias
  --parameters          the tensors saved as nn.Parameter (_rebuild_parameter)
"""
import argparse
import json
import os
import shlex
import shutil
import struct
import sys

import numpy as np
import torch

ST_DTYPE = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
            "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool,
            "U8": torch.uint8}
NAME = {v: k for k, v in ST_DTYPE.items()}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dt = ST_DTYPE[t["dtype"]]
        blob = bytearray(data[a:b])
        if dt == torch.bfloat16:
            x = torch.frombuffer(blob, dtype=torch.int16).view(torch.bfloat16) if blob else \
                torch.zeros(0, dtype=dt)
        else:
            x = torch.frombuffer(blob, dtype=dt) if blob else torch.zeros(0, dtype=dt)
        out[name] = x.reshape(t["shape"]).clone()
    return out


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    if t.dtype == torch.bool:
        return t.to(torch.uint8).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    head, blobs, at = {}, [], 0
    for name, t in tensors.items():
        blob = tensor_bytes(t)
        head[name] = {"dtype": NAME[t.dtype], "shape": list(t.shape),
                      "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def buffers(sd, cfg):
    """The buffers transformers' models keep in their state dicts."""
    n_ctx = cfg.get("n_positions") or cfg.get("max_position_embeddings") or 8
    out = {}
    for name in list(sd):
        if name.endswith("attn.c_attn.weight"):  # GPT-2: a causal mask and masked_bias
            base = name[:-len("c_attn.weight")]
            mask = torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx)
            out[base + "bias"] = mask.to(torch.bool if len(out) % 4 == 0 else torch.uint8)
            out[base + "masked_bias"] = torch.tensor(-1e4)
        if name.endswith("self_attn.q_proj.weight"):  # Llama: rotary inv_freq
            base = name[:-len("q_proj.weight")]
            out[base + "rotary_emb.inv_freq"] = torch.arange(4, dtype=torch.float32)
    if any(k.endswith("word_embeddings.weight") for k in sd):  # BERT: position_ids
        prefix = "bert." if any(k.startswith("bert.") for k in sd) else ""
        out[prefix + "embeddings.position_ids"] = torch.arange(n_ctx).view(1, -1)
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out_bin")
    ap.add_argument("out_st")
    ap.add_argument("--format", choices=["zip", "legacy"], default="zip")
    ap.add_argument("--dtype", choices=["keep", "f32", "f16", "bf16", "f64"], default="keep")
    ap.add_argument("--shards", type=int, default=0)
    ap.add_argument("--views", action="store_true")
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--buffers", action="store_true")
    ap.add_argument("--parameters", action="store_true")
    a = ap.parse_args(argv)

    cfg = json.load(open(os.path.join(a.src, "config.json")))
    sd = read_safetensors(os.path.join(a.src, "model.safetensors"))
    conv = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
            "f64": torch.float64}.get(a.dtype)
    if conv is not None:
        sd = {k: v.to(conv) if v.is_floating_point() else v for k, v in sd.items()}
    if a.buffers:
        sd.update(buffers(sd, cfg))
    if a.views:  # one storage per dtype, each tensor a view at its offset
        by_dtype = {}
        for k, v in sd.items():
            if v.is_floating_point() and v.dim() > 0:
                by_dtype.setdefault(v.dtype, []).append(k)
        for dt, names in by_dtype.items():
            flat = torch.cat([sd[k].flatten() for k in names])
            at = 0
            for k in names:
                n = sd[k].numel()
                sd[k] = flat[at:at + n].view(sd[k].shape)
                at += n
    if a.tied:
        emb = [k for k in sd if k.endswith("embed_tokens.weight") or k.endswith("wte.weight")]
        sd["lm_head.weight"] = sd[emb[0]]
    if a.parameters:
        sd = {k: torch.nn.Parameter(v, requires_grad=False) if v.is_floating_point() else v
              for k, v in sd.items()}

    for d in (a.out_bin, a.out_st):
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(a.src, "config.json"), d)
    write_safetensors(os.path.join(a.out_st, "model.safetensors"),
                      {k: v.detach() for k, v in sd.items()})
    zipfile = a.format == "zip"
    if not a.shards:
        torch.save(sd, os.path.join(a.out_bin, "pytorch_model.bin"),
                   _use_new_zipfile_serialization=zipfile)
        return
    names = list(sd)
    weight_map = {}
    for s in range(a.shards):
        part = names[s::a.shards]
        fname = "pytorch_model-%05d-of-%05d.bin" % (s + 1, a.shards)
        # a shard's tensors keep their own storages (a view's whole storage is saved)
        torch.save({k: sd[k] for k in part}, os.path.join(a.out_bin, fname),
                   _use_new_zipfile_serialization=zipfile)
        weight_map.update({k: fname for k in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map},
              open(os.path.join(a.out_bin, "pytorch_model.bin.index.json"), "w"), indent=2)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--jobs"]:
        for line in open(sys.argv[2]):
            if line.strip():
                main(shlex.split(line))
    else:
        main(sys.argv[1:])

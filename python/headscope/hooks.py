"""TransformerLens's hook names over headscope's hook sites (model/hooks.h).

  hook_embed                    resid_pre of layer 0 (without positions, the
                                embeddings themselves; with learned positions
                                W_E[ids], computed from the weights: layer 0
                                reads hook_embed + hook_pos_embed)
  hook_pos_embed                W_pos[:T] (learned positions only)
  blocks.L.hook_resid_pre       resid_pre of layer L
  blocks.L.attn.hook_q, hook_k  q, k (models without RoPE)
  blocks.L.attn.hook_rot_q,     q, k after RoPE (rotary models: headscope's q
    hook_rot_k                  and k sites are after RoPE and the q/k norms,
                                TransformerLens's hook_rot_q/hook_rot_k)
  blocks.L.attn.hook_v          v                      [batch, pos, kv_head, d_head]
  blocks.L.attn.hook_attn_scores attn_scores (masked keys -inf) [batch, head, q, k]
  blocks.L.attn.hook_pattern    pattern                [batch, head, q, k]
  blocks.L.attn.hook_z          z                      [batch, pos, head, d_head]
  blocks.L.hook_attn_out        attn_out               [batch, pos, d_model]
  blocks.L.hook_mlp_out         mlp_out (models with an MLP)
  blocks.L.hook_resid_post      resid_pre of layer L + 1
  ln_final.hook_normalized      the final norm's output, its weight and bias
                                applied (what the unembedding reads; as
                                TransformerLens's without fold_ln)

k and v keep the key/value heads of GQA models (TransformerLens's
ungroup_grouped_query_attention=False).
"""

import re

import numpy as np

from . import _lib
from ._lib import Error

S = _lib.SITES  # site name -> id


class HookName(str):
    """The name a hook function gets as its second argument: a str, with
    TransformerLens's HookPoint spellings hook.name and hook.layer()."""

    def __new__(cls, name, point):
        s = str.__new__(cls, name)
        s._layer = point.layer_index
        return s

    @property
    def name(self):
        return str(self)

    def layer(self):
        return self._layer


class Point:
    """Where a hook name lives: a site of a layer, and how its array is shaped."""

    def __init__(self, site, layer, kind, layer_index=None):
        self.site = S[site] if site else None
        self.site_name = site
        self.layer = layer
        self.kind = kind  # "resid", "heads", "maps", "embed", "pos_embed"
        self.layer_index = layer if layer_index is None else layer_index
        self.derived = kind in ("embed", "pos_embed")

    def shape(self, m, B, T):
        if self.kind in ("resid", "embed", "pos_embed"):
            return (B, T, m.d_model)
        shape = (_lib.ctypes.c_int * 4)()
        _lib.check(_lib.lib.hs_api_site_shape(m._h, self.site, self.layer, B, T, shape))
        return tuple(shape)

    def compute(self, m, ids, cache):
        """The derived names (learned positions): from the weights."""
        T = ids.shape[1]
        p = m.params
        s = m.dtype.type(np.sqrt(m.d_model)) if m.embed_scale else None
        if self.kind == "embed":
            e = p["wte.weight"][ids]
        else:
            e = np.broadcast_to(p["wpe.weight"][:T], (ids.shape[0], T, m.d_model)).copy()
        return e * s if s is not None else e

    def trampoline(self, m, ids, name, fn, errors):
        """The C hook calling fn(array, name) on the site's tensor."""
        resid = self.kind == "resid"

        def cb(ctx, site, layer, x, e0, e1, e2, e3):
            try:
                n = e0 * e1 * e2 * e3
                a = np.ctypeslib.as_array(x, shape=(n,))
                a = a.reshape((e0, e1, e3) if resid else (e0, e1, e2, e3))
                _apply(fn, a, name)
                return 0
            except BaseException as exc:  # raised again by the caller
                errors.append(exc)
                return 1

        return _lib.HOOK_FN(cb)


def _apply(fn, a, name):
    r = fn(a, name)
    if r is None or r is a:
        return
    if hasattr(r, "detach"):  # a torch tensor
        r = r.detach().cpu().numpy()
    r = np.asarray(r)
    if r.shape != a.shape:
        raise ValueError("hook %s returned shape %s for an activation of shape %s"
                         % (name, r.shape, a.shape))
    np.copyto(a, r, casting="unsafe")


def embed_trampoline(m, ids, hooks, errors):
    """With learned positions, hook_embed and hook_pos_embed are the two
    terms of resid_pre 0: their hooks see W_E[ids] and W_pos[:T], in the
    order given, and layer 0 reads their sum (the sum the forward made, bit
    for bit, when the hooks change nothing)."""
    p = m.params
    s = m.dtype.type(np.sqrt(m.d_model)) if m.embed_scale else None

    def cb(ctx, site, layer, x, e0, e1, e2, e3):
        try:
            B, T, d = e0, e1, e3
            a = np.ctypeslib.as_array(x, shape=(B * T * d,)).reshape(B, T, d)
            e = p["wte.weight"][ids]
            pos = np.broadcast_to(p["wpe.weight"][:T], (B, T, d)).copy()
            if s is not None:
                e, pos = e * s, pos * s
            for pt, name, fn in hooks:
                _apply(fn, e if pt.kind == "embed" else pos, name)
            np.add(e, pos, out=a)
            return 0
        except BaseException as exc:
            errors.append(exc)
            return 1

    return _lib.HOOK_FN(cb)


_BLOCK = re.compile(r"^blocks\.(\d+)\.(attn\.)?(hook_[a-z_]+)$")
_ATTN = {"hook_q": "q", "hook_k": "k", "hook_v": "v", "hook_z": "z", "hook_rot_q": "q",
         "hook_rot_k": "k", "hook_pattern": "pattern", "hook_attn_scores": "attn_scores"}
_RESID = {"hook_resid_pre": 0, "hook_resid_post": 1}
_OUT = {"hook_attn_out": "attn_out", "hook_mlp_out": "mlp_out"}


def resolve(m, name):
    """The Point of hook `name` in model m (Error naming what it lacks)."""
    if name == "hook_embed":
        return Point("resid_pre", 0, "embed" if m.learned_positions else "resid", 0)
    if name == "hook_pos_embed":
        if not m.learned_positions:
            raise Error("hook_pos_embed: the model has no learned positions (%s)" % m.family)
        return Point("resid_pre", 0, "pos_embed", 0)
    if name == "ln_final.hook_normalized":
        if not m.final_norm:
            raise Error("ln_final.hook_normalized: the model has no final norm")
        return Point("final", 0, "resid")
    mt = _BLOCK.match(name)
    if not mt:
        raise Error("unknown hook name %r (see Model.hook_names)" % name)
    l, attn, hook = int(mt.group(1)), bool(mt.group(2)), mt.group(3)
    if l >= m.n_layers:
        raise Error("%s: the model has %d layers" % (name, m.n_layers))
    if attn and hook in _ATTN:
        site = _ATTN[hook]
        rot = hook in ("hook_rot_q", "hook_rot_k")
        if m.rotary and not m.mla and hook in ("hook_q", "hook_k"):
            raise Error("%s: headscope's %s site is after RoPE (and the q/k norms): use "
                        "blocks.%d.attn.hook_rot_%s" % (name, site, l, site))
        if rot and (not m.rotary or m.mla):
            raise Error("%s: the model has no rotary %s (use blocks.%d.attn.hook_%s)"
                        % (name, site, l, site))
        if m.mla and site in ("k", "v"):
            raise Error("%s: an MLA model has no per-head %s" % (name, site))
        kind = "maps" if site in ("pattern", "attn_scores") else "heads"
        return Point(site, l, kind)
    if not attn and hook in _RESID:
        return Point("resid_pre", l + _RESID[hook], "resid", l)
    if not attn and hook in _OUT:
        if hook == "hook_mlp_out" and not m.d_mlp:
            raise Error("%s: the model has no MLP" % name)
        return Point(_OUT[hook], l, "resid")
    raise Error("unknown hook name %r (see Model.hook_names)" % name)


def all_hook_names(m):
    names = ["hook_embed"] + (["hook_pos_embed"] if m.learned_positions else [])
    rot = m.rotary and not m.mla
    for l in range(m.n_layers):
        b = "blocks.%d." % l
        names.append(b + "hook_resid_pre")
        names += [b + "attn.hook_" + ("rot_q" if rot else "q")]
        if not m.mla:
            names += [b + "attn.hook_" + ("rot_k" if rot else "k"), b + "attn.hook_v"]
        names += [b + "attn.hook_attn_scores", b + "attn.hook_pattern", b + "attn.hook_z",
                  b + "hook_attn_out"]
        if m.d_mlp:
            names.append(b + "hook_mlp_out")
        names.append(b + "hook_resid_post")
    if m.final_norm:
        names.append("ln_final.hook_normalized")
    return names


def select_names(m, spec):
    """Hook names from a name, a list of names, a function of a name or None (all)."""
    if spec is None:
        return all_hook_names(m)
    if callable(spec):
        return [n for n in all_hook_names(m) if spec(n)]
    names = [spec] if isinstance(spec, str) else list(spec)
    for n in names:
        resolve(m, n)
    return names


_SHORT_ATTN = {"q", "k", "v", "z", "rot_q", "rot_k", "pattern", "attn_scores"}


def get_act_name(name, layer=None):
    """TransformerLens's utils.get_act_name: ("pattern", 3) ->
    "blocks.3.attn.hook_pattern"; "embed" -> "hook_embed"."""
    if name.startswith("hook_") or name.startswith("blocks.") or name.startswith("ln_final"):
        return name
    if name == "scores":
        name = "attn_scores"
    if name in ("embed", "pos_embed"):
        return "hook_" + name
    if name in ("normalized", "ln_final", "final"):
        return "ln_final.hook_normalized"
    if layer is None:
        raise Error("get_act_name(%r): which layer?" % name)
    if name in _SHORT_ATTN:
        return "blocks.%d.attn.hook_%s" % (layer, name)
    if name in ("resid_pre", "resid_post", "attn_out", "mlp_out"):
        return "blocks.%d.hook_%s" % (layer, name)
    raise Error("get_act_name: unknown activation %r" % name)

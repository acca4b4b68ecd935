"""Hostile PyTorch checkpoints for tests/test_pytorch.sh, written opcode by
opcode (no torch, no pickle.dumps): each a folder CASE/ holding SRC's
config.json and a pytorch_model.bin that must be refused, beside `valid`,
the same assembler's faithful copy of SRC's tensors, which must load (so a
refusal is the case's fault, not the assembler's).

usage: pytorch_hostile.py SRC OUT MARKER

SRC: a Hugging Face directory with model.safetensors (F32). OUT/cases.tsv
lists CASE<TAB>what the refusal must say. The payloads that would run a
command (os.system and friends) run `touch MARKER`: the test checks the
marker stays absent, and that Python's own unpickler, given the same
pickle, creates it (the payload is live).
"""
import io
import json
import os
import shutil
import struct
import sys
import warnings
import zipfile
import zlib

SRC, OUT, MARKER = sys.argv[1:4]
warnings.simplefilter("ignore")  # zipfile on the duplicate member it is asked to write


# ---- the assembler ------------------------------------------------------------

def proto(n=2):
    return b"\x80" + bytes([n])


def glob(mod, name):
    return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"


def stack_glob(mod, name):
    return uni(mod) + uni(name) + b"\x93"


def uni(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def num(i):
    if 0 <= i < 256:
        return b"K" + bytes([i])
    if -2**31 <= i < 2**31:
        return b"J" + struct.pack("<i", i)
    n = (i.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + i.to_bytes(n, "little", signed=True)


def tup(*items):
    return b"(" + b"".join(items) + b"t"


def ordered_dict():
    return glob("collections", "OrderedDict") + b")R"


def pid(key, numel, cls="FloatStorage", legacy=False, view=None):
    items = [uni("storage"), glob("torch", cls), uni(key), uni("cpu"), num(numel)]
    if legacy:
        items.append(b"N" if view is None else tup(uni(view[0]), num(view[1]), num(view[2])))
    return tup(*items) + b"Q"


def tensor(storage, offset, size, stride, extra=b""):
    return (glob("torch._utils", "_rebuild_tensor_v2") +
            tup(storage, num(offset), tup(*map(num, size)), tup(*map(num, stride)),
                b"\x89", ordered_dict(), *([extra] if extra else [])) + b"R")


def contiguous(shape):
    stride, s = [], 1
    for n in reversed(shape):
        stride.insert(0, s)
        s *= n
    return stride


def state_dict(items, header=b""):
    """items: [(key bytes, value bytes)] into an OrderedDict, as torch writes it."""
    body = b"".join(k + v for k, v in items)
    return proto() + header + ordered_dict() + b"(" + body + b"u." if items else \
        proto() + header + ordered_dict() + b"."


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return [(k, v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"]


TENSORS = read_safetensors(os.path.join(SRC, "model.safetensors"))


def items_of(legacy=False, change=None):
    """SRC's tensors, each in a storage of its own keyed by its index;
    change(i, name, shape) may return replacement value bytes."""
    out = []
    for i, (name, shape, blob) in enumerate(TENSORS):
        v = change(i, name, shape) if change else None
        if v is None:
            v = tensor(pid(str(i), len(blob) // 4, legacy=legacy), 0, shape, contiguous(shape))
        out.append((uni(name), v))
    return out


def storages(extra=None):
    data = {str(i): blob for i, (_, _, blob) in enumerate(TENSORS)}
    data.update(extra or {})
    return data


# ---- the two containers -------------------------------------------------------

def zip_file(pkl, data, method=zipfile.ZIP_STORED, names=None, members=None):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(zipfile.ZipInfo("archive/data.pkl"), pkl)
        z.writestr("archive/version", b"3\n")
        for key, blob in data.items():
            info = zipfile.ZipInfo((names or {}).get(key, "archive/data/" + key))
            info.compress_type = method
            z.writestr(info, blob)
        for name, blob in (members or []):
            z.writestr(zipfile.ZipInfo(name), blob)
    return buf.getvalue()


MAGIC = proto() + num(0x1950a86a20f9469cfc6c) + b"."
VERSION = proto() + num(1001) + b"."
SYSINFO = proto() + b"}(" + uni("protocol_version") + num(1001) + uni("little_endian") + \
    b"\x88" + uni("type_sizes") + b"}(" + uni("short") + num(2) + uni("int") + num(4) + \
    uni("long") + num(8) + b"uu."


def legacy_file(pkl, data, keys=None, counts=None):
    keys = list(data) if keys is None else keys
    out = MAGIC + VERSION + SYSINFO + pkl
    out += proto() + b"](" + b"".join(uni(k) for k in keys) + b"e."
    for k in keys:
        blob = data.get(k, b"")
        n = (counts or {}).get(k, len(blob) // 4)
        out += struct.pack("<q", n) + blob
    return out


# ---- the cases ----------------------------------------------------------------

cases = []


def case(name, expect, blob):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(SRC, "config.json"), d)
    open(os.path.join(d, "pytorch_model.bin"), "wb").write(blob)
    cases.append((name, expect))


def zcase(name, expect, items, **kw):
    case(name, expect, zip_file(state_dict(items), storages(kw.pop("data", None)), **kw))


def first(value):
    """SRC's tensors with the first one's value replaced."""
    return items_of(change=lambda i, n, s: value if i == 0 else None)


os.makedirs(OUT, exist_ok=True)
SHAPE0 = TENSORS[0][1]
NUMEL0 = len(TENSORS[0][2]) // 4
system = glob("os", "system") + tup(uni("touch " + MARKER)) + b"R"

zcase("valid", "", items_of())
case("valid_legacy", "", legacy_file(state_dict(items_of(legacy=True)), storages()))

# code that would run
zcase("reduce_os_system", "os.system", first(system))
zcase("stack_global_eval", "builtins.eval",
      first(stack_glob("builtins", "eval") + tup(uni("__import__('os').system('touch %s')"
                                                     % MARKER)) + b"R"))
case("legacy_os_system", "os.system",
     legacy_file(state_dict(items_of(legacy=True, change=lambda i, n, s: system if i == 0
                                     else None)), storages()))
case("top_level_system", "os.system", zip_file(proto() + system + b".", storages()))
zcase("build_on_a_dict", "BUILD", first(b"}}b"))
zcase("build_with_a_tuple", "BUILD", first(ordered_dict() + tup(uni("x")) + b"b"))
zcase("newobj", "NEWOBJ", first(glob("collections", "OrderedDict") + b")\x81"))
zcase("inst", "INST", first(b"(" + uni("touch") + b"ios\nsystem\n"))
zcase("obj", "OBJ", first(b"(" + glob("collections", "OrderedDict") + b"o"))
zcase("ext1", "EXT1", first(b"\x82\x01"))
zcase("reduce_storage_class", "torch.FloatStorage", first(glob("torch", "FloatStorage") + b")R"))
zcase("out_of_band_buffer", "out-of-band", first(b"\x97"))
zcase("readonly_buffer", "out-of-band", first(b"\x97\x98"))
case("protocol_6", "protocol", zip_file(b"\x80\x06" + b"}.", storages()))

# tensors that lie
zcase("view_past_storage", "outside its storage",
      first(tensor(pid("0", NUMEL0), 8, SHAPE0, contiguous(SHAPE0))))
zcase("negative_offset", "outside its storage",
      first(tensor(pid("0", NUMEL0), -1, SHAPE0, contiguous(SHAPE0))))
zcase("negative_size", "size or stride",
      first(tensor(pid("0", NUMEL0), 0, [-5, 16], [16, 1])))
zcase("overflowing_sizes", "overflow",
      first(tensor(pid("0", NUMEL0), 0, [2**40, 2**40], [2**40, 1])))
zcase("int64_beyond_size", "size or stride",
      first(tensor(pid("0", NUMEL0), 0, [2**70, 16], [16, 1])))
zcase("int64_beyond_offset", "_rebuild_tensor_v2",
      first(tensor(pid("0", NUMEL0), 2**64, SHAPE0, contiguous(SHAPE0))))
zcase("negative_stride", "not contiguous",
      first(tensor(pid("0", NUMEL0), 0, SHAPE0, [-16, 1])))
zcase("transposed_stride", "not contiguous",
      first(tensor(pid("0", NUMEL0), 0, SHAPE0, [1, SHAPE0[0]])))
zcase("storage_size_overflow", "overflows",
      first(tensor(pid("0", 2**62), 0, SHAPE0, contiguous(SHAPE0))))
zcase("storage_larger_than_member", "holds",
      first(tensor(pid("0", NUMEL0 * 2), 0, SHAPE0, contiguous(SHAPE0))))
zcase("missing_storage_member", "missing",
      first(tensor(pid("999", NUMEL0), 0, SHAPE0, contiguous(SHAPE0))))
zcase("storage_key_traversal", "plain name",
      first(tensor(pid("../../etc/passwd", NUMEL0), 0, SHAPE0, contiguous(SHAPE0))))
zcase("two_classes_one_storage", "two classes",
      items_of(change=lambda i, n, s: tensor(pid("0", NUMEL0 * 2, cls="HalfStorage"), 0, s,
                                             contiguous(s)) if i == 1 else None))
zcase("bool_parameter", "BOOL",
      first(tensor(pid("b", NUMEL0, cls="BoolStorage"), 0, SHAPE0, contiguous(SHAPE0))),
      data={"b": bytes(NUMEL0)})
zcase("not_a_tensor", "not a tensor", first(num(7)))
zcase("duplicate_key", "twice", items_of() + items_of()[:1])
case("not_a_dict", "not a state dict", zip_file(proto() + b"]." , storages()))
zcase("rebuild_wrong_arity", "_rebuild_tensor_v2",
      first(glob("torch._utils", "_rebuild_tensor_v2") + tup(num(1)) + b"R"))
zcase("parameter_of_int", "_rebuild_parameter",
      first(glob("torch._utils", "_rebuild_parameter") + tup(num(1), b"\x89", ordered_dict())
            + b"R"))

# the machine itself
zcase("memo_never_set", "memo slot never set", first(b"h\x05"))
zcase("memo_slot_huge", "memo slot beyond", first(b"N" + b"r\xf0\xff\xff\xff"))
zcase("memo_self_nesting", "nested deeper", first(b"]q\x00" + b"h\x00a" * 100))
zcase("deep_lists", "nested deeper", first(b"]" * 1000 + b"a" * 999))
zcase("deep_tuples", "nested deeper", first(b"N" + b"\x85" * 1000))
zcase("deep_marks", "marks nested deeper", first(b"(" * 1000 + b"N" + b"t" * 1000))
zcase("stack_underflow", "stack is empty", first(b"0" * 5 + b"N"))
zcase("long4_past_end", "past the end", first(b"\x8b\xff\xff\xff\x7f"))
zcase("unicode_past_end", "past the end", first(b"X\xff\xff\xff\xff"))
case("no_stop", "without its STOP", zip_file(proto() + ordered_dict(), storages()))
case("unknown_opcode", "unknown opcode", zip_file(proto() + b"\xff.", storages()))

# archives that lie
pkl = state_dict(items_of())
case("deflated_member", "compressed",
     zip_file(pkl, storages(), method=zipfile.ZIP_DEFLATED))
bomb = io.BytesIO()
with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
    info = zipfile.ZipInfo("archive/data.pkl")
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, proto() + b"N" * (64 << 20) + b".")  # 64 MiB, 64 KiB deflated
case("zip_bomb_pickle", "compressed", bomb.getvalue())
case("path_traversal", "relative path",
     zip_file(pkl, storages(), members=[("archive/../../evil", b"x")]))
case("absolute_member", "relative path", zip_file(pkl, storages(), members=[("/etc/evil", b"x")]))
case("two_pickles", "two pickles", zip_file(pkl, storages(), members=[("other/data.pkl", pkl)]))
dup = io.BytesIO()
with zipfile.ZipFile(dup, "w") as z:
    z.writestr("archive/data.pkl", pkl)
    for key, blob in storages().items():
        z.writestr("archive/data/" + key, blob)
    z.writestr("archive/data/0", TENSORS[0][2])
case("duplicate_member", "appears twice", dup.getvalue())
case("no_pickle", "data.pkl", zip_file(b"", {}, names={}, members=[]).replace(
    b"archive/data.pkl", b"archive/data.pkx"))
case("truncated_zip", "central directory", zip_file(pkl, storages())[:-30])
case("big_endian", "big-endian",
     zip_file(pkl, storages(), members=[("archive/byteorder", b"big")]))
case("not_a_checkpoint", "not a PyTorch checkpoint", b"GIF89a" + bytes(100))

# legacy files that lie about their storages
lpkl = state_dict(items_of(legacy=True))
case("legacy_unlisted_storage", "has no record", legacy_file(lpkl, storages(), keys=["0"]))
case("legacy_extra_key", "not a storage", legacy_file(lpkl, storages({"77": b""})))
case("legacy_key_twice", "listed twice",
     legacy_file(lpkl, storages(), keys=list(storages()) + ["0"]))
case("legacy_count_lies", "record holds", legacy_file(lpkl, storages(), counts={"1": 3}))
case("legacy_truncated", "past the end", legacy_file(lpkl, storages())[:-40])
case("legacy_view_outside", "view",
     legacy_file(state_dict(items_of(legacy=True, change=lambda i, n, s: tensor(
         pid("0", NUMEL0, legacy=True, view=("v", NUMEL0 - 1, 5)), 0, s, contiguous(s))
         if i == 0 else None)), storages()))
case("legacy_bad_magic", "magic number", b"\x80\x02K\x05." + legacy_file(lpkl, storages())[20:])
case("legacy_big_endian", "big-endian",
     legacy_file(lpkl, storages()).replace(uni("little_endian") + b"\x88",
                                           uni("little_endian") + b"\x89"))

with open(os.path.join(OUT, "cases.tsv"), "w") as f:
    for name, expect in cases:
        f.write("%s\t%s\n" % (name, expect))

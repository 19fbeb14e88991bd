#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs, fuzz/corpus/<target>/*: small valid
files of each format, so libFuzzer starts from inputs that get past the
first checks. Needs Pillow for the image seeds. The files are committed;
rerun only to change them:  python3 scripts/make_fuzz_corpus.py
"""
import gzip
import io
import json
import os
import struct

from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] -> the file's bytes."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


# ---- safetensors ----
write("safetensors", "f32_metadata", safetensors([("w", "F32", [2, 2], f32(1, 2, 3, 4))], {"format": "pt"}))
write("safetensors", "dtypes", safetensors([
    ("a", "F64", [2], struct.pack("<2d", 1.5, -2)), ("b", "I64", [1, 1], struct.pack("<q", 7)),
    ("c", "F16", [2], b"\x00\x3c\x00\xc0"), ("d", "BF16", [1], b"\x80\x3f"), ("e", "U8", [3], b"\x01\x02\x03"),
    ("f", "F32", [0, 3], b""), ("g", "F32", [], f32(0.5))]))
write("safetensors", "empty", safetensors([]))

# ---- cifar10: two records ----
rec = lambda label, v: bytes([label]) + bytes((v + i) % 256 for i in range(3072))
write("cifar10", "two_records", rec(3, 0) + rec(9, 100))


# ---- fashion_mnist: [split byte] images-file labels-file ----
def idx(magic, sizes, payload):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", s) for s in sizes) + payload


def fashion_seed(images, labels):
    n = len(images) + len(labels)
    for b in range(256):
        if 1 + n * b // 256 == 1 + len(images):
            return bytes([b]) + images + labels
    raise ValueError("no split byte for these sizes")


imgs = idx(2051, [2, 3, 3], bytes(range(18)))
labs = idx(2049, [2], bytes([1, 9]))
gz = lambda b: gzip.compress(b, mtime=0)
write("fashion_mnist", "plain", fashion_seed(imgs, labs))
write("fashion_mnist", "gzipped", fashion_seed(gz(imgs), gz(labs)))
write("fashion_mnist", "two_members", fashion_seed(gz(imgs[:10]) + gz(imgs[10:]), gz(labs)))

# ---- image: [channels byte] file ----
img = Image.new("RGB", (5, 3))
img.putdata([(i * 40 % 256, i * 90 % 256, i * 20 % 256) for i in range(15)])
for fmt, mode, channels in [("PNG", "RGB", 1), ("PNG", "RGBA", 2), ("PNG", "L", 0), ("BMP", "RGB", 1),
                            ("JPEG", "RGB", 1), ("GIF", "P", 2), ("TGA", "RGB", 0)]:
    out = io.BytesIO()
    img.convert(mode).save(out, fmt)
    write("image", "%s_%s" % (fmt.lower(), mode.lower()), bytes([channels]) + out.getvalue())

# ---- checkpoint: [reader byte] input ----
groups = [{"lr": 0.1, "momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False,
           "maximize": False, "initial_lr": 0.1, "params": [0, 1]}]
sgd = safetensors([("state.0.momentum_buffer", "F32", [2, 3], f32(*range(6))),
                   ("state.1.momentum_buffer", "F32", [3], f32(1, 2, 3))],
                  {"optimizer": "SGD", "param_groups": json.dumps(groups)})
write("checkpoint", "sgd_state", b"\x00" + sgd)
adam_groups = [{"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01, "amsgrad": False,
                "initial_lr": 0.001, "params": [0, 1]}]
adam = safetensors([("state.0.step", "F32", [], f32(3)), ("state.0.exp_avg", "F32", [2, 3], f32(*range(6))),
                    ("state.0.exp_avg_sq", "F32", [2, 3], f32(*range(6)))],
                   {"optimizer": "AdamW", "param_groups": json.dumps(adam_groups)})
write("checkpoint", "adamw_state", b"\x00" + adam)
write("checkpoint", "param_groups", b"\x01" + json.dumps(groups).encode())
write("checkpoint", "scheduler", b"\x02" + json.dumps(
    {"last_epoch": 3, "_step_count": 4, "base_lrs": [0.1], "_last_lr": [0.05]}).encode())


def mt19937_64_state(seed):
    """std::mt19937_64's text state after seed(seed), as libstdc++ writes it."""
    x = [seed]
    for i in range(1, 312):
        prev = x[-1]
        x.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) % 2**64)
    return " ".join(str(v) for v in x) + " 312"


write("checkpoint", "generator", b"\x03" + ("42 0 0 " + mt19937_64_state(42)).encode())

# ---- store: [control byte] a client's requests ----
def req(cmd, key, value=b""):
    return bytes([cmd]) + struct.pack("<I", len(key)) + key + struct.pack("<I", len(value)) + value


session = (req(1, b"k", b"v") + req(2, b"k") + req(3, b"n", b"5") + req(3, b"n", b"-2") + req(4, b"k") +
           req(5, b"k") + req(6, b"") + req(2, b"absent"))
write("store", "one_client", b"\x03" + session)
write("store", "two_clients", b"\x15" + session + req(3, b"k2", b"9223372036854775807") + req(3, b"k2", b"1"))

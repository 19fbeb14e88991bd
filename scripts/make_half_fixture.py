#!/usr/bin/env python3
"""Writes tests/goldens/half_conversions.bin: PyTorch's float16/bfloat16
conversions, for tests/test_half.cpp to check minidl's bit for bit.

    python3 scripts/make_half_fixture.py   # needs torch (CPU is enough)

File: 8 bytes b"MDLHALF1", 8 bytes the payload's size (little-endian
uint64), then the payload compressed with zlib. The payload is a sequence of
sections, each a little-endian uint32 count n followed by arrays of n values:

  1. f16 -> f32     u32 f32_bits[65536]            (index = the float16 bits)
  2. bf16 -> f32    u32 f32_bits[65536]            (index = the bfloat16 bits)
  3. f16 -> bf16    u16 bf16_bits[65536]
  4. bf16 -> f16    u16 f16_bits[65536]
  5. f32 inputs     u32 in[n], u16 f16[n], u16 bf16[n]   (in: float32 bits)
  6. f64 inputs     u64 in[n], u16 f16[n], u16 bf16[n]   (in: float64 bits)
  7. i64 inputs     u64 in[n], u16 f16[n], u16 bf16[n]   (in: int64 values)

Inputs are sorted and stored as differences from the previous one (the first
from 0), modulo 2^32 or 2^64: zlib compresses these differences ~15x better.

Every conversion is torch's tensor conversion (Tensor.to) on one thread, one
tensor per section, so values go through ATen's vectorized loop on a CPU with
AVX2/AVX-512 (sections 1-4 hold a multiple of 16 values). The last n % 16
values of sections 5-7 take ATen's scalar tail, which rounds the same way but
can spell NaN differently (float64 -> bfloat16: 0x7FC0 there, 0xFFFF in the
body; float16 -> float32: 0x7FFFFFFF in the tail), which is why
tests/test_half.cpp accepts any NaN where torch's bfloat16 result is NaN.
"""
import array
import random
import struct
import sys
import zlib
from pathlib import Path

import torch

torch.set_num_threads(1)
OUT = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "half_conversions.bin"


def u32_tensor(bits):  # float32 tensor with these bit patterns
    return torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in bits], dtype=torch.int64).to(
        torch.int32).view(torch.float32)


def u64_tensor(bits):  # float64 tensor with these bit patterns
    return torch.tensor([b - (1 << 64) if b >= 1 << 63 else b for b in bits], dtype=torch.int64).view(torch.float64)


def u16_tensor(bits, dtype):
    return torch.tensor([b - (1 << 16) if b >= 1 << 15 else b for b in bits], dtype=torch.int16).view(dtype)


def bits16(t):
    return [x & 0xFFFF for x in t.contiguous().view(torch.int16).tolist()]


def bits32(t):
    return [x & 0xFFFFFFFF for x in t.contiguous().view(torch.int32).tolist()]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f64_bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def deltas(values, typecode, bits):
    out, prev = array.array(typecode), 0
    for v in values:
        out.append((v - prev) % (1 << bits))
        prev = v
    return out


def section(count, *arrays):
    return struct.pack("<I", count) + b"".join(a.tobytes() for a in arrays)


def conversions(t):
    return array.array("H", bits16(t.to(torch.float16))), array.array("H", bits16(t.to(torch.bfloat16)))


def main():
    assert sys.byteorder == "little"
    rng = random.Random(20240611)
    all16 = list(range(1 << 16))
    f16 = u16_tensor(all16, torch.float16)
    bf16 = u16_tensor(all16, torch.bfloat16)
    f16_to_f32 = bits32(f16.to(torch.float32))
    bf16_to_f32 = bits32(bf16.to(torch.float32))

    # float32 inputs. Midpoints between neighbouring values are exact in
    # float32 (12 and 9 significant bits), so mid and its float32 neighbours
    # are the ties and the values just either side of them.
    f32_in = set(f16_to_f32) | set(bf16_to_f32)
    for sign in (0, 1 << 31):
        for k in range(0x7BFF):  # float16: 0 .. 65504, and 65504 .. 65520 (the overflow tie) below
            lo, hi = struct.unpack("<ff", struct.pack("<II", f16_to_f32[k], f16_to_f32[k + 1]))
            mid = f32_bits((lo + hi) / 2)
            f32_in.update(sign | b for b in (mid - 1, mid, mid + 1))
        mid = f32_bits(65520.0)
        f32_in.update(sign | b for b in (mid - 1, mid, mid + 1))
        for k in range(0x7F80):  # bfloat16: 0 .. max, and max .. the overflow tie
            mid = (k << 16) + 0x8000
            f32_in.update(sign | b for b in (mid - 1, mid, mid + 1))
        f32_in.update(sign | b for b in range(0, 64))  # float32 subnormals
        f32_in.update(sign | b for b in (0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000))
        f32_in.update(sign | rng.randrange(1, 1 << 23) for _ in range(256))  # float32 subnormals
        f32_in.update(sign | 0x7F800000 | rng.randrange(1, 1 << 23) for _ in range(256))  # NaN payloads
    f32_in.update(rng.randrange(1 << 32) for _ in range(4096))
    f32_in = array.array("I", sorted(f32_in))
    f32_f16, f32_bf16 = conversions(u32_tensor(f32_in))

    # float64 inputs: every finite float16/bfloat16 value, and values a little
    # off each midpoint (where converting through float32 first rounds twice).
    f64_in = set()
    for bits in (f16_to_f32, bf16_to_f32):
        f64_in.update(f64_bits(struct.unpack("<f", struct.pack("<I", b))[0]) for b in bits)
    for k in range(0x7BFF):
        lo, hi = struct.unpack("<ff", struct.pack("<II", f16_to_f32[k], f16_to_f32[k + 1]))
        mid = (lo + hi) / 2
        for m in (mid, -mid):
            f64_in.update(f64_bits(m) + d for d in (-(1 << 20), -1, 1, 1 << 20))
    for k in range(0, 0x7F80, 3):
        mid = f64_bits(struct.unpack("<f", struct.pack("<I", (k << 16) + 0x8000))[0])
        f64_in.update(s | (mid + d) for s in (0, 1 << 63) for d in (-(1 << 20), -1, 1, 1 << 20))
    for v in (65504.0, 65519.99999, 65520.0, 65520.00001, 1e5, 2.0**-24, 2.0**-25, 2.0**-25 * (1 + 2**-40),
              1 + 2**-11 + 2**-40, 1e-300, 1e300, 3.4e38, 3.4028235677973366e38, 3.5e38):
        f64_in.update((f64_bits(v), f64_bits(-v)))
    f64_in.update((0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000, 0x7FF0000000000001,
                   0x7FF4000000000000, 0xFFF8000000000123, 0x0000000000000001, 0x000FFFFFFFFFFFFF))
    f64_in.update(rng.randrange(1 << 64) for _ in range(4096))
    f64_in.update(f64_bits(rng.uniform(-70000.0, 70000.0)) for _ in range(4096))
    f64_in = array.array("Q", sorted(f64_in))
    f64_f16, f64_bf16 = conversions(u64_tensor(f64_in))

    # int64 inputs: small integers, both sides of powers of two and of the
    # float16 overflow, values where int64 -> float32 -> bfloat16 rounds twice.
    i64_in = set(range(-2100, 2100))
    for e in range(11, 63):
        for d in (-3, -2, -1, 0, 1, 2, 3):
            i64_in.update(((1 << e) + d, -(1 << e) - d))
    i64_in.update((65504, 65505, 65519, 65520, 65535, 65536, (1 << 24) + (1 << 16) + 1,
                   (1 << 24) + (1 << 16), (1 << 24) + (1 << 16) - 1, (1 << 63) - 1, -(1 << 63)))
    i64_in.update(rng.randrange(-(1 << 63), 1 << 63) for _ in range(1024))
    i64_in.update(rng.randrange(-(1 << 20), 1 << 20) for _ in range(1024))
    i64_in = array.array("q", sorted(i64_in))
    i64_f16, i64_bf16 = conversions(torch.tensor(i64_in, dtype=torch.int64))

    payload = b"".join([
        section(1 << 16, array.array("I", f16_to_f32)),
        section(1 << 16, array.array("I", bf16_to_f32)),
        section(1 << 16, array.array("H", bits16(f16.to(torch.bfloat16)))),
        section(1 << 16, array.array("H", bits16(bf16.to(torch.float16)))),
        section(len(f32_in), deltas(f32_in, "I", 32), f32_f16, f32_bf16),
        section(len(f64_in), deltas(f64_in, "Q", 64), f64_f16, f64_bf16),
        section(len(i64_in), deltas(i64_in, "Q", 64), i64_f16, i64_bf16),
    ])
    data = b"MDLHALF1" + struct.pack("<Q", len(payload)) + zlib.compress(payload, 9)
    OUT.write_bytes(data)
    print(f"{OUT}: {len(data)} bytes ({len(payload)} uncompressed); torch {torch.__version__}; "
          f"{len(f32_in)} float32, {len(f64_in)} float64, {len(i64_in)} int64 inputs")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""minidl's .npy reader and writer against the real NumPy.

  python3 scripts/check_npy.py --write-fixtures   # (re)writes tests/goldens/npy/
  python3 scripts/check_npy.py --build build      # checks, needs build/examples/npy_tool

--write-fixtures: small files written by NumPy that tests/test_npy.cpp loads
(the value pattern of tests/npy_pattern.h), plus files minidl must refuse:
big-endian, Fortran order, unsupported dtypes, a structured dtype.

--build: (1) `npy_tool write-samples` writes one file per dtype with minidl's
writer; NumPy must load each with the expected dtype, shape and values.
(2) `npy_tool info` reads every fixture and NumPy-written files of other
format versions; its dtype, shape and element sum must match NumPy's, and
the files to refuse must be refused. Needs numpy (python3 -m pip install numpy);
the C++ tests never need Python.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "goldens", "npy")
STEMS = ["b1", "u1", "u2", "i4", "i8", "f4", "f8"]


def pattern(stem, shape):
    """tests/npy_pattern.h's values, computed the same way."""
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    i = np.arange(n, dtype=np.int64)
    if stem == "b1":
        v = (i % 3 == 0)
    elif stem == "u1":
        v = ((i * 37) % 256).astype(np.uint8)
    elif stem == "u2":
        v = ((i * 2731) % 65536).astype(np.uint16)
    elif stem == "i4":
        v = (i * 100003 - 1000000).astype(np.int32)
    elif stem == "i8":
        v = i * 3000000000 - 5
    elif stem == "f4":
        v = (i.astype(np.float64) * 0.25 - 3).astype(np.float32)
    elif stem == "f8":
        v = i.astype(np.float64) / 3.0 - 2
    return v.reshape(shape)


def write_fixtures():
    os.makedirs(FIXTURES, exist_ok=True)
    for name in os.listdir(FIXTURES):
        if name.endswith(".npy"):
            os.remove(os.path.join(FIXTURES, name))
    for stem in STEMS:
        np.save(os.path.join(FIXTURES, f"{stem}.npy"), pattern(stem, (2, 3, 4)))
    # Shape corner cases.
    np.save(os.path.join(FIXTURES, "scalar_f8.npy"), pattern("f8", ()))
    np.save(os.path.join(FIXTURES, "vector_i8.npy"), pattern("i8", (7,)))
    np.save(os.path.join(FIXTURES, "empty_u1.npy"), pattern("u1", (0, 3)))
    # Format versions 2.0 and 3.0 (np.save picks them only for huge or
    # non-latin1 headers; write_array can force them).
    for version in [(2, 0), (3, 0)]:
        with open(os.path.join(FIXTURES, f"v{version[0]}_f4.npy"), "wb") as f:
            np.lib.format.write_array(f, pattern("f4", (3, 5)), version=version)
    # Files minidl must refuse.
    np.save(os.path.join(FIXTURES, "refuse_big_endian_f4.npy"), pattern("f4", (2, 3)).astype(">f4"))
    np.save(os.path.join(FIXTURES, "refuse_fortran_f4.npy"), np.asfortranarray(pattern("f4", (2, 3))))
    np.save(os.path.join(FIXTURES, "refuse_int8.npy"), np.arange(6, dtype=np.int8))
    np.save(os.path.join(FIXTURES, "refuse_float16.npy"), np.arange(6, dtype=np.float16))
    np.save(os.path.join(FIXTURES, "refuse_structured.npy"),
            np.zeros(2, dtype=[("a", "<f4"), ("b", "<i8")]))
    print("wrote", len(os.listdir(FIXTURES)), "files to", FIXTURES)


# What each refused fixture's message must say, with its byte offset.
REFUSALS = {
    "refuse_big_endian_f4.npy": "big-endian data ('>f4') is not supported",
    "refuse_fortran_f4.npy": "fortran_order True",
    "refuse_int8.npy": "unsupported dtype '|i1'",
    "refuse_float16.npy": "unsupported dtype '<f2'",
    "refuse_structured.npy": "structured dtypes are not supported",
}


def info(tool, paths):
    out = subprocess.run([tool, "info", *paths], capture_output=True, text=True)
    lines = {}
    for line in out.stdout.splitlines():
        path, rest = line.split(": ", 1)
        lines[path] = rest
    return lines


def check(build):
    tool = os.path.join(build, "examples", "npy_tool")
    failures = []
    # (1) minidl writes, NumPy reads.
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool, "write-samples", tmp], check=True, capture_output=True)
        expected = {f"{stem}.npy": pattern(stem, (2, 3, 4)) for stem in STEMS}
        expected["tensor_f4.npy"] = pattern("f4", (5, 1, 3))
        expected["scalar_f8.npy"] = pattern("f8", ())
        expected["vector_i8.npy"] = pattern("i8", (7,))
        expected["empty_u1.npy"] = pattern("u1", (0, 3))
        for name, want in expected.items():
            got = np.load(os.path.join(tmp, name), allow_pickle=False)
            ok = got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
            ok = ok and got.flags["C_CONTIGUOUS"]
            print(f"numpy loads minidl's {name}: {got.dtype} {got.shape} {'ok' if ok else 'MISMATCH'}")
            if not ok:
                failures.append(name)
    # (2) NumPy writes, minidl reads (the committed fixtures and fresh files).
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        fresh = {
            "random_f4.npy": rng.standard_normal((4, 5, 6)).astype(np.float32),
            "random_u2.npy": rng.integers(0, 65536, (3, 7), dtype=np.uint16),
            "random_b1.npy": rng.random((5, 5)) < 0.3,
        }
        for name, a in fresh.items():
            np.save(os.path.join(tmp, name), a)
        paths = sorted(os.path.join(FIXTURES, n) for n in os.listdir(FIXTURES) if n.endswith(".npy"))
        paths += [os.path.join(tmp, n) for n in fresh]
        lines = info(tool, paths)
        for path in paths:
            name = os.path.basename(path)
            line = lines.get(path, "(no output)")
            if name in REFUSALS:
                ok = line.startswith("refused:") and REFUSALS[name] in line and re.search(r"at byte \d+", line)
            else:
                a = np.load(path, allow_pickle=False)
                m = re.match(r"descr '(.+)' shape (\(.*\)) sum (\S+)$", line)
                want_sum = float(np.sum(a, dtype=np.float64)) if a.dtype != np.int64 else int(a.sum())
                ok = bool(m) and m.group(1) == a.dtype.str and m.group(2) == str(a.shape)
                ok = ok and (float(m.group(3)) == want_sum if a.dtype != np.int64 else int(m.group(3)) == want_sum)
                if not ok and m and a.dtype.kind == "f":  # sums in different orders
                    ok = m.group(1) == a.dtype.str and abs(float(m.group(3)) - want_sum) <= 1e-9 * max(1, abs(want_sum))
            print(f"minidl reads numpy's {name}: {line} -> {'ok' if ok else 'MISMATCH'}")
            if not ok:
                failures.append(name)
    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    print("all .npy checks passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-fixtures", action="store_true")
    ap.add_argument("--build", help="the CMake build folder with examples/npy_tool")
    args = ap.parse_args()
    if not args.write_fixtures and not args.build:
        ap.error("give --write-fixtures and/or --build")
    if args.write_fixtures:
        write_fixtures()
    return check(args.build) if args.build else 0


if __name__ == "__main__":
    sys.exit(main())

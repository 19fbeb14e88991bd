#!/usr/bin/env python3
"""TensorBoardWriter::add_image against the real TensorBoard reader.

  python3 scripts/check_tensorboard_images.py --build build

Runs build/examples/make_grain_dataset with --tensorboard on a small data set,
then reads the event file with the `tensorboard` package: its TFRecord reader
(every CRC checked) and EventAccumulator. Every PNG is decoded with Pillow
and its pixels compared with the middle z slice of the .npy volumes that
NumPy loads (the label images show 255 for boundary voxels). Needs
`python3 -m pip install numpy tensorboard pillow`; the C++ tests never need
Python.
"""
import argparse
import glob
import io
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow


def read_records_strictly(path):
    """Every TFRecord of the file; a CRC mismatch raises DataLossError (the
    event loaders would only log it and stop)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path, 0, None, None)
    records = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return records
        records.append(reader.record())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="the CMake build folder with examples/make_grain_dataset")
    args = ap.parse_args()
    tool = os.path.join(args.build, "examples", "make_grain_dataset")
    count, size = 3, 40
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, "tb")
        subprocess.run([tool, "--out", tmp, "--count", str(count), "--size", str(size), "--seed", "7",
                        "--tensorboard", logdir], check=True)
        files = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
        if len(files) != 1:
            print("expected one event file, got", files)
            return 1
        # Every record framed and CRC-checked, every Event parsed: the
        # file_version event, then an image and a label per volume.
        events = [event_pb2.Event.FromString(r) for r in read_records_strictly(files[0])]
        print(f"{len(events)} records read, all CRCs correct; first file_version: {events[0].file_version!r}")
        if events[0].file_version != "brain.Event:2" or len(events) != 1 + 2 * count:
            failures.append("records")

        acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.IMAGES: 0})
        acc.Reload()
        tags = sorted(acc.Tags()["images"])
        print("image tags:", tags)
        if tags != ["grains/image", "grains/label"]:
            failures.append("tags")
        for tag in tags:
            images = acc.Images(tag)
            if [e.step for e in images] != list(range(count)):
                failures.append(f"{tag} steps {[e.step for e in images]}")
            for e in images:
                name = f"{e.step:03d}.npy"
                vol = np.load(os.path.join(tmp, "images" if tag.endswith("image") else "labels", name))
                want = vol[vol.shape[0] // 2]
                if tag.endswith("label"):
                    want = (want != 0).astype(np.uint8) * 255
                png = Image.open(io.BytesIO(e.encoded_image_string))
                got = np.asarray(png)
                ok = (png.format == "PNG" and png.mode == "L" and e.height == size and e.width == size
                      and got.shape == want.shape and np.array_equal(got, want))
                print(f"{tag} step {e.step}: {png.format} {png.mode} {e.width}x{e.height}, "
                      f"pixels {'equal to the .npy slice' if ok else 'DIFFER'}")
                if not ok:
                    failures.append(f"{tag} step {e.step}")
    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    print("TensorBoard image check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

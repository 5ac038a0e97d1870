"""Cross-check pyddstore's Petastorm codec decoding against the real Petastorm 0.13.1.

    python bench/petastorm_codecs_check.py [--petastorm-python PATH]

In Petastorm's own environment (ci/petastorm-venv.sh; created on first use) the real
codecs encode a set of values (PNG: grey, RGB, 16-bit grey; JPEG: grey, RGB --
Petastorm encodes only (H, W) and (H, W, 3) images; NdarrayCodec and
CompressedNdarrayCodec: several dtypes and shapes, Fortran order) and
decode them again as make_reader does; the bytes and Petastorm's decoded values
come back as an .npz (no pickles), and here pyddstore.torch.petastorm decodes the
same bytes. Prints one line per case (exact, or max level difference for JPEG) and
exits non-zero on any mismatch beyond the JPEG tolerance.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
JPEG_TOLERANCE = 2

CHILD = r'''
import sys, warnings
warnings.filterwarnings("ignore")
import numpy as np
from petastorm.codecs import CompressedImageCodec, NdarrayCodec, CompressedNdarrayCodec
from petastorm.unischema import UnischemaField
rng = np.random.default_rng(0)
cases = {
    "png_grey": (np.uint8, (9, 7), CompressedImageCodec("png")),
    "png_rgb": (np.uint8, (9, 7, 3), CompressedImageCodec("png")),
    "png_grey16": (np.uint16, (9, 7), CompressedImageCodec("png")),
    "jpeg_grey": (np.uint8, (16, 16), CompressedImageCodec("jpeg", quality=90)),
    "jpeg_rgb": (np.uint8, (16, 16, 3), CompressedImageCodec("jpeg", quality=75)),
    "nd_f64": (np.float64, (2, 3, 4), NdarrayCodec()),
    "nd_u16": (np.uint16, (5,), NdarrayCodec()),
    "nd_bool": (np.bool_, (3, 3), NdarrayCodec()),
    "cnd_f32": (np.float32, (6, 2), CompressedNdarrayCodec()),
    "cnd_i64": (np.int64, (4,), CompressedNdarrayCodec()),
}
out = {}
for name, (dtype, shape, codec) in cases.items():
    field = UnischemaField(name, dtype, shape, codec, False)
    if np.dtype(dtype).kind == "f":
        value = rng.standard_normal(shape).astype(dtype)
    elif np.dtype(dtype).kind == "b":
        value = rng.integers(0, 2, shape).astype(bool)
    else:
        value = rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype)
    if name == "nd_f64":
        value = np.asfortranarray(value)
    blob = codec.encode(field, value)
    out[name + "__bytes"] = np.frombuffer(bytes(blob), dtype=np.uint8)
    out[name + "__petastorm"] = np.ascontiguousarray(codec.decode(field, blob))
    out[name + "__source"] = np.ascontiguousarray(value)
np.savez(sys.argv[1], **out)
'''


def main():
    p = argparse.ArgumentParser(description="Check pyddstore's codec decoding against Petastorm 0.13.1")
    p.add_argument("--petastorm-python")
    a = p.parse_args()
    py = a.petastorm_python or subprocess.run(
        ["bash", os.path.join(HERE, "..", "ci", "petastorm-venv.sh")], check=True,
        stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    sys.path.insert(0, os.path.join(HERE, "..", "pyddstore-torch"))
    from pyddstore.torch.petastorm import decode_value

    codec_of = {"png": "png", "jpeg": "jpeg", "nd": "ndarray", "cnd": "compressed_ndarray"}
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "codecs.npz")
        subprocess.run([py, "-I", "-c", CHILD, path], check=True)
        z = np.load(path, allow_pickle=False)
        names = sorted({k.split("__")[0] for k in z.files})
        for name in names:
            blob = z[name + "__bytes"].tobytes()
            theirs = z[name + "__petastorm"]
            ours = decode_value(codec_of[name.split("_")[0]], blob)
            if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
                print(f"{name:12s} MISMATCH shape/dtype ours {ours.shape} {ours.dtype} petastorm "
                      f"{theirs.shape} {theirs.dtype}")
                bad += 1
                continue
            if name.startswith("jpeg"):
                diff = int(np.abs(ours.astype(np.int32) - theirs.astype(np.int32)).max())
                ok = diff <= JPEG_TOLERANCE
                print(f"{name:12s} {'ok' if ok else 'MISMATCH'}: max difference {diff} levels "
                      f"(tolerance {JPEG_TOLERANCE}) {ours.shape} {ours.dtype}")
            else:
                ok = ours.tobytes() == theirs.tobytes()
                print(f"{name:12s} {'exact' if ok else 'MISMATCH'} {ours.shape} {ours.dtype}")
            bad += not ok
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

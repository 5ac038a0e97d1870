"""The Python binding's copy of the C ABI agrees with ddstore.h.

pyddstore mirrors parts of the header by hand (error codes, dtype tags, the
ctypes structs, NAME_MAX, the ABI major, every function's prototype), and so
do the meson files (the soname's major) and libddstore/abi/ddstore-constants.txt (the
ABI record). Each check here parses the real header of this checkout, so a
change on one side that is not made on the other fails the suite instead of
corrupting memory at run time. No MPI: every rank checks the same files.
"""
import ctypes
import pathlib
import re
import sys

import numpy as np
import pytest

import pyddstore
from pyddstore import _dtypes, _errors, _lib

ROOT = pathlib.Path(__file__).resolve().parents[3]
HEADER = ROOT / "libddstore" / "include" / "ddstore" / "ddstore.h"


if not HEADER.is_file():
    pytest.fail(f"{HEADER} not found: run the suite from a checkout", pytrace=False)
sys.path.insert(0, str(ROOT / "libddstore" / "abi"))
import ddstore_header  # noqa: E402  (the one parser of ddstore.h)

DECLS, _ = ddstore_header.load(str(HEADER))
ALL_CONSTANTS = ddstore_header.constants(DECLS)
ENUM_NAMES = {sig.split("=")[0].strip() for d in DECLS if d.kind == "enum" for sig, _ in d.members}
CONSTANTS = {k: v for k, v in ALL_CONSTANTS.items() if k in ENUM_NAMES}
DEFINES = {k: v for k, v in ALL_CONSTANTS.items() if k not in ENUM_NAMES}


def test_header_parsed():
    # Guards the parser itself: a header reshuffle must not make the checks vacuous.
    assert CONSTANTS["DDS_EINVAL"] == -1 and CONSTANTS["DDS_DTYPE_FLOAT32"] > 0
    assert "DDS_ABI_MAJOR" in DEFINES and "DDS_NAME_MAX" in DEFINES


def test_constants_record_matches_header():
    record = {}
    for line in (ROOT / "libddstore" / "abi" / "ddstore-constants.txt").read_text().split():
        name, value = line.split("=")
        record[name] = int(value)
    assert record == ddstore_header.abi_constants(DECLS), "libddstore/abi/ddstore-constants.txt is stale: bash ci/abi-check.sh --update"


def test_error_codes():
    codes = {k: v for k, v in CONSTANTS.items() if re.fullmatch(r"DDS_E[A-Z]+", k)}
    mirrored = {k: getattr(_errors, k) for k in dir(_errors) if re.fullmatch(r"DDS_E[A-Z]+", k)}
    assert mirrored == codes
    for name, value in codes.items():
        assert _errors.CODE_NAMES[value] == name


def test_dtype_tags():
    tags = {k[len("DDS_DTYPE_"):].lower(): v for k, v in CONSTANTS.items() if k.startswith("DDS_DTYPE_")}
    assert _dtypes._TAG_BFLOAT16 == tags["bfloat16"]
    for tag, dt in _dtypes._DTYPE_OF_TAG.items():
        assert tags[dt.name] == tag, dt.name
        assert _dtypes.dtype_tag(dt) == tag
    assert set(pyddstore.SUPPORTED_DTYPES) == set(tags) - {"bytes"}  # every C dtype but raw bytes
    for name in pyddstore.SUPPORTED_DTYPES:
        if name != "bfloat16":  # numpy has none without ml_dtypes: checked by tag above
            assert _dtypes.dtype_tag(np.dtype(name)) == tags[name]


def test_abi_major_and_name_max():
    major = DEFINES["DDS_ABI_MAJOR"]
    assert _lib.ABI_VERSION == major == pyddstore.ABI_VERSION
    assert _lib.NAME_MAX == DEFINES["DDS_NAME_MAX"]
    for meson in ("libddstore/meson.build", "pyddstore-core/meson.build"):
        m = re.search(r"^abi_major\s*=\s*'(\d+)'", (ROOT / meson).read_text(), re.M)
        assert m and int(m[1]) == major, f"abi_major in {meson}"
    assert _lib.lib.dds_abi_version() == major


_CTYPE_OF = {
    "uint32_t": ctypes.c_uint32, "int32_t": ctypes.c_int32, "uint64_t": ctypes.c_uint64,
    "int64_t": ctypes.c_int64, "double": ctypes.c_double, "int": ctypes.c_int,
    "const char *": ctypes.c_char_p, "size_t": ctypes.c_size_t,
}


@pytest.mark.parametrize("cname,pyclass", [
    ("dds_options", _lib.Options), ("dds_store_info", _lib.StoreInfo),
    ("dds_var_info", _lib.VarInfoC), ("dds_stats_info", _lib.StatsInfo)])
def test_structs(cname, pyclass):
    members = ddstore_header.structs(DECLS)[cname]
    assert [f[0] for f in pyclass._fields_] == [m[0] for m in members]
    for (fname, ftype), (_, ctype) in zip(pyclass._fields_, members):
        assert ftype is _CTYPE_OF[ctype], f"{cname}.{fname}: {ctype} vs {ftype.__name__}"


def test_prototypes():
    decls = {name: len(params) for name, params in ddstore_header.functions(DECLS).items()}
    assert decls, "no DDS_API declarations found"
    mirrored = {name: len(argtypes) for name, (_, argtypes) in _lib._PROTOTYPES.items()}
    assert mirrored == decls

#!/usr/bin/env bash
# ABI check of libddstore against the committed record libddstore/abi/libddstore.abi.
#
#   bash ci/abi-check.sh            # rebuild, compare, fail on an incompatible change
#   bash ci/abi-check.sh --update   # rewrite the record from a fresh build (commit it)
#
# The record is `abidw` output (libabigail) of a debug build: the exported,
# versioned symbols and the public types they use (types of private headers
# are dropped, so internal structs may change freely). `abidiff` compares a
# fresh build with it:
#   - no change, or only added functions/variables, enumerators appended, or
#     structs grown at their end (the `size`-field convention of ddstore.h):
#     compatible, passes;
#   - anything else (removed or changed functions, a member moved or changed,
#     an enumerator value changed): incompatible; passes only when
#     DDS_ABI_MAJOR in ddstore.h is larger than the recorded soname's major
#     (then refresh the record with --update).
# It also fails when DDS_ABI_MAJOR and the built soname disagree.
# abidiff runs without its default suppressions: they hide member offset
# changes that happen to keep a struct's size (a field inserted into padding).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
record=libddstore/abi/libddstore.abi
build=build-abi

if ! command -v abidw >/dev/null || ! command -v abidiff >/dev/null; then
  echo "abi-check: installing abigail-tools"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq abigail-tools >/dev/null
fi
if [ ! -x .venv/bin/meson ] && ! command -v meson >/dev/null; then
  echo "abi-check: no meson; running ci/setup.sh first"
  bash ci/setup.sh
fi
meson_bin=meson
[ -x .venv/bin/meson ] && meson_bin=.venv/bin/meson && export PATH="$root/.venv/bin:$PATH"

# A debug build (DWARF for abidw) from a path relative to the repository, so
# the record holds no machine-specific path.
if [ ! -f "$build/build.ninja" ]; then
  $meson_bin setup "$build" libddstore --buildtype=debug >/dev/null 2>&1 || $meson_bin setup "$build" libddstore --buildtype=debug
fi
ninja -C "$build" > "$build/ninja.log" 2>&1 || { cat "$build/ninja.log"; echo "abi-check: FAILED: build"; exit 1; }
lib=$(ls "$build"/libddstore.so.*.*.* | head -1)
header_major=$(awk '/#define DDS_ABI_MAJOR/ {print $3}' libddstore/include/ddstore/ddstore.h)
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
if [ "$soname" != "libddstore.so.$header_major" ]; then
  echo "abi-check: FAILED: DDS_ABI_MAJOR is $header_major but the library's soname is $soname;"
  echo "  change abi_major in libddstore/meson.build (and pyddstore-core/meson.build) with DDS_ABI_MAJOR"
  exit 1
fi

# Enumerators and numeric macros of the header are part of the ABI too, but
# abidiff sees only types reachable from function signatures (ddstore.h passes
# enum values as int32_t/uint32_t), so they are recorded separately, as the
# header parser of libddstore/abi/ddstore_header.py reads them (less the ABI
# major, checked above, and the release version macros).
constants=libddstore/abi/ddstore-constants.txt
dump_constants() {
  python3 libddstore/abi/ddstore_header.py constants libddstore/include/ddstore/ddstore.h
}

dump() {
  abidw --headers-dir libddstore/include/ddstore --drop-private-types --no-corpus-path \
    --no-comp-dir-path --no-show-locs --no-elf-needed "$lib"
}

if [ "${1:-}" = "--update" ]; then
  mkdir -p libddstore/abi
  dump > "$record"
  dump_constants > "$constants"
  echo "abi-check: wrote $record ($soname, $(grep -c '<elf-symbol ' "$record") symbols) and $constants ($(wc -l < "$constants") constants)"
  exit 0
fi
if [ ! -f "$record" ] || [ ! -f "$constants" ]; then
  echo "abi-check: FAILED: no $record or $constants; create them with: bash ci/abi-check.sh --update"
  exit 1
fi

current="$build/current.abi"
dump > "$current"
dump_constants > "$build/constants.txt"
# Constants: removed or changed values are incompatible, new ones are fine.
const_bad=$(python3 - "$constants" "$build/constants.txt" <<'PY'
import sys
def load(p):
    return dict(l.strip().split("=", 1) for l in open(p) if "=" in l)
old, new = load(sys.argv[1]), load(sys.argv[2])
for k, v in sorted(old.items()):
    if k not in new:
        print(f"  constant {k} (= {v}) removed")
    elif new[k] != v:
        print(f"  constant {k} changed from {v} to {new[k]}")
PY
)
set +e
# No --headers-dir here: the records carry no source locations, so abidiff
# would take every type for private and hide its changes; private types were
# already dropped when the records were written.
abidiff --no-default-suppression "$record" "$current" > "$build/abidiff.txt" 2>&1
rc=$?
set -e
recorded_major=$(sed -n "s/.*soname='libddstore\.so\.\([0-9]*\)'.*/\1/p" "$record" | head -1)

if [ $rc -eq 0 ] && [ -z "$const_bad" ]; then
  if cmp -s "$constants" "$build/constants.txt"; then
    echo "abi-check: ABI identical to $record ($soname, $(grep -c '<elf-symbol ' "$current") symbols, $(wc -l < "$constants") constants)"
  else
    diff "$constants" "$build/constants.txt" || true
    echo "abi-check: compatible ABI change (new constants); record it with: bash ci/abi-check.sh --update"
  fi
  exit 0
fi
if [ $((rc & 3)) -ne 0 ]; then
  cat "$build/abidiff.txt"
  echo "abi-check: FAILED: abidiff could not compare (exit status $rc)"
  exit 1
fi

# abidiff's exit status sets bit 8 only for changes it is sure about (a
# removed symbol); bit 4 covers every other change. Classify the report:
# only additions, appended enumerators and structs grown at the end pass.
verdict=$(python3 - "$build/abidiff.txt" <<'PY'
import re, sys
# Whitelist: every line of the report must be one of these, else the change
# counts as incompatible. Members may only be inserted at or past the old end.
ALLOWED = [
    r"Functions changes summary: 0 Removed, \d+ Changed(?: \(\d+ filtered out\))?, \d+ Added functions?",
    r"Variables changes summary: 0 Removed, \d+ Changed(?: \(\d+ filtered out\))?, \d+ Added variables?",
    r"\d+ Added (?:function|variable)s?:",
    r"\[A\] .*",
    r"\d+ functions? with some indirect sub-type changes?:",
    r"\[C\] '.*' has some indirect sub-type changes:",
    r"parameter \d+ of type '.*' has sub-type changes:",
    r"(?:in )?pointed to type '.*'(?: changed, as reported earlier)?:?",
    r"in unqualified underlying type '.*':",
    r"underlying type '(?:struct|typedef) .*' changed:",
    r"type of '.*' changed:",
    r"\d+ data member insertions?:",
]
bad = []
old_size = None
for line in open(sys.argv[1]).read().splitlines():
    s = line.strip()
    if not s:
        continue
    m = re.fullmatch(r"type size changed from (\d+) to (\d+) \(in bits\)", s)
    if m:
        old_size = int(m.group(1))
        if int(m.group(2)) < old_size:
            bad.append(s)
        continue
    m = re.fullmatch(r"'.*', at offset (\d+) \(in bits\)(?: at .*)?", s)
    if m:
        if old_size is None or int(m.group(1)) < old_size:
            bad.append("member not appended at the end: " + s)
        continue
    if not any(re.fullmatch(a, s) for a in ALLOWED):
        bad.append(s)
print("INCOMPATIBLE" if bad else "COMPATIBLE")
for b in bad[:20]:
    print("  " + b)
PY
)
if [ -n "$const_bad" ]; then
  verdict="INCOMPATIBLE"$'\n'"$const_bad"
fi
cat "$build/abidiff.txt"
if [ $((rc & 8)) -eq 0 ] && [ "${verdict%%$'\n'*}" = COMPATIBLE ]; then
  echo "abi-check: compatible ABI change (additions only); record it with: bash ci/abi-check.sh --update"
  exit 0
fi
echo "$verdict"
if [ -n "$recorded_major" ] && [ "$header_major" -gt "$recorded_major" ]; then
  echo "abi-check: incompatible change, and DDS_ABI_MAJOR was bumped ($recorded_major -> $header_major):"
  echo "  allowed; record the new ABI with: bash ci/abi-check.sh --update"
  exit 0
fi
echo "abi-check: FAILED: incompatible ABI change without an ABI bump (DDS_ABI_MAJOR is still $header_major)."
echo "  Either keep the old ABI (append, do not change; see docs/abi-policy.rst) or bump"
echo "  DDS_ABI_MAJOR, abi_major in the meson.build files and ABI_VERSION in pyddstore/_lib.py."
exit 1

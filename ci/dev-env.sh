# Source me: use the working tree's Python packages and a meson build of
# libddstore without installing anything (developer loop).
#   source ci/dev-env.sh            # builds build-dev/ if needed
_dds_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export FI_TCP_IFACE=lo
if [ -x "$_dds_root/.venv/bin/python" ]; then export PATH="$_dds_root/.venv/bin:$PATH"; fi
if [ ! -f "$_dds_root/build-dev/build.ninja" ]; then
  meson setup "$_dds_root/build-dev" "$_dds_root" -Dlibddstore:libfabric=auto >/dev/null
fi
ninja -C "$_dds_root/build-dev" >/dev/null || echo "dev-env: build failed (run ninja -C build-dev)" >&2
export PYDDSTORE_LIBRARY="$_dds_root/build-dev/subprojects/libddstore/libddstore.so"
export PYTHONPATH="$_dds_root/pyddstore-core:$_dds_root/pyddstore-torch${PYTHONPATH:+:$PYTHONPATH}"
unset _dds_root

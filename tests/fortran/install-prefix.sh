# Sourced: `source tests/fortran/install-prefix.sh <dir>` builds libddstore
# (its own meson project, Fortran module required) in <dir>/build, installs
# it into <dir>/prefix and points PKG_CONFIG_PATH at its libddstore.pc.
# An existing build is brought up to date (ninja does nothing when it is).
_dds_dir="$1"
mkdir -p "$_dds_dir"
if [ ! -f "$_dds_dir/build/build.ninja" ]; then
  meson setup "$_dds_dir/build" libddstore --prefix="$(pwd)/$_dds_dir/prefix" -Dfortran=enabled \
    --buildtype=debugoptimized >"$_dds_dir/setup.log" 2>&1 || { cat "$_dds_dir/setup.log"; return 1; }
fi
meson install -C "$_dds_dir/build" --quiet >/dev/null
_dds_pc=$(dirname "$(find "$_dds_dir/prefix" -name libddstore.pc | head -1)")
export PKG_CONFIG_PATH="$(cd "$_dds_pc" && pwd)${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
unset _dds_dir _dds_pc

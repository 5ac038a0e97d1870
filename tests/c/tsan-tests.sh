#!/usr/bin/env bash
# ThreadSanitizer run of libddstore's concurrent paths (called by
# ci/test.sh as `bash tests/c/tsan-tests.sh <builddir>`; also by hand).
# Builds the library and the C tests with -fsanitize=thread in
# <builddir>-tsan (meson, -Db_sanitize=thread), then runs under mpiexec -n 2, every read of another rank
# through libfabric (DDSTORE_NODE_LOCAL=0):
#   - test_fabric with 8 reader threads (DDS_TEST_THREADS=8) for methods 1
#     and 2 on the shm and tcp providers: concurrent get/get_batch sharing
#     one endpoint and completion queue, with the target's progress thread;
#   - test_remote_write: two threads updating one read-only shard at once.
# Any ThreadSanitizer report fails the run (exit code 66); the only
# suppressions (tests/c/tsan.supp) are inside Open MPI. Open MPI and
# libfabric are not instrumented: their own races are not looked for, but
# their locks are seen, so happens-before through them is not lost.
# The busy-owner check of test_fabric is skipped (DDS_TEST_SKIP_BUSY=1):
# its 1,200 single-row reads add little to the threads' reads here, and
# TSan makes everything 5-15x slower.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
source ci/suite.sh
suite_build_arg tests/c/tsan-tests.sh "$@"
tsan="${build}-tsan"
if ! grep -q libfabric <<<"$(ldd "$build/subprojects/libddstore/libddstore.so")"; then
  echo "tsan-tests: libddstore built without libfabric; nothing concurrent to check"
  exit 0
fi
suite_begin tsan-tests
if [ ! -f "$tsan/build.ninja" ]; then
  # -Db_sanitize=thread -Db_lundef=false -Dlibddstore:libfabric=enabled (tests/manifest.toml's [builds] tsan)
  opts=$(python3 ci/manifest.py --build tsan) && mapfile -t tsan_opts <<<"$opts" \
    || { echo "tsan-tests: no tsan build options in tests/manifest.toml" >&2; exit 2; }
  suite_step "tsan: meson setup" 120 nice meson setup "$tsan" . "${tsan_opts[@]}"
fi
suite_step "tsan: build" 400 nice ninja -C "$tsan"
[ ${#suite_failed[@]} -eq 0 ] || suite_end
export TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 suppressions=$root/tests/c/tsan.supp"
hs="$(mktemp -d /tmp/ddstore-tsan-hs.XXXXXX)"
trap 'rm -rf "$hs"' EXIT
for m in 1 2; do
  for prov in shm tcp; do
    suite_step "tsan: test_fabric method $m $prov np=2, 8 threads" 300 \
      env DDS_TEST_THREADS=8 DDS_TEST_SKIP_BUSY=1 DDSTORE_METHOD=$m DDSTORE_FABRIC=$prov \
      DDSTORE_NODE_LOCAL=0 DDSTORE_HANDSHAKE_DIR="$hs/m$m-$prov" mpiexec -n 2 "$tsan/tests/test_fabric"
  done
done
suite_step "tsan: test_remote_write shm np=2" 300 \
  env DDSTORE_FABRIC=shm mpiexec -n 2 "$tsan/tests/test_remote_write" "$tsan/tests/remote_write_probe"
suite_end  # all steps passed: no ThreadSanitizer report

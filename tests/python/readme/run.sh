#!/usr/bin/env bash
# The README's first training loop, taken out of README.md (so the README cannot drift from
# what runs) and run as a user would: `mpiexec -n 2 python first_loop.py` from a directory
# outside the checkout, its output compared (sorted: the ranks print in any order) with the
# output the README shows (each rank's lines from its own output file). Also checks that
# "Two commands" shows exactly the two commands.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
py="${PYTHON:-python}"
work="$(mktemp -d "${TMPDIR:-/tmp}/pyddstore-readme.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$py" "$root/tests/python/readme/check_readme.py" "$root/README.md" "$work"
cd "$work"
# Each rank's output is taken from its own file: two ranks printing at once into mpiexec's one
# stdout may interleave mid-line (Open MPI forwards each rank's output in pieces as it reads them;
# a CI run got "rank 1: ...epochrank 0: ...epoch"), which MPI does not promise to prevent.
case "$(mpiexec --version 2>&1)" in
  *"Open MPI"*|*OpenRTE*)
    timeout -k 10 300 mpiexec -n 2 --output-filename "$work/out" "$py" first_loop.py > /dev/null
    cat "$work"/out/*/rank.*/stdout > got.txt ;;
  *HYDRA*|*Hydra*)
    timeout -k 10 300 mpiexec -n 2 -outfile-pattern "$work/out.%r" "$py" first_loop.py
    cat "$work"/out.* > got.txt ;;
  *)
    timeout -k 10 300 mpiexec -n 2 "$py" first_loop.py > got.txt ;;
esac
sort got.txt > got.sorted
if ! diff -u expected.txt got.sorted; then
  echo "README example: output differs from the output README.md shows (- README, + run)" >&2
  exit 1
fi
echo "README example: ran under mpiexec -n 2, output as the README shows"

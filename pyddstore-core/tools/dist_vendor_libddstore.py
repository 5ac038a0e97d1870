"""meson dist script: replace the symlinks that point outside
pyddstore-core (subprojects/libddstore -> ../../libddstore,
VERSION -> ../libddstore/VERSION and LICENSE -> ../LICENSE) by real copies
in the source distribution.

Without it the sdist holds dangling symlinks once unpacked (meson-python
drops them), and the build from it silently has no library to build.
"""

import os
import shutil
import subprocess
import sys


def tracked_files(src):
    """Files git tracks under `src` (relative paths), or None outside git."""
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z", "--", "."],
                             check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    files = [f for f in out.decode().split("\0") if f]
    return files or None


def main():
    dist_root = os.environ.get("MESON_PROJECT_DIST_ROOT") or os.environ["MESON_DIST_ROOT"]
    source_root = os.environ.get("MESON_PROJECT_SOURCE_ROOT") or os.environ["MESON_SOURCE_ROOT"]
    link = os.path.join(dist_root, "subprojects", "libddstore")
    src = os.path.realpath(os.path.join(source_root, "subprojects", "libddstore"))
    if not os.path.isfile(os.path.join(src, "meson.build")):
        sys.exit(f"dist_vendor_libddstore: {src} holds no meson.build; cannot vendor libddstore")
    if os.path.islink(link):
        os.unlink(link)
    elif os.path.isdir(link):
        shutil.rmtree(link)
    files = tracked_files(src)
    if files is None:
        shutil.copytree(src, link, ignore=shutil.ignore_patterns("__pycache__", "*.o", "build*"))
    else:
        for rel in files:
            dst = os.path.join(link, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(src, rel), dst)
    print(f"dist_vendor_libddstore: copied {src} into {link}")
    for name in ("VERSION", "LICENSE"):
        dst = os.path.join(dist_root, name)
        if os.path.islink(dst):
            target = os.path.realpath(os.path.join(source_root, name))
            if not os.path.isfile(target):
                sys.exit(f"dist_vendor_libddstore: {name} links to {target}, which is not a file")
            os.unlink(dst)
            shutil.copy2(target, dst)
            print(f"dist_vendor_libddstore: {name} copied from {target}")


if __name__ == "__main__":
    main()

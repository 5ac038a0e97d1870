# Spack package for pyddstore-core, the `pyddstore` Python package, built
# against spack's libddstore instead of a bundled copy. The build is
# packaging/scripts/build-pyddstore-core.sh, the script CI
# (ci/packaging.sh) runs and tests.
#
#   spack dev-build py-pyddstore-core@0.1.0            # from the checkout's root

from spack.package import *


class PyPyddstoreCore(Package):
    """pyddstore: Python (ctypes) binding of libddstore; the original DDStore
    API plus batched reads."""

    license("BSD-3-Clause")

    version("0.1.0")

    extends("python")
    depends_on("python@3.9:", type=("build", "run"))
    depends_on("py-pip", type="build")
    depends_on("py-meson-python@0.18:", type="build")   # PEP 639 license metadata
    depends_on("meson@1.1:", type="build")
    depends_on("ninja", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("py-numpy@1.24:", type=("build", "run"))
    depends_on("py-mpi4py@3.1:", type=("build", "run"))
    depends_on("libddstore@0.1.0", type=("build", "link", "run"))

    def install(self, spec, prefix):
        bash = which("bash")
        bash(join_path(self.stage.source_path, "packaging", "scripts", "build-pyddstore-core.sh"),
             spec["python"].command.path, spec["libddstore"].prefix, f"--prefix={prefix}")

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_import(self):
        """pyddstore imports and loads spack's libddstore."""
        python = self.spec["python"].command
        with working_dir("spack-test", create=True):
            python("-c", "import pyddstore, sys; "
                   f"sys.exit(0 if pyddstore.library_path.startswith('{self.spec['libddstore'].prefix}') "
                   "else pyddstore.library_path)")

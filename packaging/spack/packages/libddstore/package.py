# Spack package for libddstore, the C library of pyddstore.
#
# The build is packaging/scripts/build-libddstore.sh, the script that CI
# (ci/packaging.sh) runs and tests: meson setup + meson install to the
# prefix. Sources come from a checkout of this repository:
#
#   spack repo add packaging/spack
#   spack dev-build libddstore@0.1.0 ^openmpi         # from the checkout's root; or ^mpich
#   # or, in an environment: spack develop --path $PWD libddstore@0.1.0
#
# (No release tarball is published yet; add url/sha256 lines when one is.)
# ci/packaging.sh runs this recipe's setup_build_environment, install and
# check_consumer for ^openmpi and ^mpich (ci/spack_recipe.py), since spack
# itself is not available in CI.

import os

from spack.package import *


def mpi_pkgconfig_name(mpi):
    """The pkg-config name of spack's MPI package `mpi`, for meson's -Dmpi
    (DDS_MPI of build-libddstore.sh): the build links that MPI, and the
    installed libddstore.pc requires it (Requires.private), so that a
    program of the same MPI compiles and links against libddstore."""
    if mpi == "openmpi":
        return "ompi-c"
    if mpi in ("mpich", "cray-mpich"):
        return "mpich"
    return "mpi"   # meson's generic MPI lookup (pkg-config, then the compiler wrappers)


class Libddstore(Package):
    """Distributed in-memory data store for data-parallel training: a C11
    library with a stable ABI over MPI RMA and libfabric RDMA."""

    license("BSD-3-Clause")

    version("0.1.0")

    variant("fabric", default=True, description="libfabric transport (methods 1 and 2)")
    variant("fortran", default=True, description="Fortran module ddstore (pkg-config variable fmoddir)")

    depends_on("c", type="build")
    depends_on("fortran", type="build", when="+fortran")
    depends_on("meson@1.1:", type="build")
    depends_on("ninja", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("mpi")
    depends_on("libfabric@1.10:", when="+fabric")

    def setup_build_environment(self, env):
        env.set("DDS_LIBFABRIC", "enabled" if self.spec.satisfies("+fabric") else "disabled")
        env.set("DDS_FORTRAN", "enabled" if self.spec.satisfies("+fortran") else "disabled")
        # spack's MPI by its own pkg-config name: "auto" would take Open MPI
        # whenever one is visible (a system package, another spack package),
        # even for ^mpich.
        env.set("DDS_MPI", mpi_pkgconfig_name(self.spec["mpi"].name))

    def install(self, spec, prefix):
        bash = which("bash")
        bash(join_path(self.stage.source_path, "packaging", "scripts", "build-libddstore.sh"),
             prefix, join_path(self.stage.source_path, "build-spack"))

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_consumer(self):
        """The C consumer of CI, built with pkg-config against the install."""
        cc = Executable(self.spec["mpi"].mpicc)
        pkgconf = which("pkg-config")
        # Prepended: the .pc files of the MPI and libfabric that libddstore.pc
        # requires are on spack's PKG_CONFIG_PATH.
        pc_path = [join_path(self.prefix, "lib", "pkgconfig")]
        if os.environ.get("PKG_CONFIG_PATH"):
            pc_path.append(os.environ["PKG_CONFIG_PATH"])
        os.environ["PKG_CONFIG_PATH"] = ":".join(pc_path)
        flags = pkgconf("--cflags", "--libs", "libddstore", output=str).split()
        src = join_path(self.stage.source_path, "packaging", "c-consumer", "consumer.c")
        exe = join_path(self.stage.source_path, "build-spack", "consumer")
        cc("-std=c11", src, *flags, "-Wl,-rpath," + self.prefix.lib, "-o", exe)
        Executable(exe)()

# Spack package for libddstore, the C library of pyddstore.
#
# The build is packaging/scripts/build-libddstore.sh, the script that CI
# (ci/packaging.sh) runs and tests: meson setup + meson install to the
# prefix. Sources come from a checkout of this repository:
#
#   spack repo add packaging/spack
#   spack dev-build libddstore@0.1.0 ^openmpi         # from the checkout's root
#   # or, in an environment: spack develop --path $PWD libddstore@0.1.0
#
# (No release tarball is published yet; add url/sha256 lines when one is.)

from spack.package import *


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
        # Build against spack's MPI, whichever implementation it is: the
        # generic pkg-config name works for Open MPI and MPICH alike.
        env.set("DDS_MPI", "auto")

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
        env["PKG_CONFIG_PATH"] = join_path(self.prefix, "lib", "pkgconfig")
        flags = pkgconf("--cflags", "--libs", "libddstore", output=str).split()
        src = join_path(self.stage.source_path, "packaging", "c-consumer", "consumer.c")
        exe = join_path(self.stage.source_path, "build-spack", "consumer")
        cc("-std=c11", src, *flags, "-Wl,-rpath," + self.prefix.lib, "-o", exe)
        Executable(exe)()

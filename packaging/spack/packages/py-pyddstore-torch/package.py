# Spack package for pyddstore-torch (pure Python). The build is
# packaging/scripts/build-pyddstore-torch.sh, the script CI
# (ci/packaging.sh) runs and tests.

from spack.package import *


class PyPyddstoreTorch(Package):
    """pyddstore.torch: DistDataset, ThreadDataLoader, samplers and Parquet
    sources for PyTorch over pyddstore."""

    license("BSD-3-Clause")

    version("0.1.0")

    variant("parquet", default=True, description="Parquet and Petastorm sources (pyarrow)")

    extends("python")
    depends_on("python@3.9:", type=("build", "run"))
    depends_on("py-pip", type="build")
    depends_on("py-setuptools@77:", type="build")   # PEP 639 license metadata
    depends_on("py-pyddstore-core@0.1.0", type=("build", "run"))
    depends_on("py-torch", type=("build", "run"))   # any torch build: +cuda, +rocm or CPU
    depends_on("py-numpy@1.24:", type=("build", "run"))
    depends_on("py-pyarrow@14:", type="run", when="+parquet")

    def install(self, spec, prefix):
        bash = which("bash")
        bash(join_path(self.stage.source_path, "packaging", "scripts", "build-pyddstore-torch.sh"),
             spec["python"].command.path, f"--prefix={prefix}")

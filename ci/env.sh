# Environment for running MPI jobs on this kind of machine (source me).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# More ranks than cores in tests: let Open MPI oversubscribe.
export OMPI_MCA_rmaps_base_oversubscribe=1
# libfabric's tcp provider stays on loopback.
export FI_TCP_IFACE=lo
export PYTHONUNBUFFERED=1

#!/usr/bin/env bash
# Makes sure Open MPI (mpirun, and the headers and libraries `--features mpi` builds against) and
# libclang (which generates the MPI bindings) are installed: from Debian's packages when missing,
# as root. Idempotent; progress on stderr. Needed for ranks as processes (`mpirun … rlc run`)
# and the tests of it; the default in-process ranks need none of it.
set -euo pipefail

have_mpi() {
    command -v mpirun >/dev/null && command -v mpicc >/dev/null &&
        compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null
}

if have_mpi; then
    exit 0
fi
packages=(libopenmpi-dev openmpi-bin libclang-dev)
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "error: Open MPI and libclang are missing; install them (Debian/Ubuntu:" \
        "sudo apt-get install ${packages[*]})" >&2
    exit 1
fi
echo "== installing ${packages[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q "${packages[@]}" >&2; then
    apt-get update -q >&2
    apt-get install -y -q "${packages[@]}" >&2
fi
have_mpi || { echo "error: Open MPI or libclang still missing after installing" >&2; exit 1; }

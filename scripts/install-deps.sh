#!/bin/sh
# scripts/install-deps.sh — installs what building and testing netc needs on
# Debian (or Ubuntu): the C toolchain, flex, bison, Autotools, OpenBLAS,
# oneDNN (libdnnl-dev: the large convolutions' passes), stb_image
# (libstb-dev: image datasets), graphviz (the test that renders
# --emit=dot), cmake and man-db (the test that builds examples/ against an
# installed tree and reads the man page), OpenMPI (libopenmpi-dev and
# openmpi-bin: netc --mpi and its test, tests/mpi.sh), Slurm and munge
# (slurm-wlm, munge: tests/mpi_slurm.sh's private cluster; no service of
# theirs is configured or needed).
#   --with-torch   also Debian's python3-torch, python3-torchvision and
#                  python3-pil, for the tests and benchmarks that compare
#                  with PyTorch and torchvision's transforms (they are
#                  skipped without them), and PyPI's tensorboard, which
#                  reads back --logdir's files
#   --with-clang   also clang and libomp-dev: the second compiler CI builds
#                  netc with (.ci/run)
# Run as root, or with sudo available.
set -eu
packages="build-essential flex bison autoconf automake libtool pkg-config libopenblas-dev libdnnl-dev libstb-dev python3 graphviz cmake man-db libopenmpi-dev openmpi-bin slurm-wlm munge"
tensorboard=no
for arg in "$@"; do
    case $arg in
    --with-torch) packages="$packages python3-torch python3-torchvision python3-pil python3-pip"; tensorboard=yes ;;
    --with-clang) packages="$packages clang libomp-dev" ;;
    *) echo "usage: $0 [--with-torch] [--with-clang]" >&2; exit 2 ;;
    esac
done
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $packages > /dev/null
echo "installed: $packages"
if [ "$tensorboard" = yes ]; then
    # not packaged by Debian; without it the test reading the logs back skips
    if $SUDO /usr/bin/python3 -m pip install -q --break-system-packages tensorboard > /dev/null 2>&1 ||
        $SUDO /usr/bin/python3 -m pip install -q tensorboard > /dev/null 2>&1; then
        echo "installed: tensorboard (PyPI)"
    else
        echo "warning: tensorboard could not be installed from PyPI" >&2
    fi
fi

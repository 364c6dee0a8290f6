#!/usr/bin/env bash
# Installs the Debian packages trident's build, run and tests need, when they are missing.
# Safe to run repeatedly: it does nothing when everything is present.
set -euo pipefail

# package -> a file that proves it is installed (cheaper than asking dpkg for each)
declare -A need=(
    [gcc]=/usr/bin/gcc
    [make]=/usr/bin/make
    [pkg-config]=/usr/bin/pkg-config
    [libyaml-dev]=/usr/include/yaml.h
    [libopenblas-dev]=/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h
    [libpmix-dev]=/usr/lib/x86_64-linux-gnu/pmix2/include/pmix.h
    [openmpi-bin]=/usr/bin/mpirun
    [libopenmpi-dev]=/usr/include/x86_64-linux-gnu/openmpi/mpi.h
    [python3-torch]=/usr/lib/python3/dist-packages/torch/__init__.py
    [python3-numpy]=/usr/lib/python3/dist-packages/numpy/__init__.py
    [python3-yaml]=/usr/lib/python3/dist-packages/yaml/__init__.py
    [python3-matplotlib]=/usr/lib/python3/dist-packages/matplotlib/__init__.py # scripts/plot.py
    [python3-venv]=/usr/share/doc/python3-venv/copyright # scripts/venv.sh: PyPI references of the tests
    # a one-node Slurm for tests/test_slurm.sh (scripts/slurm/local-cluster.sh)
    [munge]=/usr/sbin/munged
    [slurmctld]=/usr/sbin/slurmctld
    [slurmd]=/usr/sbin/slurmd
    [slurm-client]=/usr/bin/srun
)
if [ "$(uname -m)" = aarch64 ]; then
    need[libopenblas-dev]=/usr/include/aarch64-linux-gnu/openblas-pthread/cblas.h
    need[libpmix-dev]=/usr/lib/aarch64-linux-gnu/pmix2/include/pmix.h
    need[libopenmpi-dev]=/usr/include/aarch64-linux-gnu/openmpi/mpi.h
fi

missing=()
for pkg in "${!need[@]}"; do
    [ -e "${need[$pkg]}" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
    echo "install-deps: error: need root (or sudo) to install: ${missing[*]}" >&2
    echo "HINT: run as root: apt-get install ${missing[*]}" >&2
    exit 1
fi
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
# Without systemd (containers), the postinst of munge, slurmd and slurmctld would start
# their daemons through the init scripts; the tests start their own (scripts/slurm/). A
# policy-rc.d that answers 101 forbids that, for the length of this install only, when the
# machine has none of its own (Docker images do).
POLICY=/usr/sbin/policy-rc.d
if [ ! -d /run/systemd/system ] && [ ! -e $POLICY ]; then
    printf '#!/bin/sh\n# scripts/install-deps.sh: no service starts during the install\nexit 101\n' |
        $SUDO tee $POLICY >/dev/null && $SUDO chmod 755 $POLICY
    trap '$SUDO rm -f $POLICY' EXIT
fi
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/tmp/trident-install-deps.log 2>&1; then
    tail -n 20 /tmp/trident-install-deps.log >&2
    echo "install-deps: error: apt-get could not install: ${missing[*]} (log: /tmp/trident-install-deps.log)" >&2
    echo "HINT: check the network and apt sources, or install these packages by hand" >&2
    exit 1
fi
still=()
for pkg in "${missing[@]}"; do [ -e "${need[$pkg]}" ] || still+=("$pkg"); done
if [ ${#still[@]} -gt 0 ]; then
    echo "install-deps: error: installed but still missing: ${still[*]}" >&2
    exit 1
fi
echo "install-deps: done"

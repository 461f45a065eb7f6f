#!/usr/bin/env bash
# The latency model against barriers over the kernel's TCP between network namespaces (issue 42):
# `barrier model --check-mpi` with every rank in its node's namespace. Per layout and way the
# node roots meet, one launch measures a ping-pong between two nodes' first ranks (the network's
# one-way latency, which the predictions use), MPI's own barrier and ours. Printed, not judged.
#
#   bash tests/net/model.sh [LAYOUTS]        (as root; default 2x1,3x1,4x1,2x2)
#
# Takes target/release/barrier and the interposer beside it (tests/net/run.sh builds both), or,
# on a machine without cargo, NET_BIN (a folder with barrier and libbarrier_pmpi.so) and
# NET_OMPI (a relocatable Open MPI's prefix, as in table.sh). Exits 77 without root.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/net/netns.sh
source tests/net/netns.sh

why=$(net_unavailable)
if [ -n "$why" ]; then
    echo "tests/net/model.sh: NOT RUN: $why"
    exit 77
fi
LAYOUTS=${1:-2x1,3x1,4x1,2x2}
BIN=${NET_BIN:-target/release}
BARRIER=$BIN/barrier
PRELOAD=$(cd "$BIN" && pwd)/libbarrier_pmpi.so
[ -x "$BARRIER" ] && [ -f "$PRELOAD" ] || {
    echo "tests/net/model.sh: $BARRIER or $PRELOAD is missing (run tests/net/run.sh, or set NET_BIN)"
    exit 2
}
nodes=$(tr ',' '\n' <<<"$LAYOUTS" | cut -dx -f1 | sort -n | tail -1)

export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$NET_SUBNET
args="--mca btl tcp,self --mca btl_tcp_if_include $NET_SUBNET -x NET_TAG=$NET_TAG"
if [ -n "${NET_OMPI:-}" ]; then
    export OPAL_PREFIX=$NET_OMPI LD_LIBRARY_PATH=$NET_OMPI/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export OMPI_MCA_osc=^ucx MPIRUN=$NET_OMPI/bin/mpirun MPICC=${MPICC:-$NET_OMPI/bin/mpicc}
    args="$args --prtemca oob_tcp_if_include $NET_SUBNET --mca pml ob1"
else
    export MPIRUN=${MPIRUN:-mpirun.openmpi} MPICC=${MPICC:-mpicc.openmpi}
    args="$args --mca oob_tcp_if_include $NET_SUBNET"
fi
export MPIRUN_ARGS=$args

trap net_down EXIT
net_up "$nodes"
"$BARRIER" model --check-mpi --layouts "$LAYOUTS" --wrapper tests/net/in-node.sh --mpi-preload "$PRELOAD" \
    --iters "${ITERS:-300}"

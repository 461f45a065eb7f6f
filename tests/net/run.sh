#!/usr/bin/env bash
# Nodes with a real network stack between them (issue 42): N network namespaces joined by veth
# pairs on a bridge (10.231.0.0/24, see netns.sh), K ranks in each, under Open MPI: its TCP
# transport between every pair of ranks (--mca btl tcp,self), its launcher's PMIx server reached
# over the bridge. The MPI still sees one machine (its launcher started every rank, and the
# ranks share the kernel's memory), so BARRIER_MPI_NODE_BLOCK=K groups each namespace's ranks
# into a node; on a cluster the nodes are the machines themselves (docs/mpi.md).
#
# Runs, per layout: the C check program under the interposer (with the roots' phase ours, then
# MPI's own: BARRIER_MPI_INTERNODE=mpi), barrier-mpi's Rust example, a user's rsmpi program from
# outside the workspace, and the barrier benchmark (MPI's own barrier against ours, with the
# roots' way timed and kept by `auto`: printed, not judged); then OSHMEM's check program with
# its own barriers and under barrier-shmem's interposer, and its benchmark (printed).
#
#   bash tests/net/run.sh [NODESxRANKS ...]      (default: 2x2 3x1; as root)
#
# Without root (or where the kernel refuses namespaces) it says why and exits with 77, which is
# not a pass. Every namespace and link it made is removed on exit, also after a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\n--> [net] %s\n' "$*"; }
FAIL_PREFIX="NET TEST FAILED"
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=tests/net/netns.sh
source tests/net/netns.sh

why=$(net_unavailable)
if [ -n "$why" ]; then
    echo "tests/net: NOT RUN (not a pass): $why"
    exit 77
fi
LAYOUTS=("$@")
[ "${#LAYOUTS[@]}" -gt 0 ] || LAYOUTS=(2x2 3x1)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MPI_PKG_CONFIG=ompi
TARGET=target
OUT_DIR=$TARGET/net
mkdir -p "$OUT_DIR"
out=$OUT_DIR/out.txt
LIMIT=240

step "build: the interposer and barrier-mpi's example (with MPI), the outside program, the C programs"
CARGO_TARGET_DIR=$TARGET cargo build --release -p barrier-mpi -p barrier-pmpi \
    --features barrier-mpi/mpi,barrier-pmpi/mpi --lib --examples
(cd tests/mpi/outside && CARGO_TARGET_DIR="$OLDPWD/$TARGET" cargo build --release --locked)
PRELOAD="$PWD/$TARGET/release/libbarrier_pmpi.so"
nm -D --defined-only "$PRELOAD" | grep -qw MPI_Barrier || fail "$PRELOAD defines no MPI_Barrier"
mpicc.openmpi -O2 -Wall -Werror -o "$OUT_DIR/barrier_check" examples/mpi/barrier_check.c
mpicc.openmpi -O2 -Wall -Werror -o "$OUT_DIR/barrier_bench" crates/barrier-cli/c/barrier_bench.c
CARGO_TARGET_DIR=$TARGET cargo build --release -p barrier-shmem
SHMEM_PRELOAD="$PWD/$TARGET/release/libbarrier_shmem.so"
nm -D --defined-only "$SHMEM_PRELOAD" | grep -qw shmem_barrier_all || fail "$SHMEM_PRELOAD defines no shmem_barrier_all"
oshcc -O2 -Wall -Werror -o "$OUT_DIR/shmem_check" tests/shmem/shmem_check.c
oshcc -O2 -Wall -Werror -o "$OUT_DIR/shmem_bench" crates/barrier-cli/c/shmem_bench.c

trap net_down EXIT

# `net_command LAUNCHER VAR=VALUE... -- PROGRAM ARGS...`: every rank in its node's namespace,
# MPI's traffic on TCP over the bridge; `run NAME EXPECT launch ...` uses it with mpirun.
net_command() {
    local launcher=$1
    shift
    CMD=("$launcher" --oversubscribe -np "$NP"
        --mca btl tcp,self --mca btl_tcp_if_include "$NET_SUBNET" --mca oob_tcp_if_include "$NET_SUBNET"
        -x NET_TAG="$NET_TAG" -x NET_RANKS_PER_NODE="$K")
    while [ "$1" != "--" ]; do
        CMD+=(-x "$1")
        shift
    done
    shift
    CMD+=(tests/net/in-node.sh "$@")
}
launch_command() { net_command mpirun.openmpi "$@"; }
# The launcher's PMIx server, in this namespace, listens on the bridge for ranks in the others.
export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$NET_SUBNET

# The same for OSHMEM: oshrun, its UCX transport on TCP only (UCX_TLS; in-node.sh names the
# node's veth in UCX_NET_DEVICES) and the MPI beneath it (OSHMEM's own barriers are MPI's) on
# TCP too, so that PEs in different namespaces reach each other over the bridge and never
# through this machine's shared memory, which namespaces do not separate. OSHMEM 4.1.4 crashes in
# shmem_finalize without the last variable (see tests/shmem/run.sh).
shmem_launch() { net_command oshrun UCX_TLS=tcp,self UCX_WARN_UNUSED_ENV_VARS=n "$@"; }
export OMPI_MCA_opal_common_ucx_opal_mem_hooks=0

for layout in "${LAYOUTS[@]}"; do
    NODES=${layout%x*}
    K=${layout#*x}
    NP=$((NODES * K))
    step "$NODES namespaces x $K ranks ($NP ranks over the kernel's TCP between namespaces)"
    net_up "$NODES"
    # The backend barrier-mpi reports, and how the interposer describes it.
    backend=hierarchical
    want="hierarchical: $NODES nodes"
    if [ "$NODES" = 1 ]; then
        backend=dissemination
        want="dissemination: one node of"
    fi
    env=(BARRIER_MPI_NODE_BLOCK="$K" BARRIER_TIMEOUT=120s)
    run "C check program, interposed, $layout" ok launch "${env[@]}" LD_PRELOAD="$PRELOAD" BARRIER_VERBOSE=1 \
        -- "$OUT_DIR/barrier_check" 300
    expect_text "C check, $layout" "MPI_Barrier on a communicator of $NP ranks: $want"
    for ((r = 0; r < NP; r++)); do
        expect_text "C check, $layout" "rank $r of $NP: .* checked barriers passed"
    done
    run "Rust example, $layout" ok launch "${env[@]}" -- "$TARGET/release/examples/mpi_barrier" 500
    expect_text "Rust example, $layout" "checked barriers on $backend"
    run "outside program, $layout" ok launch "${env[@]}" -- "$TARGET/release/outside-rsmpi-user"
    expect_text "outside program, $layout" "$NP ranks passed; $backend"
    run "roots on MPI_Barrier, C check program, $layout" ok launch "${env[@]}" BARRIER_MPI_INTERNODE=mpi \
        LD_PRELOAD="$PRELOAD" BARRIER_VERBOSE=1 -- "$OUT_DIR/barrier_check" 300
    [ "$NODES" = 1 ] || expect_text "roots on MPI_Barrier, $layout" "internode MPI's barrier among the node roots"
    expect_text "roots on MPI_Barrier, $layout" "rank $((NP - 1)) of $NP: .* checked barriers passed"
    # No timeout: the roots time both ways and keep the faster (the line says which, and both times).
    run "benchmark, $layout" ok launch BARRIER_MPI_NODE_BLOCK="$K" LD_PRELOAD="$PRELOAD" BARRIER_VERBOSE=1 -- \
        "$OUT_DIR/barrier_bench" 300 11
    grep -E "internode|median|ratio" "$out" | sed 's/.*internode /internode /' | sort -u
    # OSHMEM: its own barriers, then ours (the roots' rounds are OpenSHMEM puts across the bridge).
    shmem_launch -- "$OUT_DIR/shmem_check" 200
    run "OSHMEM, its own barriers, $layout" ok "${CMD[@]}"
    expect_text "OSHMEM, $layout" "$NP PEs passed 200 iterations"
    shmem_launch LD_PRELOAD="$SHMEM_PRELOAD" BARRIER_VERBOSE=1 BARRIER_TIMEOUT=120s BARRIER_SHMEM_NODE_BLOCK="$K" -- \
        "$OUT_DIR/shmem_check" 200
    run "OSHMEM interposed, $layout" ok "${CMD[@]}"
    expect_text "OSHMEM interposed, $layout" "$NP PEs passed 200 iterations"
    expect_text "OSHMEM interposed, $layout" "$NP PEs on $NODES node(s)"
    [ "$NODES" = 1 ] || expect_text "OSHMEM interposed, $layout" "internode dissemination over OpenSHMEM puts"
    if [ "$K" = 1 ] && [ "$NODES" -gt 1 ]; then
        # One PE per node, no timeout: the PEs time ours against OSHMEM's own and keep the faster.
        shmem_launch LD_PRELOAD="$SHMEM_PRELOAD" BARRIER_VERBOSE=1 BARRIER_SHMEM_NODE_BLOCK=1 -- "$OUT_DIR/shmem_check" 200
        run "OSHMEM interposed, one PE per node, timed, $layout" ok "${CMD[@]}"
        expect_text "OSHMEM timed, $layout" "$NP PEs passed 200 iterations"
        expect_text "OSHMEM timed, $layout" "the faster (.*µs a shmem_barrier_all when timed, against .*µs)"
    fi
    shmem_launch LD_PRELOAD="$SHMEM_PRELOAD" BARRIER_SHMEM_NODE_BLOCK="$K" BARRIER_VERBOSE=1 -- "$OUT_DIR/shmem_bench" 300 11
    run "OSHMEM benchmark, $layout" ok "${CMD[@]}"
    grep -E "median|ratio|the faster" "$out" | sed 's/^barrier-shmem: [^:]*: //' || true
    net_down
done
trap - EXIT
step "the model against these runs (barrier model --check-mpi at 2x1 and 2x2: printed, not judged)"
CARGO_TARGET_DIR=$TARGET cargo build --release -p barrier-cli
MPICC=mpicc.openmpi timeout 600 bash tests/net/model.sh 2x1,2x2
echo
echo "net tests: all passed (${LAYOUTS[*]})"

#!/usr/bin/env bash
# The Open MPI coll component `fastbar` (crates/barrier-ompi): built against the Open MPI found
# here, installed under its MCA name in a directory of its own, and loaded by Open MPI through
# mca_base_component_path. Unmodified C and Fortran programs at 2, 3 and 4 ranks, on one node
# and on simulated nodes (coll_fastbar_node_block): MPI_Barrier and MPI_Ibarrier checked barrier
# by barrier, on MPI_COMM_WORLD, duplicates and splits; a PMPI tool preloaded beside it that must
# count every barrier; exclusion (^fastbar) and priority 0; the ABI guard refusing to open; a
# rank whose set-up fails (every rank keeps Open MPI's barrier); the bench's component variant.
# Then OSHMEM's scoll component `fastbar` (crates/barrier-oshmem) with shmem_check at 1-4 PEs.
#
#   bash tests/ompi/run.sh      (run from anywhere; needs openmpi-bin, libopenmpi-dev, gfortran,
#                                libclang-dev and pkg-config: .ci/run installs them)
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\n--> [ompi component] %s\n' "$*"; }
FAIL_PREFIX="OPEN MPI COMPONENT TEST FAILED"
# shellcheck source=tests/lib.sh
source tests/lib.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun.openmpi --oversubscribe)
launch_command() {
    CMD=("${MPIRUN[@]}")
    while [ "$1" != "--" ]; do
        CMD+=(-x "$1")
        shift
    done
    shift
    CMD+=("$@")
}
LIMIT=240
BIN=target/ompi
mkdir -p "$BIN"
out="$BIN/out.txt"

step "build: the component (against this Open MPI), the CLI, the C and Fortran programs"
export MPI_PKG_CONFIG=ompi
cargo build --release -p barrier-ompi --features ompi
cargo build --release -p barrier-cli
LIB=target/release/libbarrier_ompi.so
nm -D --defined-only "$LIB" | grep -qw mca_coll_fastbar_component || fail "$LIB does not export mca_coll_fastbar_component"
# Staged at once: a later build of the workspace without the feature rebuilds the library empty.
rm -rf "$BIN/components"
./target/release/barrier ompi --component "$LIB" --install "$BIN/components"
./target/release/barrier ompi --component "$LIB" > "$out"
expect_text "barrier ompi" "Open MPI's component directory here: "
OWN=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
test -d "$OWN" || fail "ompi_info names no component directory"
export OMPI_MCA_mca_base_component_path="$PWD/$BIN/components:$OWN"
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/barrier_check" examples/mpi/barrier_check.c
mpifort.openmpi -O2 -o "$BIN/barrier_check_f" examples/mpi/barrier_check.f90
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/ibarrier_check" tests/ompi/ibarrier_check.c
mpicc.openmpi -O2 -Wall -Werror -pthread -o "$BIN/heap_holes" examples/mpi/heap_holes.c
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/info_keys" tests/ompi/info_keys.c
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/attr_callbacks" tests/ompi/attr_callbacks.c
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/self_hook" tests/ompi/self_hook.c
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/ibarrier_freed" tests/ompi/ibarrier_freed.c
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/many_comms" tests/ompi/many_comms.c
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/reuse" examples/mpi/reuse.c
mpicc.openmpi -O2 -Wall -Werror -o "$BIN/ibarrier_errors" tests/ompi/ibarrier_errors.c
mpicc.openmpi -O2 -Wall -Werror -pthread -o "$BIN/nbx" tests/ompi/nbx.c
mpicc.openmpi -O2 -Wall -Werror -shared -fPIC -o "$BIN/libpmpi_count.so" tests/ompi/pmpi_count.c

step "ompi_info lists the component and every parameter"
run "ompi_info" ok ompi_info --param coll fastbar --level 9
for p in priority disable min_comm_size device_path backend timeout wait_policy stall_report verbose node_block \
    test_abi_mismatch; do
    expect_text "ompi_info" "parameter \"coll_fastbar_$p\""
done
# wait_policy names only the values it takes (it said "spin, yield, park or auto"; yield is refused).
expect_text "ompi_info" "spin (then yield, never sleep), park"
expect_no_text "ompi_info" "spin, yield, park"

step "unmodified programs served: MPI_Barrier checked, 2-4 ranks, one node and simulated nodes"
for np in 2 3 4; do
    for block in 0 1 2; do
        run "barrier_check np=$np block=$block" ok launch BARRIER_TIMEOUT=120s -- --mca coll_fastbar_priority 100 \
            --mca coll_fastbar_verbose 1 --mca coll_fastbar_node_block "$block" -np "$np" "$BIN/barrier_check" 1000
        expect_text "barrier_check" "rank 0 of $np: .* checked barriers passed"
        if [ "$block" = 0 ] || [ "$block" -ge "$np" ]; then
            expect_text "served" "coll/fastbar: MPI_Barrier on a communicator of $np ranks: dissemination"
        else
            expect_text "served" "coll/fastbar: MPI_Barrier on a communicator of $np ranks: hierarchical"
        fi
    done
done
# The default priority (40) is above tuned's and han's: served without any --mca.
run "default priority" ok launch BARRIER_VERBOSE=1 -- -np 2 "$BIN/barrier_check" 300
expect_text "default priority" "coll/fastbar: MPI_Barrier on a communicator of 2 ranks: dissemination"

step "the program's heap: the component's set-up leaves it as Open MPI's own first barrier does (issue 50 item 0)"
# ISx ran 1.7x slower with the component installed (glibc trimmed its heap every iteration: our
# set-up's freed blocks had moved its small ones); see tests/mpi/run.sh and examples/mpi/heap_holes.c.
for np in 2 4; do
    run "heap holes, Open MPI's barrier, np=$np" ok launch -- --mca coll ^fastbar -np "$np" "$BIN/heap_holes"
    expect_heap_untouched "heap holes, Open MPI's barrier" "$np" 0
    for block in 0 1; do
        run "heap holes, component, np=$np block=$block" ok launch -- --mca coll_fastbar_node_block "$block" \
            -np "$np" "$BIN/heap_holes"
        expect_heap_untouched "heap holes, component, np=$np block=$block" "$np" 40
    done
done

step "MPI_Ibarrier (test loops, two outstanding, MPI_Wait, MPI_Request_free), splits; a PMPI tool beside it"
for np in 2 3 4; do
    for block in 0 2; do
        run "ibarrier_check np=$np block=$block" ok launch BARRIER_TIMEOUT=120s \
            LD_PRELOAD="$PWD/$BIN/libpmpi_count.so" -- --mca coll_fastbar_verbose 1 \
            --mca coll_fastbar_node_block "$block" -np "$np" "$BIN/ibarrier_check" 100
        expect_text "ibarrier_check" "rank 0 of $np: .* checked barriers passed"
        expect_text "ibarrier served" "coll/fastbar: MPI_Barrier on a communicator of $np ranks: "
        # The tool sees every call: 100 rounds on MPI_COMM_WORLD, 50 on a split, one last barrier.
        [ "$(grep -c 'counted 153 MPI_Barrier and 750 MPI_Ibarrier calls' "$out")" = "$np" ] || {
            cat "$out"
            fail "ibarrier_check np=$np: the PMPI tool did not count every barrier on every rank"
        }
        expect_no_text "ibarrier_check" "still pending"
    done
done
# Each communicator's first barrier an MPI_Ibarrier, on simulated nodes (issue 50 item 8 across
# nodes): ours from the second call on, set up in the background, checked the same way; the
# split's halves span nodes too, and at 3 and 5 ranks a node holds one rank.
for shape in "2 1" "3 1" "3 2" "5 1" "5 2"; do
    read -r np block <<<"$shape"
    run "ibarrier_check first np=$np block=$block" ok launch BARRIER_TIMEOUT=120s \
        LD_PRELOAD="$PWD/$BIN/libpmpi_count.so" -- --mca coll_fastbar_verbose 1 \
        --mca coll_fastbar_node_block "$block" -np "$np" "$BIN/ibarrier_check" 100 --ibarrier-first
    expect_text "ibarrier_check first" "rank 0 of $np: .* checked barriers passed"
    expect_text "ibarrier_check first" "coll/fastbar: barriers on a communicator of $np ranks: ours from its barrier call 1 on (its first was MPI_Ibarrier and its ranks span nodes; set up in the background): hierarchical: "
    [ "$(grep -c 'counted 151 MPI_Barrier and 752 MPI_Ibarrier calls' "$out")" = "$np" ] || {
        cat "$out"
        fail "ibarrier_check first np=$np: the PMPI tool did not count every barrier on every rank"
    }
    expect_no_text "ibarrier_check first" "still pending"
    expect_no_text "ibarrier_check first" "stay Open MPI's own"
done

step "info keys: none of ours where the program set none; the program's own kept and obeyed (issue 50 item 7)"
for np in 2 3; do
    run "info keys np=$np" ok launch -- --mca coll_fastbar_verbose 1 -np "$np" "$BIN/info_keys"
    [ "$(grep -c 'info_keys: rank [0-9]* passed' "$out")" = "$np" ] || { cat "$out"; fail "info keys np=$np: not every rank passed"; }
    expect_text "info keys" "Open MPI's own (mpi: the communicator's info key coll_fastbar_disable names mpi first)"
done

step "a freed MPI_Ibarrier on a freed communicator that completed is not reported pending at MPI_Finalize (issue 50 item 6)"
for block in 0 1; do
    run "ibarrier freed block=$block" ok launch -- --mca coll_fastbar_node_block "$block" -np 3 "$BIN/ibarrier_freed"
    [ "$(grep -c 'ibarrier_freed: rank [0-9] finished' "$out")" = 3 ] || { cat "$out"; fail "ibarrier freed: not every rank finished"; }
    expect_no_text "ibarrier freed block=$block" "pending"
done

step "1,100 communicators, each served, under ulimit -n 1024: no descriptor kept per communicator (issue 50 item 3)"
run "many communicators" ok bash -c "ulimit -n 1024 && exec ${MPIRUN[*]} -np 2 $BIN/many_comms 1100"
[ "$(grep -c 'many_comms: rank [0-9] passed' "$out")" = 2 ] || { cat "$out"; fail "many communicators: not every rank passed"; }
expect_no_text "many communicators" "could not make the node's shared segment"
grep "first barrier" "$out"

step "a duplicate per call, freed on return: the next one's first barrier reuses the freed one's (issue 50 item 3)"
# 200 calls: 40 opt out (Open MPI's own), the first duplicate and the first reversed split build;
# every other one reuses the barrier of the last freed communicator of its ranks in its order.
for case in 3:0 4:2; do
    np=${case%:*} block=${case#*:}
    run "reuse np=$np block=$block" ok launch -- --mca coll_fastbar_verbose 1 --mca coll_fastbar_node_block "$block" \
        -np "$np" "$BIN/reuse" 200
    [ "$(grep -c 'reuse: rank [0-9] passed' "$out")" = "$np" ] || { cat "$out"; fail "reuse np=$np: not every rank passed"; }
    [ "$(grep -c "communicator of $np ranks: the barrier of a freed communicator of the same ranks" "$out")" = 158 ] ||
        { cat "$out"; fail "reuse np=$np block=$block: not 158 of the 200 communicators reused a freed one's barrier"; }
    expect_no_text "reuse np=$np block=$block" "pending"
    grep "first barrier" "$out"
done

step "the program's attribute callbacks run only for its own calls (issue 50 item 5)"
for block in 0 1; do
    run "attr callbacks block=$block" ok launch -- --mca coll_fastbar_verbose 1 --mca coll_fastbar_node_block "$block" \
        -np 3 "$BIN/attr_callbacks"
    [ "$(grep -c 'attr_callbacks: rank [0-9] passed' "$out")" = 3 ] || { cat "$out"; fail "attr callbacks: not every rank passed"; }
    expect_text "attr callbacks" "coll/fastbar: MPI_Barrier on a communicator of 3 ranks: "
done

step "a library's MPI_COMM_SELF callback that runs a barrier at MPI_Finalize, set before our first barrier on some ranks and after it on others (issue 50 item 9)"
for block in 0 1; do
    run "self hook block=$block" ok launch -- --mca coll_fastbar_timeout 20s --mca coll_fastbar_node_block "$block" \
        -np 3 "$BIN/self_hook"
    [ "$(grep -c 'self_hook: rank [0-9]: the library.s finalize barrier passed' "$out")" = 3 ] \
        || { cat "$out"; fail "self hook: the library's finalize barrier did not pass on every rank"; }
    [ "$(grep -c 'self_hook: rank [0-9] finished' "$out")" = 3 ] || { cat "$out"; fail "self hook: not every rank finished"; }
done

step "a failed MPI_Ibarrier goes to its communicator's error handler (MPI_ERRORS_RETURN), not MPI_COMM_WORLD's (issue 50 item 4)"
run "ibarrier errors" ok launch -- --mca coll_fastbar_timeout 1s -np 2 "$BIN/ibarrier_errors"
expect_text "ibarrier errors" "rank 0's MPI_Wait returned MPI_ERR_OTHER to the program"
expect_text "ibarrier errors" "MPI_Ibarrier failed on rank 0: barrier 2 timed out"
[ "$(grep -c 'ibarrier_errors: rank [0-9] finished' "$out")" = 2 ] || { cat "$out"; fail "ibarrier errors: not every rank finished"; }

step "a program whose only barrier is MPI_Ibarrier (NBX) is served: built in the background, switched at one call (issue 50 item 8)"
for np in 2 3 4 5; do
    run "nbx np=$np" ok launch BARRIER_TIMEOUT=120s LD_PRELOAD="$PWD/$BIN/libpmpi_count.so" -- \
        --mca coll_fastbar_verbose 1 -np "$np" "$BIN/nbx" 300
    [ "$(grep -c "nbx: rank [0-9] of $np: .* every one received" "$out")" = "$np" ] \
        || { cat "$out"; fail "nbx np=$np: not every rank received every message"; }
    # MPI_COMM_WORLD and the duplicate: each switched to ours, said once (by rank 0).
    [ "$(grep -c "barriers on a communicator of $np ranks: ours from its barrier call [0-9]* on (built in the background" "$out")" = 2 ] \
        || { cat "$out"; fail "nbx np=$np: MPI_Ibarrier was not served by ours on both communicators"; }
    expect_no_text "nbx np=$np" "stay Open MPI's own"
    expect_no_text "nbx np=$np" "still pending"
    # The tool beside it sees every call: 300 rounds on each communicator, 10 MPI_Barrier.
    [ "$(grep -c 'counted 10 MPI_Barrier and 600 MPI_Ibarrier calls' "$out")" = "$np" ] \
        || { cat "$out"; fail "nbx np=$np: the PMPI tool did not count every barrier on every rank"; }
done
# MPI_THREAD_MULTIPLE: two threads of each rank start two communicators' builds at once (the
# progress callback advances both; a build started meanwhile is not lost to its count).
for np in 2 3; do
    run "nbx threads np=$np" ok launch BARRIER_TIMEOUT=120s -- --mca coll_fastbar_verbose 1 -np "$np" "$BIN/nbx" --threads 300
    [ "$(grep -c "nbx: rank [0-9] of $np: two threads, .* every one received" "$out")" = "$np" ] \
        || { cat "$out"; fail "nbx threads np=$np: not every rank received every message"; }
    [ "$(grep -c "barriers on a communicator of $np ranks: ours from its barrier call" "$out")" = 2 ] \
        || { cat "$out"; fail "nbx threads np=$np: not both communicators switched to ours"; }
done
# Several (simulated) nodes: ours from the second call on, the hierarchy set up in the
# background over the private channel (it used to stay Open MPI's until a first MPI_Barrier).
for shape in "3 1 3" "4 2 2" "5 2 3"; do
    read -r np block nodes <<<"$shape"
    run "nbx node blocks np=$np block=$block" ok launch BARRIER_TIMEOUT=120s -- --mca coll_fastbar_verbose 1 \
        --mca coll_fastbar_node_block "$block" -np "$np" "$BIN/nbx" 200
    [ "$(grep -c "nbx: rank [0-9] of $np: .* every one received" "$out")" = "$np" ] \
        || { cat "$out"; fail "nbx node blocks np=$np: not every rank received every message"; }
    # MPI_COMM_WORLD and the duplicate.
    [ "$(grep -c "barriers on a communicator of $np ranks: ours from its barrier call 1 on (its first was MPI_Ibarrier and its ranks span nodes; set up in the background): hierarchical: $nodes nodes" "$out")" = 2 ] \
        || { cat "$out"; fail "nbx node blocks np=$np: not both communicators ours from the second call"; }
    expect_no_text "nbx node blocks np=$np" "stay Open MPI's own"
done
# A rank whose node's set-up fails there: the first flight agrees on it, and every rank's
# barriers are then a dissemination among all ranks over the private channel; the program runs on.
for fault in join:1 join:2; do
    run "nbx node blocks fault $fault" ok launch BARRIER_MPI_FAULT="$fault" -- --mca coll_fastbar_timeout 20s \
        --mca coll_fastbar_verbose 1 --mca coll_fastbar_node_block 2 -np 4 "$BIN/nbx" 200
    [ "$(grep -c 'nbx: rank [0-9] of 4: .* every one received' "$out")" = 4 ] || { cat "$out"; fail "nbx node blocks fault $fault: not every rank received every message"; }
    expect_text "nbx node blocks fault $fault" "world rank ${fault#*:}: the hierarchy for a communicator of 4 ranks could not be set up here (building it in the background failed: .*fault injected by BARRIER_MPI_FAULT=$fault); its barriers are a dissemination among its ranks over the private channel instead, on every rank"
    expect_text "nbx node blocks fault $fault" "barriers on a communicator of 4 ranks: ours from its barrier call 1 on (.*): a dissemination among its ranks over the private channel"
    expect_no_text "nbx node blocks fault $fault" ": hierarchical: "
done
# On that flat way a late rank's stall reports speak of ranks, not of nodes and node roots: a rank
# whose round's sender it is names it (at 4 ranks in round 100, rank 2 waits for it in round 0
# and rank 3 in round 1; a rank that must send to the late rank waits in its send instead).
run "nbx node blocks fault, a late rank" ok launch BARRIER_MPI_FAULT=join:2 NBX_LATE=1:3 -- \
    --mca coll_fastbar_stall_report 1s --mca coll_fastbar_node_block 2 -np 4 "$BIN/nbx" 200
[ "$(grep -c 'nbx: rank [0-9] of 4: .* every one received' "$out")" = 4 ] || { cat "$out"; fail "nbx late rank: not every rank received every message"; }
expect_text "nbx late rank" "of a communicator of 4 ranks) has waited [0-9.]*s in barrier [0-9]*, in its dissemination among all ranks (round [0-9]): world rank 1 (communicator rank 1) has not signalled: it has not arrived"
expect_no_text "nbx late rank" "internode phase"
# Settings that differ between ranks (disable on one): the second calls went two ways, which
# cannot be agreed without waiting; every rank ends the job within seconds, saying which differ.
start=$SECONDS
run "nbx node blocks, disable on one rank" fail "${MPIRUN[@]}" --mca coll_fastbar_node_block 2 \
    -np 1 -x OMPI_MCA_coll_fastbar_disable=1 "$BIN/nbx" 200 : -np 3 "$BIN/nbx" 200
expect_text "nbx node blocks, disable on one rank" "are ours from the second call on ranks \[1, 2, 3\] and Open MPI's on ranks \[0\], and cannot be agreed without waiting: the component's settings differ between ranks (coll_fastbar_disable is set on ranks \[0\] of it only): give every rank the same; aborting the job"
[ $((SECONDS - start)) -lt 25 ] || fail "nbx node blocks, disable on one rank: took $((SECONDS - start))s to end"
# A rank whose build fails: every rank stays on Open MPI's barrier, and the program runs on.
for fault in join:1 open:1 join:0; do
    run "nbx fault $fault" ok launch BARRIER_MPI_FAULT="$fault" -- --mca coll_fastbar_timeout 5s \
        --mca coll_fastbar_verbose 1 -np 2 "$BIN/nbx" 200
    [ "$(grep -c 'nbx: rank [0-9] of 2: .* every one received' "$out")" = 2 ] || { cat "$out"; fail "nbx fault $fault: not every rank received every message"; }
    expect_text "nbx fault $fault" "world rank ${fault#*:}: barriers on a communicator of 2 ranks stay Open MPI's own: building it in the background failed: .*fault injected by BARRIER_MPI_FAULT=$fault"
    expect_no_text "nbx fault $fault" "ours from its barrier call"
done
# A rank that cannot start the set-up's exchange (an MPI error there; the fault skips its
# MPI_Iallgather): the others started it and would wait at their first MPI_Barrier for ever. It
# ends the job within seconds, saying why (it used to decline alone, and the job hung).
start=$SECONDS
run "nbx exchange fault" fail launch BARRIER_MPI_FAULT=exchange:1 -- -np 3 "$BIN/nbx" 200
expect_text "nbx exchange fault" "coll/fastbar: world rank 1: MPI_Ibarrier: cannot start building a communicator's barrier here (.*fault injected by BARRIER_MPI_FAULT=exchange:1), and the other ranks started its exchange in this call and would wait for this one; aborting the job"
[ $((SECONDS - start)) -lt 25 ] || fail "nbx exchange fault: took $((SECONDS - start))s to end"
run "ibarrier latency" ok launch -- --mca coll_fastbar_verbose 1 -np 2 "$BIN/nbx" --latency 20000
expect_text "ibarrier latency" "ours from its barrier call"
grep "MPI_Ibarrier + MPI_Wait" "$out"

step "a Fortran program"
run "fortran" ok launch BARRIER_TIMEOUT=120s -- --mca coll_fastbar_verbose 1 -np 3 "$BIN/barrier_check_f" 500
expect_text "fortran" "500 checked barriers passed"
expect_text "fortran" "coll/fastbar: MPI_Barrier on a communicator of 3 ranks: dissemination"

step "turned off: excluded (^fastbar), priority 0, disable"
for how in "--mca coll ^fastbar" "--mca coll_fastbar_priority 0" "--mca coll_fastbar_disable 1"; do
    # shellcheck disable=SC2086
    run "off: $how" ok launch BARRIER_VERBOSE=1 -- $how -np 3 "$BIN/barrier_check" 300
    expect_text "off" "checked barriers passed"
    expect_no_text "off: $how" "coll/fastbar:"
done

step "settings that differ between ranks: agreed where every rank runs the component, said where a rank never comes (issue 50 item 2)"
run "disable on one rank" ok "${MPIRUN[@]}" -np 1 -x OMPI_MCA_coll_fastbar_disable=1 "$BIN/barrier_check" 200 : \
    -np 2 "$BIN/barrier_check" 200
expect_text "disable on one rank" "coll/fastbar: barriers of .* stay the next component's on every rank: coll_fastbar_disable is set on ranks \[0\] of it only"
[ "$(grep -c 'checked barriers passed' "$out")" = 3 ] || { cat "$out"; fail "disable on one rank: not every rank passed"; }
[ "$(grep -c 'stay the next component' "$out")" = 1 ] || { cat "$out"; fail "disable on one rank: not said exactly once"; }
run "min size on one rank" ok "${MPIRUN[@]}" -np 2 "$BIN/barrier_check" 200 : \
    -np 1 -x OMPI_MCA_coll_fastbar_min_comm_size=5 "$BIN/barrier_check" 200
expect_text "min size on one rank" "coll_fastbar_min_comm_size is above 3 on ranks \[2\] of it only"
[ "$(grep -c 'checked barriers passed' "$out")" = 3 ] || { cat "$out"; fail "min size on one rank: not every rank passed"; }
# A rank whose component never serves (priority 0 there) runs Open MPI's barrier: the others
# cannot agree with it, and must say so within seconds (then they go on waiting: the job is
# ended here after the report).
rc=0
timeout 30 "${MPIRUN[@]}" -x BARRIER_STALL_REPORT=3s -np 1 "$BIN/barrier_check" 200 : \
    -np 1 -x OMPI_MCA_coll_fastbar_priority=0 "$BIN/barrier_check" 200 : -np 1 "$BIN/barrier_check" 200 \
    >"$out" 2>&1 || rc=$?
[ "$rc" = 124 ] || { cat "$out"; fail "priority 0 on one rank: expected the job to wait (and be ended by timeout), got $rc"; }
expect_text "priority 0 on one rank" "coll/fastbar: world rank 0 has waited 3\.[0-9]s in the first barrier of .* for every one to set up this component's barrier"
expect_text "priority 0 on one rank" "coll_fastbar_priority there"
echo "ok: priority 0 on one rank: the others said so"

step "the ABI guard: a mismatch (forced) refuses to open, once per job; the job runs on Open MPI's barrier"
run "abi mismatch" ok launch BARRIER_VERBOSE=1 -- --mca coll_fastbar_test_abi_mismatch 1 -np 3 "$BIN/barrier_check" 300
expect_text "abi mismatch" "coll/fastbar: not opened: coll_fastbar_test_abi_mismatch is set"
[ "$(grep -c 'not opened' "$out")" = 1 ] || { cat "$out"; fail "abi mismatch: not said exactly once"; }
expect_no_text "abi mismatch" "coll/fastbar: MPI_Barrier on a communicator"
expect_text "abi mismatch" "checked barriers passed"

step "a rank whose set-up fails: every rank keeps Open MPI's barrier, the job finishes"
for block in 0 2; do
    run "set-up fault block=$block" ok launch BARRIER_MPI_FAULT=open:1 -- --mca coll_fastbar_node_block "$block" \
        -np 4 "$BIN/barrier_check" 300
    expect_text "set-up fault" "stays Open MPI's own on every rank"
    expect_text "set-up fault" "rank 3 of 4: .* checked barriers passed"
done
run "a bad setting" ok launch -- --mca coll_fastbar_timeout bogus -np 3 "$BIN/barrier_check" 100
expect_text "bad setting" 'invalid value "bogus" for MCA parameter coll_fastbar_timeout'
expect_text "bad setting" "checked barriers passed"

step "barrier bench --mpi: Open MPI's barrier, the component and the interposer (smoke; times are printed)"
cargo build --release -p barrier-pmpi --features mpi
cargo build --release -p barrier-mpi --features mpi --example mpi_hybrid
run "attr callbacks, interposer" ok launch LD_PRELOAD="$PWD/target/release/libbarrier_pmpi.so" BARRIER_VERBOSE=1 -- \
    --mca coll ^fastbar -np 3 "$BIN/attr_callbacks"
[ "$(grep -c 'attr_callbacks: rank [0-9] passed' "$out")" = 3 ] || { cat "$out"; fail "attr callbacks, interposer: not every rank passed"; }
expect_text "attr callbacks, interposer" "barrier: MPI_Barrier on a communicator of 3 ranks: "
# The interposer frees its barriers as MPI_Finalize is entered, on every rank alike: a library's
# MPI_COMM_SELF callback then runs MPI's barrier everywhere.
run "self hook, interposer" ok launch LD_PRELOAD="$PWD/target/release/libbarrier_pmpi.so" -- --mca coll ^fastbar \
    -np 3 "$BIN/self_hook"
[ "$(grep -c 'self_hook: rank [0-9] finished' "$out")" = 3 ] || { cat "$out"; fail "self hook, interposer: not every rank finished"; }
run "bench --mpi with the component" ok env MPIRUN=mpirun.openmpi MPICC=mpicc.openmpi \
    ./target/release/barrier bench --mpi -n 2 --iters 21000 --mpi-component "$BIN/components/mca_coll_fastbar.so"
expect_text "bench" "coll/fastbar (the component)"
expect_text "bench" "ratio coll/fastbar / PMPI_Barrier"
# The hybrid row: barrier-mpi's example beside the command (built above).
expect_text "bench" "hybrid: 2 ranks x 2 threads, 300 hybrid barriers checked: no thread left early"
cat "$out"

step "OSHMEM: the scoll component (shmem_barrier_all, shmem_sync_all, active sets), 1-4 PEs, simulated nodes"
# OSHMEM 4.1.4 crashes in shmem_finalize without this (open-mpi/ompi#11604; tests/shmem does the same).
export OMPI_MCA_opal_common_ucx_opal_mem_hooks=0
cargo build --release -p barrier-oshmem --features oshmem
SLIB=target/release/libbarrier_oshmem.so
nm -D --defined-only "$SLIB" | grep -qw mca_scoll_fastbar_component || fail "$SLIB does not export mca_scoll_fastbar_component"
./target/release/barrier ompi --component "$SLIB" --install "$BIN/components"
oshcc -O2 -Wall -Werror -o "$BIN/shmem_check" tests/shmem/shmem_check.c
oshcc -O2 -Wall -Werror -pthread -o "$BIN/shmem_threads" tests/ompi/shmem_threads.c
oshcc -O2 -Wall -Werror -o "$BIN/shmem_wildcard" tests/ompi/shmem_wildcard.c
run "oshmem_info" ok oshmem_info --param scoll fastbar --level 9
for p in priority disable backend timeout wait_policy verbose node_block test_abi_mismatch; do
    expect_text "oshmem_info" "parameter \"scoll_fastbar_$p\""
done
expect_text "oshmem_info" "spin (then yield, never sleep), park"
expect_no_text "oshmem_info" "spin, yield, park"
# The coll component is off here, so that what serves is the scoll one (OSHMEM's default scoll
# would run shmem_barrier_all through coll, and so through the coll component).
OSHRUN=(oshrun --oversubscribe --mca coll ^fastbar)
for np in 1 2 3 4; do
    for block in 0 1 2; do
        [ "$np" = 1 ] && [ "$block" != 0 ] && continue
        run "scoll np=$np block=$block" ok "${OSHRUN[@]}" --mca scoll_fastbar_verbose 1 \
            --mca scoll_fastbar_node_block "$block" -x BARRIER_TIMEOUT=120s -np "$np" "$BIN/shmem_check" 300
        expect_text "scoll" "$np PEs passed 300 iterations"
        if [ "$np" -ge 2 ]; then
            expect_text "scoll served" "scoll/fastbar: shmem barriers of every PE ($np): "
        fi
        if [ "$np" -ge 3 ]; then
            # The even PEs' set and the pair {0, 1}.
            expect_text "scoll active sets" "scoll/fastbar: shmem barriers of an active set of 2 PEs: "
        fi
    done
done
# Puts to a static variable made while the target already waits in our barrier land (the
# waiting PE keeps MPI, and so OSHMEM, progressing).
run "scoll static puts" ok "${OSHRUN[@]}" -x BARRIER_TIMEOUT=30s -np 3 "$BIN/shmem_check" 40 static-only
expect_text "scoll static puts" "3 PEs passed 40 iterations (static puts only)"
# Issue 50 item 1: two threads of a PE build two overlapping sets' barriers, started in opposite
# orders on two PEs (a set-up lock held across MPI hung this), on one node and on simulated nodes.
for block in 0 1 2; do
    run "scoll threads block=$block" ok "${OSHRUN[@]}" --mca scoll_fastbar_node_block "$block" \
        --mca scoll_fastbar_verbose 1 -x BARRIER_TIMEOUT=60s -np 4 "$BIN/shmem_threads" 200
    expect_text "scoll threads" "two sets in two threads, passed 200 iterations each"
    expect_text "scoll threads" "scoll/fastbar: shmem barriers of an active set of 3 PEs: "
done
# Issue 50 item 9: a hybrid program's wildcard MPI_Irecv on MPI_COMM_WORLD across an active set's
# first barrier gets the program's message: the set's communicator is made from a private
# duplicate of MPI_COMM_WORLD (made on MPI_COMM_WORLD, the set-up lost a message to the receive
# and hung). OSHMEM's own scoll/mpi makes one per set on MPI_COMM_WORLD too (and hangs the same
# way without us): it is excluded.
for i in 1 2 3; do
    run "scoll wildcard receive $i" ok "${OSHRUN[@]}" --mca scoll ^mpi -x BARRIER_TIMEOUT=60s -np 3 "$BIN/shmem_wildcard"
    [ "$(grep -c 'shmem_wildcard: PE [0-9] passed' "$out")" = 3 ] || { cat "$out"; fail "scoll wildcard receive: not every PE passed"; }
done
# Issue 50 item 2: scoll's disable on one PE only is agreed (every PE declines, said once).
run "scoll disable on one PE" ok "${OSHRUN[@]}" -np 1 -x OMPI_MCA_scoll_fastbar_disable=1 "$BIN/shmem_check" 100 : \
    -np 2 "$BIN/shmem_check" 100
expect_text "scoll disable on one PE" "scoll/fastbar: barriers of .* stay the next component's on every PE: scoll_fastbar_disable is set on PEs \[0\] of it only"
expect_text "scoll disable on one PE" "3 PEs passed 100 iterations"
run "scoll abi mismatch" ok "${OSHRUN[@]}" --mca scoll_fastbar_test_abi_mismatch 1 -np 3 "$BIN/shmem_check" 100
expect_text "scoll abi mismatch" "scoll/fastbar: not opened: scoll_fastbar_test_abi_mismatch is set"
[ "$(grep -c 'not opened' "$out")" = 1 ] || { cat "$out"; fail "scoll abi mismatch: not said exactly once"; }
expect_text "scoll abi mismatch" "3 PEs passed 100 iterations"
run "scoll set-up fault" ok "${OSHRUN[@]}" -x BARRIER_MPI_FAULT=open:1 -np 4 "$BIN/shmem_check" 100
expect_text "scoll set-up fault" "stay OSHMEM's own on every PE"
expect_text "scoll set-up fault" "4 PEs passed 100 iterations"
# Issue 50 item 9: a PE that cannot make an active set's communicator (the fault: it fails
# before MPI_Comm_create_group) leaves the set's other PEs waiting inside MPI for it: it must end
# the job, saying why, within seconds (it used to decline alone, and the others hung).
start=$SECONDS
run "scoll set communicator fault" fail "${OSHRUN[@]}" -x BARRIER_MPI_FAULT=group:1 -np 3 "$BIN/shmem_check" 100
expect_text "scoll set communicator fault" "scoll/fastbar: shmem barriers of an active set of 2 PEs: PE 1 cannot make the set's MPI communicator (.*fault injected by BARRIER_MPI_FAULT=group:1), and the set's other PEs wait for it in MPI_Comm_create_group; aborting the job"
[ $((SECONDS - start)) -lt 25 ] || fail "scoll set communicator fault: took $((SECONDS - start))s to end"
# A PE that does not come: the others' barrier times out, says which PE is missing and ends the
# job (OSHMEM's barrier calls only print an error and return: passing on would be an early release).
start=$SECONDS
run "scoll absent PE" fail "${OSHRUN[@]}" --mca scoll_fastbar_timeout 2s -x SHMEM_CHECK_ABSENT_PE=1 -np 3 \
    "$BIN/shmem_check" 50
expect_text "scoll absent PE" "have not arrived"
expect_text "scoll absent PE" "scoll/fastbar: a barrier failed (the reason is above); aborting the job"
# (PE 1 itself may complete it when the abort cuts its sleep short: every other PE had arrived.)
expect_no_text "scoll absent PE" "PE [02] passed the last barrier"
[ $((SECONDS - start)) -lt 25 ] || fail "scoll absent PE: the others took $((SECONDS - start))s to give up"
run "scoll excluded" ok "${OSHRUN[@]}" --mca scoll ^fastbar --mca scoll_fastbar_verbose 1 -np 3 "$BIN/shmem_check" 100
expect_no_text "scoll excluded" "scoll/fastbar:"

left=$(ls /dev/shm | grep '^barrier-' || true)
[ -z "$left" ] || fail "left in /dev/shm: $left"
echo "open mpi component tests: all passed"

#!/usr/bin/env bash
# The MPI tests, under one MPI: barrier-mpi's Rust example, the C and the Fortran check programs,
# with the MPI library's barrier and under the PMPI interposer, at 2, 3 and 4 ranks, on one node
# and on simulated nodes (BARRIER_MPI_NODE_BLOCK); a rank with a bad setting; a rank that never
# arrives; MPI's progress rule (a large message and one-sided reads crossing barriers); two
# threads calling MPI_Barrier at once (MPI_THREAD_MULTIPLE); a pair timing barriers while the
# job's other ranks are busy; and (Open MPI run) an interposer built without MPI.
#
#   bash tests/mpi/run.sh [ompi|mpich]     (default ompi; run from anywhere)
#
# Each MPI has its own cargo target dir (rsmpi is built against one MPI: MPI_PKG_CONFIG picks it):
# target/ for Open MPI, target/mpich/ for MPICH. Needs that MPI (compiler wrappers and launcher),
# gfortran, libclang and pkg-config: `.ci/run` installs them.
set -euo pipefail
cd "$(dirname "$0")/../.."

FLAVOR=${1:-ompi}
step() { printf '\n--> [%s] %s\n' "$FLAVOR" "$*"; }
FAIL_PREFIX="MPI TEST FAILED [$FLAVOR]"
# shellcheck source=tests/lib.sh
source tests/lib.sh

case "$FLAVOR" in
    ompi)
        # As root, Open MPI's mpirun needs both; --oversubscribe lets 3 and 4 ranks share 2 cores.
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        MPIRUN=(mpirun.openmpi --oversubscribe)
        MPICC=mpicc.openmpi
        MPIFORT=mpifort.openmpi
        TARGET=target
        ;;
    mpich)
        # Hydra starts any number of ranks per core; it passes the whole environment on.
        MPIRUN=(mpiexec.mpich)
        MPICC=mpicc.mpich
        MPIFORT=mpifort.mpich
        TARGET=target/mpich
        ;;
    *) fail "unknown MPI '$FLAVOR': ompi or mpich" ;;
esac
# `run NAME EXPECT launch VAR=VALUE... -- ARGS...`: the MPI launcher with those variables set for
# every rank (Open MPI: -x; MPICH: -genv), then ARGS (launcher options, -np, the program).
launch_command() {
    CMD=("${MPIRUN[@]}")
    while [ "$1" != "--" ]; do
        if [ "$FLAVOR" = ompi ]; then CMD+=(-x "$1"); else CMD+=(-genv "${1%%=*}" "${1#*=}"); fi
        shift
    done
    shift
    CMD+=("$@")
}
# Every run is bounded: a hang fails the test instead of the CI job's clock.
LIMIT=240

step "build: barrier-mpi (example), the interposer, the C and Fortran programs"
mkdir -p "$TARGET/mpi"
if [ "$FLAVOR" = ompi ]; then
    # First the interposer as `cargo build --workspace` makes it (without MPI): kept aside for
    # the test below that it does not pass for the real one.
    cargo build --release -p barrier-pmpi
    cp target/release/libbarrier_pmpi.so "$TARGET/mpi/libbarrier_pmpi_without_mpi.so"
fi
export MPI_PKG_CONFIG=$FLAVOR
CARGO_TARGET_DIR=$TARGET cargo build --release -p barrier-mpi -p barrier-pmpi \
    --features barrier-mpi/mpi,barrier-pmpi/mpi --lib --examples
# barrier-mpi's own unit tests (they need its mpi feature).
CARGO_TARGET_DIR=$TARGET cargo test --release -p barrier-mpi --features barrier-mpi/mpi --lib
# Its doc examples compile against this MPI (they run under mpirun below, as the examples).
CARGO_TARGET_DIR=$TARGET cargo test --release -p barrier-mpi --features barrier-mpi/mpi --doc
cargo build --release -p barrier-cli
cargo build --release -p barrier-suite --example hello
PRELOAD="$PWD/$TARGET/release/libbarrier_pmpi.so"
test -f "$PRELOAD" || fail "no $PRELOAD"
# A library that defines no MPI_Barrier intercepts nothing: never time or test one.
nm -D --defined-only "$PRELOAD" | grep -qw MPI_Barrier || fail "$PRELOAD defines no MPI_Barrier"
for prog in barrier_check transport_bench progress_rma progress_p2p busy_ranks thread_multiple heap_holes reuse; do
    "$MPICC" -O2 -Wall -Werror -pthread -o "$TARGET/mpi/$prog" "examples/mpi/$prog.c"
done
# `barrier bench --mpi` embeds this one, so it lives in the CLI's package.
"$MPICC" -O2 -Wall -Werror -pthread -o "$TARGET/mpi/barrier_bench" crates/barrier-cli/c/barrier_bench.c
"$MPIFORT" -O2 -o "$TARGET/mpi/barrier_check_f" examples/mpi/barrier_check.f90
RUST_EXAMPLE=$TARGET/release/examples/mpi_barrier
HALO=$TARGET/release/examples/halo
HYBRID=$TARGET/release/examples/mpi_hybrid
SELF_HOOK=$TARGET/release/examples/self_hook
# A user's rsmpi program outside the workspace, depending on barrier-mpi by path (its own
# workspace and lock file; built into this MPI's target dir, so shared dependencies are reused).
(cd tests/mpi/outside && CARGO_TARGET_DIR="$OLDPWD/$TARGET" cargo build --release --locked)
OUTSIDE=$TARGET/release/outside-rsmpi-user
BIN=$TARGET/mpi

out=$TARGET/mpi/out.txt

for np in 2 3 4; do
    for block in 0 1 2; do
        case "$block" in
            0) want="dissemination" ;;                      # one node: the node's own backend
            *) want="hierarchical" ;;
        esac
        # One block of 2 covering both of 2 ranks is one node again.
        if [ "$block" -ge "$np" ]; then want="dissemination"; fi
        env=(BARRIER_MPI_NODE_BLOCK="$block" BARRIER_TIMEOUT=120s)
        ours=("${env[@]}" LD_PRELOAD="$PRELOAD" BARRIER_VERBOSE=1)
        step "$np ranks, BARRIER_MPI_NODE_BLOCK=$block (expect $want)"
        run "rust example, np=$np block=$block" ok launch "${env[@]}" -- -np "$np" "$RUST_EXAMPLE" 2000
        expect_text "rust example" "checked barriers on $want"
        # rsmpi programs: the FastBarrier trait on any communicator, blocking and split phase.
        run "halo exchange (FastBarrier), np=$np block=$block" ok launch "${env[@]}" -- -np "$np" "$HALO" 300
        expect_text "halo" "field exact; $want"
        # Every thread of every rank in one barrier (MPI_THREAD_FUNNELED; issue 49 item 5).
        run "hybrid, np=$np x 2 threads, block=$block" ok launch "${env[@]}" -- -np "$np" "$HYBRID" 2 200
        expect_text "hybrid" "$np ranks x 2 threads, 300 hybrid barriers checked: no thread left early"
        # A library's MPI_COMM_SELF callback that runs a fast barrier at MPI_Finalize, its
        # attribute set before our first build on even ranks and after it on odd ones (issue 50
        # item 9): barrier_mpi::initialize() sets our hook first, so it runs last everywhere.
        run "self hook (FastBarrier), np=$np block=$block" ok launch "${env[@]}" -- -np "$np" "$SELF_HOOK"
        [ "$(grep -c "self_hook: rank [0-9]*: the library.s finalize barrier passed" "$out")" = "$np" ] \
            || { cat "$out"; fail "self hook: not every rank's finalize barrier passed"; }
        [ "$(grep -c "self_hook: rank [0-9]* finished" "$out")" = "$np" ] \
            || { cat "$out"; fail "self hook: not every rank finished"; }
        run "a program outside the workspace, np=$np block=$block" ok launch "${env[@]}" -- -np "$np" "$OUTSIDE"
        expect_text "outside" "$np ranks passed; $want"
        if [ "$block" = 0 ]; then
            # The mpi path: MPI_Ibarrier under the split phase.
            run "outside, MPI_Barrier path, np=$np" ok launch BARRIER_BACKEND=mpi BARRIER_TIMEOUT=120s -- -np "$np" "$OUTSIDE"
            expect_text "outside, mpi" "$np ranks passed; mpi"
        fi
        # MPI's own barrier does not depend on the node block: once per rank count.
        if [ "$block" = 0 ]; then
            run "C, MPI's barrier, np=$np" ok launch "${env[@]}" -- -np "$np" "$BIN/barrier_check" 1000
            expect_text "C plain" "checked barriers passed"
            run "Fortran, MPI's barrier, np=$np" ok launch "${env[@]}" -- -np "$np" "$BIN/barrier_check_f" 1000
        fi
        run "C, interposed, np=$np block=$block" ok launch "${ours[@]}" -- -np "$np" "$BIN/barrier_check" 1000
        expect_text "C interposed" "MPI_Barrier on a communicator of $np ranks: $want"
        # One short line per communicator: the backends not chosen are left to `barrier info`.
        expect_no_text "C interposed" "declined or not needed"
        run "Fortran, interposed, np=$np block=$block" ok launch "${ours[@]}" -- -np "$np" "$BIN/barrier_check_f" 1000
        expect_text "Fortran interposed" "MPI_Barrier on a communicator of $np ranks: $want"
    done
done

step "odd sizes across many nodes: our rounds among 13, 7 and 3 node roots, checked"
# Up to four rounds among the roots (their link: one message per round over MPI point-to-point),
# nodes of one, two and three ranks, a node of one rank among larger ones; auto would time MPI's
# own barrier against ours and may keep it, so ours is named.
for case in 13:1:13 13:2:7 8:3:3; do
    IFS=: read -r np block nodes <<<"$case"
    run "many nodes, np=$np block=$block" ok launch LD_PRELOAD="$PRELOAD" BARRIER_MPI_NODE_BLOCK="$block" \
        BARRIER_MPI_INTERNODE=dissemination BARRIER_TIMEOUT=120s BARRIER_VERBOSE=1 -- -np "$np" "$BIN/barrier_check" 200
    expect_text "many nodes, np=$np block=$block" "communicator of $np ranks: hierarchical: $nodes nodes: "
    expect_text "many nodes, np=$np block=$block" "internode dissemination over mpi-p2p among the node roots"
    [ "$(grep -c 'checked barriers passed' "$out")" = "$np" ] ||
        { cat "$out"; fail "many nodes, np=$np block=$block: not every rank passed"; }
done

step "a duplicate per call, freed on return: the next one's first barrier reuses the freed one's (issue 50 item 3)"
# 200 calls: the first duplicate and the first reversed split build; every other one (the
# interposer has no opt-out key) reuses the barrier of the last freed communicator of its ranks
# in its order. Then 50 of all ranks but the last, whose reuses are not counted.
for case in 3:0 4:2; do
    np=${case%:*} block=${case#*:}
    run "reuse, interposed, np=$np block=$block" ok launch LD_PRELOAD="$PRELOAD" BARRIER_VERBOSE=1 \
        BARRIER_MPI_NODE_BLOCK="$block" -- -np "$np" "$BIN/reuse" 200 mpi-ibarrier
    [ "$(grep -c 'reuse: rank [0-9] passed' "$out")" = "$np" ] || { cat "$out"; fail "reuse np=$np: not every rank passed"; }
    [ "$(grep -c "communicator of $np ranks: the barrier of a freed communicator of the same ranks" "$out")" = 198 ] ||
        { cat "$out"; fail "reuse np=$np block=$block: not 198 of the 200 communicators reused a freed one's barrier"; }
    grep "first barrier" "$out"
done

step "the program's heap: our set-up leaves it as MPI's own first barrier does (issue 50 item 0)"
# ISx ran 1.7x slower with the interposer loaded: our set-up's freed blocks (our own, and MPI's
# when it freed the communicators it made on the way) left holes that moved ISx's small blocks,
# and glibc trimmed its heap every iteration. Our blocks now live in mappings of our own
# (crates/barrier-heap) and the set-up keeps what it made until the communicator goes.
# Measured: MPI's own first barrier leaves 0 holes; ours left about 240 before, 12-19 now (MPI's
# temporaries), and about 90 with the private heap alone.
HEAP_HOLES_MOST=40
for np in 2 4; do
    run "heap holes, MPI's barrier, np=$np" ok launch -- -np "$np" "$BIN/heap_holes"
    expect_heap_untouched "heap holes, MPI's barrier" "$np" 0
    for block in 0 1; do
        run "heap holes, interposed, np=$np block=$block" ok launch LD_PRELOAD="$PRELOAD" BARRIER_MPI_NODE_BLOCK=$block -- \
            -np "$np" "$BIN/heap_holes"
        expect_heap_untouched "heap holes, interposed, np=$np block=$block" "$np" "$HEAP_HOLES_MOST"
    done
done

step "MPI's progress rule: a rank waiting in our barrier lets MPI progress"
# A 16 MiB rendezvous send to a rank that waits in MPI_Barrier, and passive-target one-sided reads
# of ranks that may be waiting in their next MPI_Barrier. Both hang if a waiter never calls MPI.
# (Open MPI's default one-sided component is shared memory and needs no target progress: its
# message-based one, osc/pt2pt, does, as MPICH's does.)
rma_variants=(default)
[ "$FLAVOR" = ompi ] && rma_variants+=(pt2pt)
for np in 2 3 4; do
    for block in 0 2; do
        [ "$block" -lt "$np" ] || continue
        env=(LD_PRELOAD="$PRELOAD" BARRIER_TIMEOUT=60s BARRIER_MPI_NODE_BLOCK=$block)
        run "large message across a barrier, np=$np block=$block" ok launch "${env[@]}" -- -np "$np" \
            "$BIN/progress_p2p" 3
        expect_text "progress p2p" "3 rounds of a 16 MiB message crossing a barrier"
        for osc in "${rma_variants[@]}"; do
            mca=()
            [ "$osc" = default ] || mca=(--mca osc "$osc")
            run "one-sided reads between barriers, np=$np block=$block osc=$osc" ok launch "${env[@]}" -- \
                "${mca[@]}" -np "$np" "$BIN/progress_rma" 200
            expect_text "progress rma" "200 barriers with one-sided reads between them passed"
        done
    done
done

# Negative controls: with the progress call turned off the same programs must hang (cut short by
# BARRIER_TIMEOUT, with the report naming the rank that never arrives), so the runs above pass
# because a waiting rank lets MPI progress and for no other reason.
run "large message, progress off" fail launch LD_PRELOAD="$PRELOAD" BARRIER_TIMEOUT=3s BARRIER_MPI_PROGRESS=0 -- \
    -np 2 "$BIN/progress_p2p" 1
expect_text "large message, progress off" "have not arrived: world ranks \[1\]"
no_progress_rma=()
[ "$FLAVOR" = ompi ] && no_progress_rma=(--mca osc pt2pt)
run "one-sided reads, progress off" fail launch LD_PRELOAD="$PRELOAD" BARRIER_TIMEOUT=3s BARRIER_MPI_PROGRESS=0 -- \
    "${no_progress_rma[@]}" -np 3 "$BIN/progress_rma" 200
expect_text "one-sided reads, progress off" "have not arrived"

step "MPI_THREAD_MULTIPLE: two threads of every rank in MPI_Barrier at once, each on its own communicator"
for np in 2 3; do
    run "two threads, np=$np" ok launch LD_PRELOAD="$PRELOAD" BARRIER_TIMEOUT=60s BARRIER_VERBOSE=1 -- -np "$np" \
        "$BIN/thread_multiple" 2000
    expect_text "thread multiple" "2000 checked barriers per thread passed"
    expect_text "thread multiple" "MPI_Barrier on a communicator of $np ranks: dissemination"
done

step "busy ranks: a pair times barriers while the job's 2 other ranks wait in MPI_Allreduce"
# The pair's wait policy follows the job's 4 processes on this machine's cores, not the pair's 2
# (a pair that spun here took 52 us a barrier against MPI's 1.5 us): checked from what rank 0
# says; the times are printed, not judged (performance is measured on purpose, see docs/mpi.md).
cores=$(nproc)
if [ "$cores" -ge 4 ]; then
    echo "skipped: busy ranks (4 ranks fit this machine's $cores cores: nobody shares a core)"
else
    # MPICH's own barrier spins without yielding: when the pair shares a CPU, each of its
    # barriers waits out a time slice (4 ms), so MPICH runs fewer.
    per_chunk=500
    [ "$FLAVOR" = mpich ] && per_chunk=20
    run "busy ranks" ok launch LD_PRELOAD="$PRELOAD" BARRIER_VERBOSE=1 -- -np 4 "$BIN/busy_ranks" "$per_chunk"
    expect_text "busy ranks" "communicator of 2 ranks: dissemination: .*waits park (4 ranks of the job on $cores cores here)"
    grep "busy_ranks:" "$out"
    # Intel MPI Benchmarks' layout: the idle ranks wait in the job's first MPI_Barrier on
    # MPI_COMM_WORLD (asleep in our set-up's rendezvous, issue 41 item 7).
    run "busy ranks, idle in MPI_Barrier" ok launch LD_PRELOAD="$PRELOAD" BARRIER_VERBOSE=1 -- -np 4 \
        "$BIN/busy_ranks" "$per_chunk" barrier
    expect_text "busy ranks, idle in MPI_Barrier" "2 waiting in MPI_Barrier"
    grep "busy_ranks:" "$out"
fi

step "one rank with a bad setting"
# Rank 1 alone gets BARRIER_TIMEOUT=bogus.
BAD='if [ "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" = 1 ]; then export BARRIER_TIMEOUT=bogus; fi; exec "$@"'
run "interposer falls back on every rank" ok launch LD_PRELOAD="$PRELOAD" -- -np 3 \
    sh -c "$BAD" sh "$BIN/barrier_check" 300
expect_text "bad setting, interposed" 'invalid value "bogus" for BARRIER_TIMEOUT'
expect_text "bad setting, interposed" "falls back to PMPI_Barrier on every rank"
expect_text "bad setting, interposed" "world rank 1 rejected its value of BARRIER_TIMEOUT"
run "rust example fails on every rank" fail launch -- -np 3 sh -c "$BAD" sh "$RUST_EXAMPLE" 300
expect_text "bad setting, rust" 'invalid value "bogus" for BARRIER_TIMEOUT'
expect_text "bad setting, rust" "world rank 1 rejected its value of BARRIER_TIMEOUT"
BAD_BLOCK='if [ "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" = 2 ]; then export BARRIER_MPI_NODE_BLOCK=two; fi; exec "$@"'
run "bad node block, interposed" ok launch LD_PRELOAD="$PRELOAD" BARRIER_MPI_NODE_BLOCK=2 -- -np 4 \
    sh -c "$BAD_BLOCK" sh "$BIN/barrier_check" 300
expect_text "bad node block" "world rank 2 rejected its value of BARRIER_MPI_NODE_BLOCK"
# A duration past a year (1e20 s overflowed into a panic, MPI_Abort under the interposer): the
# agreed refusal, every rank on PMPI_Barrier.
HUGE='if [ "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" = 1 ]; then export BARRIER_TIMEOUT=1e20; fi; exec "$@"'
run "huge timeout, interposed" ok launch LD_PRELOAD="$PRELOAD" -- -np 3 sh -c "$HUGE" sh "$BIN/barrier_check" 300
expect_text "huge timeout" "world rank 1 rejected its value of BARRIER_TIMEOUT"
expect_no_text "huge timeout" "panicked"

step "a program that calls barrier::init() under mpirun says what to use instead of running worlds of 1"
run "hello under mpirun" fail launch -- -np 2 target/release/examples/hello
expect_text "hello under mpirun" "barrier::init() joins only jobs that \`barrier run\` starts"
expect_text "hello under mpirun" "use barrier-mpi"
expect_no_text "hello under mpirun" "rank 0 of 1"

step "a set-up stage that fails on one rank: every rank falls back to PMPI_Barrier together"
for fault in open:1 join:2 internode:2; do
    run "fault $fault" ok launch LD_PRELOAD="$PRELOAD" BARRIER_MPI_NODE_BLOCK=2 BARRIER_VERBOSE=1 \
        BARRIER_MPI_FAULT="$fault" -- -np 4 "$BIN/barrier_check" 300
    expect_text "fault $fault" "fault injected by BARRIER_MPI_FAULT=$fault"
    expect_text "fault $fault" "MPI_Barrier on a communicator of 4 ranks: mpi: fell back to MPI_Barrier"
    # The others name the rank that failed (an internode failure named world rank 0, a healthy
    # root, until 2026-11-29: every root returned an error).
    expect_text "fault $fault" "world rank ${fault#*:} failed"
    if grep -q "communicator of 4 ranks: hierarchical" "$out"; then
        cat "$out"
        fail "fault $fault: a communicator was served although a rank failed its set-up"
    fi
done
# A fault for a rank the job does not have cannot fire: said once, and the job runs as usual.
run "fault out of range" ok launch BARRIER_MPI_NODE_BLOCK=1 BARRIER_MPI_FAULT=open:9 -- -np 3 "$RUST_EXAMPLE" 100
expect_text "fault out of range" "BARRIER_MPI_FAULT=open:9 will not fire: MPI_COMM_WORLD has 3 ranks"
expect_text "fault out of range" "checked barriers on hierarchical"
# With the backends named (and mpi not among them) the same failure is an error on every rank.
run "fault, forced backend" fail launch BARRIER_MPI_NODE_BLOCK=2 BARRIER_BACKEND=dissemination \
    BARRIER_MPI_FAULT=open:1 -- -np 4 "$RUST_EXAMPLE" 300
expect_text "fault, forced backend" "fault injected by BARRIER_MPI_FAULT=open:1"
expect_text "fault, forced backend" "world rank 1 could not map the node's shared segment"

# A backend named in BARRIER_BACKEND serves each node's part across nodes (issue 41 item 2: it
# was replaced by the gather/release halves without a word), checked barriers and the split phase.
for np in 4 5; do
    run "forced backend across nodes, np=$np" ok launch BARRIER_MPI_NODE_BLOCK=2 BARRIER_BACKEND=dissemination \
        BARRIER_TIMEOUT=120s -- -np "$np" "$RUST_EXAMPLE" 600
    expect_text "forced backend across nodes" "intranode dissemination (forced by BARRIER_BACKEND: two node barriers around the roots' phase"
    expect_text "forced backend across nodes" "checked barriers on hierarchical"
done

step "the node roots' phase on MPI's own barrier (BARRIER_MPI_INTERNODE=mpi), and auto timing both ways"
for np in 3 4 5; do
    for block in 1 2; do
        env=(BARRIER_MPI_NODE_BLOCK="$block" BARRIER_MPI_INTERNODE=mpi)
        backend=hierarchical
        run "roots on MPI_Barrier, np=$np block=$block" ok launch "${env[@]}" -- -np "$np" "$RUST_EXAMPLE" 600
        expect_text "roots on MPI_Barrier" "internode MPI's barrier among the node roots (BARRIER_MPI_INTERNODE=mpi)"
        expect_text "roots on MPI_Barrier" "checked barriers on $backend"
        run "roots on MPI_Barrier, outside program, np=$np block=$block" ok launch "${env[@]}" -- -np "$np" "$OUTSIDE"
        expect_text "roots on MPI_Barrier, outside" "$np ranks passed; $backend"
        run "roots on MPI_Barrier, interposed, np=$np block=$block" ok launch "${env[@]}" LD_PRELOAD="$PRELOAD" -- \
            -np "$np" "$BIN/barrier_check" 300
        expect_text "roots on MPI_Barrier, interposed" "rank $((np - 1)) of $np: .* checked barriers passed"
    done
done
# Unset, without a timeout or a stall report: the roots time both ways and keep the faster.
run "roots timed" ok launch BARRIER_MPI_NODE_BLOCK=2 -- -np 4 "$RUST_EXAMPLE" 600
expect_text "roots timed" "a barrier when timed, against"
expect_text "roots timed" "checked barriers on hierarchical"
# With a timeout: our rounds, untimed (their reports name the root waited for).
run "roots with a timeout" ok launch BARRIER_MPI_NODE_BLOCK=2 BARRIER_TIMEOUT=120s -- -np 4 "$RUST_EXAMPLE" 300
expect_text "roots with a timeout" "internode dissemination over mpi-p2p among the node roots"
expect_no_text "roots with a timeout" "when timed"

step "settings given in code are named as given in errors (FastBarrierSettings::backend, ::timeout)"
for block in 0 1; do
    # The job ends without MPI_Finalize after the expected timeout: the launcher says it failed.
    run "errors in the user's terms, block=$block" fail launch BARRIER_MPI_NODE_BLOCK=$block -- -np 3 \
        "$OUTSIDE" errors
    expect_text "errors in the user's terms" "outside errors: named as given: "
    expect_text "errors in the user's terms" "or raise FastBarrierSettings::timeout"
    expect_no_text "errors in the user's terms" "outside: FAILED"
done

step "a rank that never arrives: a timeout that names it, on one node and across nodes"
for block in 0 1; do
    start=$(date +%s)
    run "absent rank, block=$block" fail launch LD_PRELOAD="$PRELOAD" BARRIER_TIMEOUT=3s \
        BARRIER_MPI_NODE_BLOCK=$block BARRIER_CHECK_ABSENT_RANK=1 -- -np 3 "$BIN/barrier_check" 200
    expect_text "absent rank" "have not arrived: world ranks \[1\]"
    [ $(($(date +%s) - start)) -lt 50 ] || fail "absent rank: the others took $(($(date +%s) - start))s to give up"
done

# The roots on MPI's barrier (BARRIER_MPI_INTERNODE=mpi): its timeout can only say that a node
# root is missing, and says so, within the timeout.
start=$(date +%s)
run "absent rank, roots on MPI's barrier" fail launch LD_PRELOAD="$PRELOAD" BARRIER_TIMEOUT=3s \
    BARRIER_MPI_NODE_BLOCK=1 BARRIER_MPI_INTERNODE=mpi BARRIER_CHECK_ABSENT_RANK=1 -- -np 3 "$BIN/barrier_check" 200
expect_text "absent rank, roots on MPI" "(MPI_Ibarrier among the node roots) timed out after 3.0s: a node root has not arrived"
[ $(($(date +%s) - start)) -lt 50 ] || fail "absent rank, roots on MPI: the others took $(($(date +%s) - start))s"

step "a timeout and a retry never release a rank early (nodes of two; world rank 1 three seconds late)"
# World rank 0 alone has a short timeout; the others none. Before the fix, node 1's root timed
# out in the internode phase and its retry joined the failed barrier's release as a new gather,
# releasing world rank 3 before rank 1 arrived. Every call must fail, or pass after rank 1 came.
SHORT='if [ "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" = 0 ]; then export BARRIER_TIMEOUT=300ms; fi; exec "$@"'
for block in 2 1; do
    run "late rank and retries, block=$block" ok launch BARRIER_MPI_NODE_BLOCK=$block -- -np 4 \
        sh -c "$SHORT" sh "$RUST_EXAMPLE" late-retry
    expect_no_text "late rank and retries" "FAILED"
    expect_text "late rank and retries" "attempt 2 of barrier 1 failed: communicator is unusable after an earlier failure"
done

step "a barrier after MPI_Finalize: a clean error where it would call MPI (MPI would abort the job)"
for setting in BARRIER_MPI_NODE_BLOCK=1 BARRIER_BACKEND=mpi; do
    run "after finalize, $setting" ok launch "$setting" -- -np 2 "$RUST_EXAMPLE" after-finalize
    expect_text "after finalize" "a barrier after MPI_Finalize: invalid argument: MPI is finalized"
    expect_text "after finalize" "a split-phase barrier after MPI_Finalize: invalid argument: MPI is finalized"
done

step "stall reports name MPI ranks, within a node and across nodes"
# One rank per node: the roots' internode wait reports the root it waits for (world rank 1).
run "stall report across nodes" ok launch LD_PRELOAD="$PRELOAD" BARRIER_STALL_REPORT=1s BARRIER_MPI_NODE_BLOCK=1 \
    BARRIER_CHECK_LATE_RANK=1:4 -- -np 3 "$BIN/barrier_check" 100
# (The roots' report is the core composer's, worded as under OpenSHMEM: tests/shmem.)
expect_text "stall across nodes" "in barrier [0-9]*, in its internode phase (round [0-9]*): the node root at world rank 1 "
# Nodes of two, world rank 3 late: its node-mate (world rank 2) names world rank 3, not the
# node-local index; rank 1, waiting for its own root to come back from the internode phase,
# says so instead of blaming the root; root 0 names node root 2.
run "stall report within nodes" ok launch LD_PRELOAD="$PRELOAD" BARRIER_STALL_REPORT=1s BARRIER_MPI_NODE_BLOCK=2 \
    BARRIER_CHECK_LATE_RANK=3:4 -- -np 4 "$BIN/barrier_check" 100
expect_text "stall within nodes" "barrier: world rank 2 (rank 2 of a communicator of 4 ranks) has waited .*(gather phase); not arrived yet: world ranks \[3\] (communicator ranks \[3\])"
expect_text "stall within nodes" "barrier: world rank 1 .*(release phase); this node's root (world rank 0) has not released the node: it waits in the internode phase"
expect_text "stall within nodes" "barrier: world rank 0 .* in its internode phase (round [0-9]*): the node root at world rank 2 "
if grep -q "not arrived yet: world ranks \[[01]\]" "$out"; then
    cat "$out"
    fail "stall within nodes: a report blames a rank that has arrived"
fi

if [ "$FLAVOR" = ompi ]; then
    step "an interposer built without MPI says so instead of passing for the real one"
    run "no-MPI interposer" ok launch LD_PRELOAD="$PWD/$BIN/libbarrier_pmpi_without_mpi.so" -- -np 2 \
        "$BIN/barrier_check" 100
    expect_text "no-MPI interposer" "built without its \`mpi\` feature: it intercepts nothing"
    [ "$(grep -c 'intercepts nothing' "$out")" = 1 ] || { cat "$out"; fail "no-MPI interposer: said more than once"; }
fi

step "barrier bench --mpi (smoke)"
run "bench --mpi" ok env MPIRUN="${MPIRUN[0]}" MPICC="$MPICC" ./target/release/barrier bench --mpi -n 2 --iters 21000 \
    --mpi-preload "$PRELOAD"
expect_text "bench --mpi" "ratio MPI_Barrier / PMPI_Barrier"
expect_text "bench --mpi" "MPI library: $([ "$FLAVOR" = ompi ] && echo "Open MPI" || echo "MPICH")"
cat "$out"

left=$(ls /dev/shm | grep '^barrier-' || true)
[ -z "$left" ] || fail "left in /dev/shm: $left"
echo "mpi tests [$FLAVOR]: all passed"

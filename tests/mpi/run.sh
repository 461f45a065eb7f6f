#!/usr/bin/env bash
# The MPI tests: barrier-mpi's Rust example, the C and the Fortran check programs, with the
# MPI library's barrier and under the PMPI interposer, at 2, 3 and 4 ranks, on one node and on
# simulated nodes (BARRIER_MPI_NODE_BLOCK); a rank with a bad setting; a rank that never arrives.
# Needs Open MPI (mpicc, mpifort, mpirun), libclang and pkg-config: `.ci/run` installs them.
# Run from the repository root: `bash tests/mpi/run.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\n--> %s\n' "$*"; }
fail() {
    echo "MPI TEST FAILED: $*"
    exit 1
}

# As root, Open MPI's mpirun needs both; --oversubscribe lets 3 and 4 ranks share 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe)
# Every run is bounded: a hang fails the test instead of the CI job's clock.
LIMIT=240

step "build: barrier-mpi (example), the interposer, the C and Fortran programs"
cargo build --release -p barrier-mpi -p barrier-pmpi --features barrier-mpi/mpi,barrier-pmpi/mpi --lib --examples
cargo build --release -p barrier-cli
PRELOAD="$PWD/target/release/libbarrier_pmpi.so"
test -f "$PRELOAD" || fail "no $PRELOAD"
mkdir -p target/mpi
mpicc -O2 -Wall -Werror -o target/mpi/barrier_check examples/mpi/barrier_check.c
mpicc -O2 -Wall -Werror -o target/mpi/barrier_bench examples/mpi/barrier_bench.c
mpicc -O2 -Wall -Werror -o target/mpi/transport_bench examples/mpi/transport_bench.c
mpifort -O2 -o target/mpi/barrier_check_f examples/mpi/barrier_check.f90
RUST_EXAMPLE=target/release/examples/mpi_barrier

out=target/mpi/out.txt
# run NAME EXPECT COMMAND...: runs under the time limit, keeps the output, checks the exit code
# (EXPECT: ok or fail) and that it did not hit the limit.
run() {
    local name=$1 expect=$2
    shift 2
    local rc=0
    timeout "$LIMIT" "$@" >"$out" 2>&1 || rc=$?
    if [ "$rc" = 124 ]; then
        cat "$out"
        fail "$name: still running after ${LIMIT}s (a hang)"
    fi
    if [ "$expect" = ok ] && [ "$rc" != 0 ]; then
        cat "$out"
        fail "$name: exit status $rc"
    fi
    if [ "$expect" = fail ] && [ "$rc" = 0 ]; then
        cat "$out"
        fail "$name: succeeded, but it must fail"
    fi
    echo "ok: $name"
}
expect_text() {
    grep -q -- "$2" "$out" || {
        cat "$out"
        fail "$1: the output does not say: $2"
    }
}

for np in 2 3 4; do
    for block in 0 1 2; do
        case "$block" in
            0) want="dissemination" ;;                      # one node: the node's own backend
            *) want="hierarchical" ;;
        esac
        # One block of 2 covering both of 2 ranks is one node again.
        if [ "$block" -ge "$np" ]; then want="dissemination"; fi
        env=(-x BARRIER_MPI_NODE_BLOCK="$block" -x BARRIER_TIMEOUT=120s)
        step "$np ranks, BARRIER_MPI_NODE_BLOCK=$block (expect $want)"
        run "rust example, np=$np block=$block" ok "${MPIRUN[@]}" -np "$np" "${env[@]}" "$RUST_EXAMPLE" 2000
        expect_text "rust example" "checked barriers on $want"
        run "C, MPI's barrier, np=$np" ok "${MPIRUN[@]}" -np "$np" "${env[@]}" target/mpi/barrier_check 1000
        expect_text "C plain" "checked barriers passed"
        run "C, interposed, np=$np block=$block" ok "${MPIRUN[@]}" -np "$np" "${env[@]}" -x LD_PRELOAD="$PRELOAD" \
            -x BARRIER_VERBOSE=1 target/mpi/barrier_check 1000
        expect_text "C interposed" "MPI_Barrier on a communicator of $np ranks: $want"
        run "Fortran, MPI's barrier, np=$np" ok "${MPIRUN[@]}" -np "$np" "${env[@]}" target/mpi/barrier_check_f 1000
        run "Fortran, interposed, np=$np block=$block" ok "${MPIRUN[@]}" -np "$np" "${env[@]}" \
            -x LD_PRELOAD="$PRELOAD" -x BARRIER_VERBOSE=1 target/mpi/barrier_check_f 1000
        expect_text "Fortran interposed" "MPI_Barrier on a communicator of $np ranks: $want"
    done
done

step "one rank with a bad setting"
# Rank 1 alone gets BARRIER_TIMEOUT=bogus.
BAD='if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export BARRIER_TIMEOUT=bogus; fi; exec "$@"'
run "interposer falls back on every rank" ok "${MPIRUN[@]}" -np 3 -x LD_PRELOAD="$PRELOAD" \
    sh -c "$BAD" sh target/mpi/barrier_check 300
expect_text "bad setting, interposed" 'invalid value "bogus" for BARRIER_TIMEOUT'
expect_text "bad setting, interposed" "falls back to PMPI_Barrier on every rank"
expect_text "bad setting, interposed" "world rank 1 rejected its value of BARRIER_TIMEOUT"
run "rust example fails on every rank" fail "${MPIRUN[@]}" -np 3 sh -c "$BAD" sh "$RUST_EXAMPLE" 300
expect_text "bad setting, rust" 'invalid value "bogus" for BARRIER_TIMEOUT'
expect_text "bad setting, rust" "world rank 1 rejected its value of BARRIER_TIMEOUT"
BAD_BLOCK='if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then export BARRIER_MPI_NODE_BLOCK=two; fi; exec "$@"'
run "bad node block, interposed" ok "${MPIRUN[@]}" -np 4 -x LD_PRELOAD="$PRELOAD" -x BARRIER_MPI_NODE_BLOCK=2 \
    sh -c "$BAD_BLOCK" sh target/mpi/barrier_check 300
expect_text "bad node block" "world rank 2 rejected its value of BARRIER_MPI_NODE_BLOCK"

step "a set-up stage that fails on one rank: every rank falls back to PMPI_Barrier together"
for fault in open:1 join:2 internode:2; do
    run "fault $fault" ok "${MPIRUN[@]}" -np 4 -x LD_PRELOAD="$PRELOAD" -x BARRIER_MPI_NODE_BLOCK=2 \
        -x BARRIER_VERBOSE=1 -x BARRIER_MPI_FAULT="$fault" target/mpi/barrier_check 300
    expect_text "fault $fault" "fault injected by BARRIER_MPI_FAULT=$fault"
    expect_text "fault $fault" "MPI_Barrier on a communicator of 4 ranks: mpi: fell back to MPI_Barrier"
    if grep -q "communicator of 4 ranks: hierarchical" "$out"; then
        cat "$out"
        fail "fault $fault: a communicator was served although a rank failed its set-up"
    fi
done
# A fault for a rank the job does not have cannot fire: said once, and the job runs as usual.
run "fault out of range" ok "${MPIRUN[@]}" -np 3 -x BARRIER_MPI_NODE_BLOCK=1 -x BARRIER_MPI_FAULT=open:9 \
    "$RUST_EXAMPLE" 100
expect_text "fault out of range" "BARRIER_MPI_FAULT=open:9 will not fire: MPI_COMM_WORLD has 3 ranks"
expect_text "fault out of range" "checked barriers on hierarchical"
# With the backends named (and mpi not among them) the same failure is an error on every rank.
run "fault, forced backend" fail "${MPIRUN[@]}" -np 4 -x BARRIER_MPI_NODE_BLOCK=2 -x BARRIER_BACKEND=dissemination \
    -x BARRIER_MPI_FAULT=open:1 "$RUST_EXAMPLE" 300
expect_text "fault, forced backend" "fault injected by BARRIER_MPI_FAULT=open:1"
expect_text "fault, forced backend" "world rank 1 could not map the node's shared segment"

step "a rank that never arrives: a timeout that names it, on one node and across nodes"
for block in 0 1; do
    start=$(date +%s)
    run "absent rank, block=$block" fail "${MPIRUN[@]}" -np 3 -x LD_PRELOAD="$PRELOAD" -x BARRIER_TIMEOUT=3s \
        -x BARRIER_MPI_NODE_BLOCK=$block -x BARRIER_CHECK_ABSENT_RANK=1 target/mpi/barrier_check 200
    expect_text "absent rank" "have not arrived: world ranks \[1\]"
    [ $(($(date +%s) - start)) -lt 50 ] || fail "absent rank: the others took $(($(date +%s) - start))s to give up"
done

step "barrier bench --mpi (smoke)"
run "bench --mpi" ok ./target/release/barrier bench --mpi -n 2 --iters 21000
expect_text "bench --mpi" "ratio MPI_Barrier / PMPI_Barrier"
cat "$out"

left=$(ls /dev/shm | grep '^barrier-' || true)
[ -z "$left" ] || fail "left in /dev/shm: $left"
echo "mpi tests: all passed"

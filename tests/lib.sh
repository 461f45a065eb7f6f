# Shell helpers shared by tests/mpi/run.sh and tests/shmem/run.sh (sourced, not run). The caller
# sets FAIL_PREFIX (what a failure line starts with), LIMIT (seconds a run may take) and `out`
# (the file a run's output goes to), and may define launch_command (see `run`).

fail() {
    echo "$FAIL_PREFIX: $*"
    exit 1
}

# run NAME EXPECT COMMAND... (or `launch ...`, which the caller's launch_command turns into CMD):
# runs under the time limit, keeps the output, checks the exit code (EXPECT: ok or fail) and that
# it did not hit the limit.
run() {
    local name=$1 expect=$2
    shift 2
    if [ "$1" = launch ]; then
        shift
        launch_command "$@"
        set -- "${CMD[@]}"
    fi
    local rc=0 began=$SECONDS
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
    echo "ok: $name ($((SECONDS - began)) s)"
}

expect_text() {
    grep -q -- "$2" "$out" || {
        cat "$out"
        fail "$1: the output does not say: $2"
    }
}

expect_no_text() {
    ! grep -q -- "$2" "$out" || {
        cat "$out"
        fail "$1: the output says what it must not: $2"
    }
}

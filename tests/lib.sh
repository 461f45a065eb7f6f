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

# expect_heap_untouched NAME RANKS MOST: every one of RANKS lines of examples/mpi/heap_holes.c in
# the output says that our library freed nothing in the program's heap during its set-up, and that
# the first barrier left at most MOST holes there (what remains is MPI's own: the temporaries of
# the collectives and of making communicators, which MPI frees itself).
expect_heap_untouched() {
    local name=$1 ranks=$2 most=$3
    awk -v ranks="$ranks" -v most="$most" '
        /^heap_holes: rank [0-9]+: / {
            seen++
            holes = $4; ours = $10
            if (ours != 0) { print "rank " $3 " our library freed " ours " blocks of the program'"'"'s heap"; bad = 1 }
            if (holes > most) { print "rank " $3 " left " holes " holes (at most " most ")"; bad = 1 }
        }
        END { if (seen != ranks) { print seen " of " ranks " ranks reported"; bad = 1 } exit bad }
    ' "$out" || {
        cat "$out"
        fail "$name: the first barrier changed the program's heap more than MPI's own"
    }
}

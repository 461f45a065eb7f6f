//! The `barrier` command's settings as users give them: a bad value refused with status 2 and
//! the setting named, one warning for a misspelt name.

use std::process::Command;

fn barrier() -> Command {
    Command::new(env!("CARGO_BIN_EXE_barrier"))
}

#[test]
fn a_bad_setting_is_refused_with_status_2_by_every_command() {
    for args in [&["info"][..], &["bench", "-n", "2", "--iters", "10"], &["run", "-n", "1", "--", "true"]] {
        let out = barrier().args(args).env("BARRIER_TIMEOUT", "abc").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("invalid value \"abc\" for BARRIER_TIMEOUT"), "{args:?}: {err}");
    }
}

#[test]
fn huge_durations_are_refused_with_status_2_naming_the_setting() {
    // Past a year a duration is a mistake, and near 2^64 s it overflowed (a panic, exit 101).
    for (name, value) in
        [("BARRIER_TIMEOUT", "1e20"), ("BARRIER_NET_PUT_LATENCY", "1.8e19"), ("BARRIER_STALL_REPORT", "400d")]
    {
        for args in [&["info"][..], &["run", "-n", "1", "--", "true"]] {
            let out = barrier().args(args).env(name, value).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name}={value} {args:?}: {err}");
            assert!(err.contains(name) && err.contains("at most a year"), "{name}={value} {args:?}: {err}");
        }
    }
    let out = barrier().args(["run", "-n", "1", "--timeout", "1e20", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid value \"1e20\" for --timeout") && err.contains("at most a year"), "{err}");
    // In a rank alone (the launcher's environment is fine): every rank refuses, no panic.
    let script = "[ \"$BARRIER_RANK\" = 1 ] && export BARRIER_TIMEOUT=1e20; exec \"$@\"";
    let out = barrier()
        .args([
            "run",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            script,
            "sh",
            env!("CARGO_BIN_EXE_barrier"),
            "bench-rank",
            "--iters",
            "10",
            "--batch",
            "5",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("BARRIER_TIMEOUT") && !err.contains("panicked"), "{err}");
}

#[test]
fn a_misspelt_setting_gets_one_warning_with_the_nearest_name() {
    let out = barrier().args(["run", "-n", "2", "--", "true"]).env("BARRIER_TIMOUT", "1s").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("BARRIER_TIMOUT is not a setting").count(), 1, "{err}");
    assert!(err.contains("did you mean BARRIER_TIMEOUT?"), "{err}");
    // Known names, and what the launcher passes to ranks, say nothing.
    let out = barrier()
        .args(["run", "-n", "1", "--", "true"])
        .env("BARRIER_TIMEOUT", "1s")
        .env("BARRIER_REBALANCE", "0")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not a setting"), "{out:?}");
}

#[test]
fn zero_counts_and_options_that_would_do_nothing_are_refused_with_their_name() {
    for (args, needle) in [
        (&["run", "-n", "0", "--", "true"][..], "-n 0: a job needs at least 1 rank"),
        (&["info", "-n", "0"][..], "-n 0: a job needs at least 1"),
        (&["info", "--nodes", "0"][..], "--nodes 0: a job needs at least 1"),
        (&["bench", "--iters", "0"][..], "--iters 0: --iters must be at least 1"),
        (&["bench", "-n", "2,0"][..], "-n 0: -n must be at least 1"),
        (&["run", "-n", "1", "--counters", "--", "true"][..], "--counters prints an emulated device's counters"),
    ] {
        let out = barrier().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one message, not two: {err}");
    }
}

//! The correctness suite as real processes under the launcher.

mod common;

use common::{run_example, shm_segments};
use std::time::Duration;

const SIZES: [usize; 6] = [1, 2, 3, 5, 8, 13];

fn assert_passed(report: &barrier_launch::JobReport, what: &str) {
    assert!(
        report.success(),
        "{what}: {}\nstdout: {:?}\nstderr: {:?}",
        report.describe(report.stdout.len()).unwrap_or_default(),
        report.stdout,
        report.stderr
    );
}

#[test]
fn every_algorithm_is_correct_at_odd_sizes_as_processes() {
    for algo in ["auto", "central", "dissemination", "tournament", "tree"] {
        for n in SIZES {
            let report =
                run_example(n, "correctness", &["1500", "--seed", &n.to_string()], &[("BARRIER_SW_ALGORITHM", algo)]);
            assert_passed(&report, &format!("{algo} at {n} ranks"));
            assert!(report.stdout[0].contains(&format!("{n} ranks passed")), "{:?}", report.stdout);
        }
    }
}

#[test]
fn both_wait_policies_are_correct() {
    for (policy, sizes) in [("spin", &[2, 3][..]), ("park", &[2, 3, 5][..])] {
        for &n in sizes {
            let report = run_example(n, "correctness", &["1000"], &[("BARRIER_WAIT_POLICY", policy)]);
            assert_passed(&report, &format!("policy {policy} at {n} ranks"));
        }
    }
}

#[test]
fn the_central_tail_spin_keeps_barriers_correct_whatever_its_bound() {
    // More ranks than cores: central, ranks park, and a rank whose CPU holds no missing rank
    // spins (its hints are never what a barrier completes on). 0 turns the spin off; 1ms is
    // the longest; a delay now and then makes ranks spin past their bound.
    let mask = || {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap().to_string()
    };
    let before = mask();
    for spin in ["0", "50us", "1ms"] {
        for n in [3, 5, 8] {
            let env =
                [("BARRIER_SW_ALGORITHM", "central"), ("BARRIER_WAIT_POLICY", "park"), ("BARRIER_SW_TAIL_SPIN", spin)];
            let report = run_example(n, "correctness", &["1500", "--seed", &n.to_string()], &env);
            assert_passed(&report, &format!("tail spin {spin} at {n} ranks"));
            let on = spin != "0" && n > barrier::sys::available_cores();
            let says = report.stdout[0].contains("central + tail spin");
            assert_eq!(says, on, "tail spin {spin} at {n} ranks: {:?}", report.stdout[0]);
            // The launcher moved this thread from core to core to start the ranks spread.
            assert_eq!(mask(), before, "the launcher did not give its thread its CPUs back");
        }
    }
}

#[test]
fn split_communicators_barrier_independently_and_concurrently() {
    for n in [5, 8, 13] {
        let report = run_example(n, "correctness", &["800", "--split"], &[]);
        assert_passed(&report, &format!("split at {n} ranks"));
    }
}

#[test]
fn hello_and_bsp_examples_check_themselves() {
    for n in [1, 3, 5] {
        assert_passed(&run_example(n, "hello", &[], &[]), &format!("hello at {n}"));
        let bsp = run_example(n, "bsp", &["200", "100"], &[]);
        assert_passed(&bsp, &format!("bsp at {n}"));
        assert!(bsp.stdout[0].contains("identical to the serial result"), "{:?}", bsp.stdout);
    }
}

#[test]
fn the_examples_print_errors_as_sentences_not_debug_dumps() {
    let report =
        run_example(1, "hello", &[], &[("BARRIER_BACKEND", "gba"), ("BARRIER_GBA_DEVICE_PATH", "/nonexistent/gba")]);
    assert!(report.failure.is_some(), "no gba device: the job must fail");
    for err in &report.stderr {
        assert!(err.contains("Error: no backend of \"gba\" (given in BARRIER_BACKEND) can run"), "{err}");
        assert!(!err.contains("ForcedBackendUnavailable {") && !err.contains(" { "), "a debug dump: {err}");
    }
    let report = run_example(1, "hybrid", &["two"], &[]);
    assert!(report.stderr[0].starts_with("hybrid: invalid digit"), "{:?}", report.stderr);
}

#[test]
fn a_killed_rank_ends_the_job_quickly_and_leaves_no_segment() {
    let before = shm_segments();
    let report = run_example(5, "correctness", &["100000000", "--die", "2:500"], &[]);
    let failure = report.failure.as_ref().expect("the job must fail");
    assert_eq!(failure.rank, 2);
    assert_eq!(failure.end, barrier_launch::RankEnd::Signaled(libc::SIGKILL));
    let teardown = report.elapsed.saturating_sub(failure.after);
    assert!(teardown < Duration::from_secs(5), "the job took {teardown:?} to end after rank 2 died");
    let msg = report.describe(5).unwrap();
    assert!(msg.contains("rank 2") && msg.contains("SIGKILL"), "{msg}");
    let leftover: Vec<_> = shm_segments().into_iter().filter(|s| !before.contains(s)).collect();
    assert!(leftover.is_empty(), "left in /dev/shm: {leftover:?}");
}

#[test]
fn a_missing_rank_is_named_when_the_barrier_times_out() {
    let report = run_example(3, "correctness", &["--skip", "2"], &[("BARRIER_TIMEOUT", "400ms")]);
    // The first rank to time out exits; the launcher may stop the other before its own timeout.
    let failure = report.failure.as_ref().expect("the job must fail");
    assert!(failure.rank < 2, "rank 2 skipped the barrier; rank {} failed", failure.rank);
    let err = &report.stderr[failure.rank];
    assert!(err.contains("have not arrived: world ranks [2]"), "rank {} stderr: {err}", failure.rank);
}

//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

use barrier_launch::{launch, JobReport, JobSpec};

/// The path of an example binary built by `cargo test` next to this test binary.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile_dir.join("examples").join(name);
    assert!(path.exists(), "example {name} not built at {} (cargo test builds examples)", path.display());
    path
}

/// Jobs in one test binary run one at a time: each assumes it has the machine's cores (a job
/// forcing the spin policy next to another job would measure the scheduler, not the barrier).
static ONE_JOB_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the machine for one launched job.
pub fn one_job_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `example` with `args` on `n` ranks, capturing output, with a timeout for every barrier.
pub fn run_example(n: usize, name: &str, args: &[&str], env: &[(&str, &str)]) -> JobReport {
    let _machine = one_job_at_a_time();
    let mut spec = JobSpec::new(n, example(name));
    spec.args = args.iter().map(|a| a.into()).collect();
    spec.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    if !env.iter().any(|(k, _)| *k == "BARRIER_TIMEOUT") {
        spec.env.push(("BARRIER_TIMEOUT".into(), "60s".into()));
    }
    spec.capture_stdout = true;
    spec.capture_stderr = true;
    launch(&spec).expect("launching the job")
}

/// Names of barrier segments currently in /dev/shm.
pub fn shm_segments() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("barrier-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Launches the `faults` example (`examples/faults.rs`) with `args` on `n` ranks, through
/// `sh -c SCRIPT sh FAULTS ARGS` when `wrapper` is given, with `env`, capturing output; no
/// BARRIER_TIMEOUT unless `env` sets one.
pub fn faults(n: usize, wrapper: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> JobReport {
    let _machine = one_job_at_a_time();
    let exe = example("faults");
    let mut spec = match wrapper {
        Some(script) => {
            let mut s = JobSpec::new(n, "sh");
            s.args = vec!["-c".into(), script.into(), "sh".into(), exe.into()];
            s.args.extend(args.iter().map(|a| a.into()));
            s
        }
        None => {
            let mut s = JobSpec::new(n, exe);
            s.args = args.iter().map(|a| a.into()).collect();
            s
        }
    };
    spec.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    spec.capture_stdout = true;
    spec.capture_stderr = true;
    launch(&spec).expect("launching the job")
}

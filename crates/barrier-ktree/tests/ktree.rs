//! The ktree backend, written outside the core crate, through the same correctness suite as the
//! built-in ones: threads at odd sizes, simulated nodes, both wait policies, and processes under
//! the launcher at 1, 2, 3, 5 and 8 ranks; and the selector treating it like a built-in backend
//! (priority, forcing, agreement by name when a rank did not register it, parameters).

use std::path::PathBuf;
use std::sync::Once;

use barrier::threads::Job;
use barrier::Params;
use barrier_launch::{launch, JobReport, JobSpec};
use barrier_suite::{stress, StressOptions};

fn registered() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| barrier::register_backend(barrier_ktree::KTree).expect("registering ktree"));
}

fn forced() -> Params {
    Params::defaults_only().set("BARRIER_BACKEND", "ktree").set("BARRIER_TIMEOUT", "60s")
}

#[test]
fn ktree_is_correct_at_odd_sizes_as_threads() {
    registered();
    for n in [1, 2, 3, 5, 8, 13] {
        for arity in ["2", "4"] {
            let opts = StressOptions { iterations: 1500, seed: n as u64, ..StressOptions::default() };
            let params = forced().set(barrier_ktree::ARITY, arity);
            let passed = Job::new(n)
                .params(params)
                .run(|world| {
                    assert_eq!(world.backend(), "ktree");
                    stress(&world, &opts).map_err(|e| e.to_string())
                })
                .unwrap();
            for (rank, p) in passed.into_iter().enumerate() {
                p.unwrap_or_else(|e| panic!("{n} ranks, arity {arity}, rank {rank}: {e}"));
            }
        }
    }
}

#[test]
fn ktree_is_correct_across_simulated_nodes_and_when_parking() {
    registered();
    let opts = StressOptions { iterations: 1000, ..StressOptions::default() };
    // Across nodes every signal to another node is a counted put on the simulated network.
    let puts = Job::new(6)
        .nodes(3)
        .params(forced())
        .run(|world| {
            stress(&world, &opts).unwrap();
            (world.network_ops(), world.backend())
        })
        .unwrap();
    // Forced, it serves across nodes itself (issue 41 item 2: never silently replaced).
    assert!(puts.iter().all(|(_, b)| *b == "ktree"), "{puts:?}");
    assert!(puts.iter().map(|p| p.0).sum::<u64>() > 0, "no put crossed the simulated network: {puts:?}");
    // Asynchronous puts land only while their sender calls in: the module must keep helping.
    Job::new(6)
        .nodes(3)
        .params(forced().set("BARRIER_NET_ASYNC", "1").set("BARRIER_NET_PUT_LATENCY", "20us"))
        .run(|world| stress(&world, &opts).unwrap())
        .unwrap();
    // More ranks than cores: waiters park on the mailbox flags and signals wake them.
    Job::new(7)
        .params(forced().set("BARRIER_WAIT_POLICY", "park"))
        .run(|world| stress(&world, &opts).unwrap())
        .unwrap();
}

#[test]
fn the_selector_treats_ktree_like_a_built_in_backend() {
    registered();
    // Listed with its parameters, and checked like every other parameter.
    assert!(barrier::backends().iter().any(|b| b.name() == "ktree"));
    assert!(barrier::registry::all_params().iter().any(|p| p.name == barrier_ktree::ARITY));
    let bad = Job::new(2).params(forced().set(barrier_ktree::ARITY, "1")).run(|_| ()).unwrap_err().to_string();
    assert!(bad.contains(barrier_ktree::ARITY), "{bad}");
    // By priority: below dissemination by default, above it when raised.
    let chosen = |params: Params| Job::new(3).params(params).run(|w| w.backend().to_string()).unwrap();
    assert_eq!(chosen(Params::defaults_only())[0], "dissemination");
    assert_eq!(chosen(Params::defaults_only().set("BARRIER_KTREE_PRIORITY", "1000"))[0], "ktree");
    // Disabled, it says so; forced and disabled, creating the communicator fails with the reason.
    let report = Job::new(2)
        .params(Params::defaults_only().set("BARRIER_KTREE_DISABLE", "1"))
        .run(|w| w.selection().to_string())
        .unwrap();
    assert!(report[0].contains("ktree") && report[0].contains("disabled"), "{}", report[0]);
    let err = Job::new(2).params(forced().set("BARRIER_KTREE_DISABLE", "1")).run(|_| ()).unwrap_err().to_string();
    assert!(err.contains("ktree") && err.contains("disabled"), "{err}");
}

/// The example program, built beside this test.
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile.join("examples").join("ktree");
    assert!(path.exists(), "the ktree example is not built at {} (cargo test builds it)", path.display());
    path
}

fn run(n: usize, args: &[&str], env: &[(&str, &str)]) -> JobReport {
    let mut spec = JobSpec::new(n, example());
    spec.args = args.iter().map(|a| a.into()).collect();
    spec.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    spec.env.push(("BARRIER_TIMEOUT".into(), "60s".into()));
    spec.capture_stdout = true;
    spec.capture_stderr = true;
    launch(&spec).expect("launching the job")
}

#[test]
fn a_program_that_registers_ktree_passes_the_correctness_suite_under_the_launcher() {
    for n in [1, 2, 3, 5, 8] {
        let report = run(n, &["1500", "--split", "--seed", &n.to_string()], &[("BARRIER_BACKEND", "ktree")]);
        assert!(report.success(), "{n} ranks: {:?}\n{}", report.failure, report.stderr.join("\n"));
        assert!(report.stdout.iter().any(|l| l.contains("(ktree, ")), "{n} ranks: {:?}", report.stdout);
    }
}

#[test]
fn a_rank_with_another_arity_follows_rank_0s_tree() {
    // Rank 1 alone sets another arity: a tree of its own would lay its mailboxes out elsewhere
    // and signal the wrong slots; the tree is rank 0's on every rank.
    for n in [4, 5] {
        let mut spec = JobSpec::new(n, "sh");
        let script = format!("[ \"$BARRIER_RANK\" = 1 ] && export {}=2; exec \"$@\"", barrier_ktree::ARITY);
        spec.args =
            ["-c", &script, "sh", example().to_str().unwrap(), "1500", "--split"].iter().map(|a| a.into()).collect();
        spec.env = vec![("BARRIER_BACKEND".into(), "ktree".into()), ("BARRIER_TIMEOUT".into(), "60s".into())];
        spec.capture_stdout = true;
        spec.capture_stderr = true;
        let report = launch(&spec).expect("launching the job");
        assert!(report.success(), "{n} ranks: {:?}\n{}", report.failure, report.stderr.join("\n"));
        assert!(report.stdout.iter().any(|l| l.contains("(ktree, ")), "{:?}", report.stdout);
    }
}

#[test]
fn a_rank_that_did_not_register_ktree_makes_every_rank_decline_it() {
    for lacking in ["0", "2"] {
        // Forced: every rank fails, and says which rank lacks it.
        let report = run(3, &["200"], &[("BARRIER_BACKEND", "ktree"), ("KTREE_UNREGISTERED_ON", lacking)]);
        assert!(!report.success());
        let err = report.stderr.join("\n");
        assert!(err.contains(&format!("not registered on rank(s) [{lacking}]")) || err.contains("rank 0"), "{err}");
        // Chosen by priority: every rank falls back together.
        let report = run(3, &["200"], &[("BARRIER_KTREE_PRIORITY", "1000"), ("KTREE_UNREGISTERED_ON", lacking)]);
        assert!(report.success(), "{:?}\n{}", report.failure, report.stderr.join("\n"));
        assert!(report.stdout.iter().any(|l| l.contains("(dissemination, ")), "{:?}", report.stdout);
    }
}

#[test]
fn barrier_info_in_the_program_lists_ktree_and_its_parameters() {
    let out = std::process::Command::new(example()).args(["--info", "-n", "3"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["ktree", "BARRIER_KTREE_ARITY", "BARRIER_KTREE_PRIORITY", "registered by the program"] {
        assert!(text.contains(needle), "no {needle} in:\n{text}");
    }
}

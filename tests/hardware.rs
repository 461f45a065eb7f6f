//! The correctness suite on the hardware backends (`switch`, `gba`), driven against emulated
//! devices: as threads and as processes, with split communicators in separate groups, injected
//! faults, group exhaustion, sequence wrap-around and dead owners.

mod common;

use std::time::Duration;

use barrier::{threads::Job, Params};
use barrier_emu::{Config, Emulator, Faults};
use barrier_hw::DeviceMap;
use barrier_suite::{stress, StressOptions};
use proptest::prelude::*;

const DEVICES: [(&str, &DeviceMap); 2] = [("switch", &barrier_hw::SWITCH), ("gba", &barrier_hw::GBA)];

fn path_param(kind: &str) -> String {
    format!("BARRIER_{}_DEVICE_PATH", kind.to_ascii_uppercase())
}

fn params(kind: &str, emu: &Emulator) -> Params {
    Params::defaults_only()
        .set("BARRIER_BACKEND", kind)
        .set(path_param(kind), emu.path().display().to_string())
        .set("BARRIER_TIMEOUT", "60s")
        .set(format!("BARRIER_{}_WATCHDOG", kind.to_ascii_uppercase()), "20ms")
}

fn job(n: usize) -> Job {
    Job::new(n).busy_threads(1)
}

/// Runs the stress check on `n` threads; each rank's algorithm afterwards and its result.
fn stress_all(n: usize, p: Params, opts: StressOptions) -> Vec<(String, Result<u64, String>)> {
    job(n)
        .params(p)
        .run(|w| {
            let result = stress(&w, &opts).map_err(|e| e.to_string());
            (w.algorithm(), result)
        })
        .unwrap()
}

#[test]
fn hardware_backends_are_correct_as_threads() {
    for (kind, map) in DEVICES {
        let emu = Emulator::start(Config::new(map)).unwrap();
        for n in [2, 3, 8, 13] {
            let opts = StressOptions { iterations: 400, seed: n as u64, ..Default::default() };
            let out = job(n)
                .params(params(kind, &emu))
                .run(|w| {
                    let result = stress(&w, &opts).map_err(|e| e.to_string());
                    (w.backend().to_string(), w.algorithm(), result)
                })
                .unwrap();
            for (backend, algorithm, result) in out {
                assert_eq!(backend, kind);
                assert!(algorithm.starts_with("offload"), "{kind} at {n}: fell back: {algorithm}");
                assert_eq!(result, Ok(400), "{kind} at {n}");
            }
        }
        emu.quiesce(Duration::from_secs(2));
        let c = emu.counters();
        assert_eq!((c.errors, c.groups_in_use), (0, 0), "{kind}: {c:?}");
        assert!(c.barriers >= 4 * 400, "{kind}: {c:?}");
    }
}

#[test]
fn split_communicators_use_separate_groups_concurrently() {
    for (kind, map) in DEVICES {
        let emu = Emulator::start(Config::new(map)).unwrap();
        let out = job(8)
            .params(params(kind, &emu))
            .run(|w| {
                let sub = w.split(w.rank() % 3, 0).unwrap().unwrap();
                let opts = StressOptions { iterations: 300, ..Default::default() };
                stress(&sub, &opts).unwrap();
                stress(&w, &StressOptions { iterations: 100, ..opts }).unwrap();
                (w.rank() % 3, sub.backend().to_string(), sub.algorithm(), w.algorithm())
            })
            .unwrap();
        let mut groups: Vec<(usize, String)> = out.iter().map(|(c, _, a, _)| (*c, a.clone())).collect();
        groups.sort();
        groups.dedup();
        assert_eq!(groups.len(), 3, "{kind}: one group per color: {groups:?}");
        let mut names: Vec<&String> = groups.iter().map(|(_, a)| a).collect();
        names.push(&out[0].3);
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 4, "{kind}: colors and world use four different groups: {out:?}");
        assert!(out.iter().all(|(_, b, _, _)| b == kind));
    }
}

#[test]
fn hardware_backends_are_correct_as_processes_under_the_launcher() {
    for (kind, map) in DEVICES {
        for (n, args) in [(2, &["800"][..]), (3, &["800"][..]), (8, &["400"][..]), (13, &["300", "--split"][..])] {
            let _machine = common::one_job_at_a_time();
            let mut spec = barrier_launch::JobSpec::new(n, common::example("correctness"));
            spec.args = args.iter().map(|a| a.into()).collect();
            spec.env = vec![("BARRIER_BACKEND".into(), kind.into()), ("BARRIER_TIMEOUT".into(), "60s".into())];
            spec.emulate = vec![Config::new(map)];
            spec.capture_stdout = true;
            spec.capture_stderr = true;
            let report = barrier_launch::launch(&spec).unwrap();
            assert!(report.success(), "{kind} at {n}: {:?} {:?}", report.describe(n), report.stderr);
            assert!(report.stdout[0].contains(&format!("({kind}, offload")), "{:?}", report.stdout);
            let (_, c) = report.devices[0];
            assert_eq!((c.errors, c.groups_in_use), (0, 0), "{kind}: {c:?}");
        }
    }
}

#[test]
fn group_exhaustion_declines_and_falls_back() {
    for (kind, map) in DEVICES {
        let emu = Emulator::start(Config::new(map)).unwrap();
        let limit = map.max_groups;
        let p = params(kind, &emu).set("BARRIER_BACKEND", format!("{kind},dissemination"));
        let out = job(2)
            .params(p)
            .run(|w| {
                // `w` holds one group: limit - 1 duplicates fill the device, the last must fall back.
                let comms: Vec<_> = (0..limit).map(|_| w.dup().unwrap()).collect();
                for c in &comms {
                    c.barrier().unwrap();
                }
                let last = comms.last().unwrap();
                let why =
                    last.selection().candidates.iter().find(|c| c.name == kind).map(|c| c.outcome.to_string()).unwrap();
                (comms.iter().filter(|c| c.backend() == kind).count(), last.backend().to_string(), why)
            })
            .unwrap();
        let (on_hw, last, why) = &out[0];
        assert_eq!(*on_hw, limit - 1, "{kind}");
        assert_eq!(last, "dissemination");
        assert!(why.contains(&format!("all {limit} {kind} groups")) && why.contains("in use"), "{why}");
        emu.quiesce(Duration::from_secs(2));
        assert_eq!(emu.counters().groups_in_use, 0, "every group is freed when the communicators are dropped");
    }
}

#[test]
fn a_forced_backend_without_a_device_fails_loudly_and_auto_falls_back() {
    let p = Params::defaults_only()
        .set("BARRIER_BACKEND", "switch")
        .set("BARRIER_SWITCH_DEVICE_PATH", "/nonexistent/switch0");
    let err = Job::new(2).params(p).run(|_| ()).unwrap_err().to_string();
    assert!(err.contains("no device at /nonexistent/switch0") && err.contains("BARRIER_SWITCH_DEVICE_PATH"), "{err}");
    let p = Params::defaults_only()
        .set("BARRIER_SWITCH_DEVICE_PATH", "/nonexistent/switch0")
        .set("BARRIER_GBA_DEVICE_PATH", "/nonexistent/gba0");
    let out = Job::new(2).params(p).run(|w| (w.backend().to_string(), w.selection().to_string())).unwrap();
    assert_eq!(out[0].0, "dissemination");
    assert!(out[0].1.contains("gba") && out[0].1.contains("no device at /nonexistent/gba0"), "{}", out[0].1);
}

#[test]
fn sequences_wrap_past_32_bits() {
    // Every release flag already holds an epoch just below 2^32: the group's epochs continue
    // from there, so the 32-bit sequence in the arrival word wraps during the run. With 2^32 - 1
    // the very first expected sequence is 0, the value of a slot nobody has written yet: the
    // device must still wait for real arrivals (the stress check catches an early release).
    for (kind, map) in DEVICES {
        for below in [5u64, 1] {
            run_across_the_wrap(kind, map, (1 << 32) - below);
        }
    }
}

fn run_across_the_wrap(kind: &str, map: &'static DeviceMap, start: u64) {
    let emu = Emulator::start(Config::new(map)).unwrap();
    for g in 0..map.max_groups {
        for m in 0..4 {
            emu.device().flag(map.release_flag(g, m)).raise(start, false);
        }
    }
    let out = stress_all(4, params(kind, &emu), StressOptions { iterations: 50, ..Default::default() });
    for (algorithm, r) in out {
        assert!(algorithm.starts_with("offload"), "{kind} from {start:#x}: {algorithm}");
        assert_eq!(r, Ok(50), "{kind} from {start:#x}");
    }
    assert_eq!(emu.counters().errors, 0);
}

fn fault_strategy() -> impl Strategy<Value = (&'static str, Faults)> {
    let p = 0.001f64..0.05;
    prop_oneof![
        p.clone().prop_map(|x| ("drop_arrival", Faults { drop_arrival: x, ..Faults::default() })),
        p.clone().prop_map(|x| ("drop_release", Faults { drop_release: x, ..Faults::default() })),
        (0.01f64..0.5).prop_map(|x| ("duplicate_release", Faults { duplicate_release: x, ..Faults::default() })),
        (1u64..300).prop_map(|n| ("stick_error", Faults { stick_error_after: Some(n), ..Faults::default() })),
        (1u64..300).prop_map(|n| ("vanish", Faults { vanish_after: Some(n), ..Faults::default() })),
        (0u64..300)
            .prop_map(|us| ("slow_engine", Faults { slow_engine: Duration::from_micros(us), ..Faults::default() })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every fault, at random points of long runs: the run completes with every barrier correct
    /// (the ranks fall back to software together), or fails with a clear error; it never hangs
    /// (BARRIER_TIMEOUT bounds every wait) and never releases a rank early (the stress check).
    #[test]
    fn injected_faults_never_hang_and_never_release_early(
        device in 0usize..2,
        (name, faults) in fault_strategy(),
        seed in any::<u64>(),
        n in 2usize..6,
        iterations in 100u64..400,
    ) {
        let (kind, map) = DEVICES[device];
        let emu = Emulator::start(Config { faults: Faults { seed, ..faults }, ..Config::new(map) }).unwrap();
        let p = params(kind, &emu).set("BARRIER_TIMEOUT", "30s");
        let opts = StressOptions { iterations, seed, sleep_one_in: 0, ..Default::default() };
        let out = stress_all(n, p, opts);
        for (algorithm, result) in &out {
            prop_assert_eq!(result, &Ok(iterations), "{} on {} ({}), n={}", name, kind, algorithm, n);
        }
        // A fault that stops the device must have moved everyone to the fallback.
        if faults.vanish_after.is_some_and(|k| k < iterations / 2) || faults.stick_error_after.is_some_and(|k| k < iterations / 2) {
            prop_assert!(out.iter().all(|(a, _)| a.starts_with("fallback")), "{} on {}: {:?}", name, kind, out);
        }
    }
}

#[test]
fn groups_of_a_killed_job_are_reclaimed_by_a_shared_device() {
    let _machine = common::one_job_at_a_time();
    let dir = std::env::temp_dir().join(format!("barrier-emu-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("switch0");
    let emu = Emulator::start_at(Config::new(&barrier_hw::SWITCH), &path).unwrap();
    let mut spec = barrier_launch::JobSpec::new(4, common::example("correctness"));
    spec.args = vec!["100000000".into(), "--die".into(), "1:300".into()];
    spec.env = vec![
        ("BARRIER_BACKEND".into(), "switch".into()),
        ("BARRIER_SWITCH_DEVICE_PATH".into(), path.display().to_string()),
    ];
    spec.capture_stderr = true;
    let report = barrier_launch::launch(&spec).unwrap();
    assert_eq!(report.failure.as_ref().map(|f| f.rank), Some(1));
    assert!(emu.counters().barriers >= 299);
    let start = std::time::Instant::now();
    while emu.counters().groups_in_use != 0 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(emu.counters().groups_in_use, 0, "the dead job's group was not reclaimed");
    drop(emu);
    assert!(!path.exists(), "the daemon's device file must be removed when it stops");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_gba_serves_more_members_than_a_switch_group_holds() {
    let emu = Emulator::start(Config::new(&barrier_hw::GBA)).unwrap();
    let p = params("gba", &emu).set("BARRIER_TIMEOUT", "120s");
    let opts =
        StressOptions { iterations: 40, spin_one_in: 0, sleep_one_in: 0, split_phase: false, ..Default::default() };
    let out = stress_all(130, p, opts);
    for (algorithm, r) in &out {
        assert!(algorithm.starts_with("offload"), "{algorithm}");
        assert_eq!(r, &Ok(40));
    }
    assert_eq!(emu.counters().errors, 0);
}

fn run_tree(n: usize, faults: Faults, iterations: u64) -> Vec<(String, Result<u64, String>)> {
    let emu = Emulator::start(Config { faults, ..Config::new(&barrier_hw::SWITCH) }).unwrap();
    // A long watchdog: 1,000 threads on 2 cores can keep the engine waiting for a while.
    let watchdog = if faults == Faults::default() { "5s" } else { "50ms" };
    let p = params("switch", &emu).set("BARRIER_TIMEOUT", "120s").set("BARRIER_SWITCH_WATCHDOG", watchdog);
    let opts = StressOptions { iterations, spin_one_in: 0, sleep_one_in: 0, split_phase: false, ..Default::default() };
    let out = stress_all(n, p, opts);
    if faults.vanish_after.is_none() {
        // (A device that vanished reads all ones and frees nothing.)
        emu.quiesce(Duration::from_secs(2));
        assert_eq!(emu.counters().groups_in_use, 0, "the tree's groups are freed");
    }
    out
}

#[test]
fn communicators_larger_than_a_group_run_on_a_tree_of_groups() {
    for (n, groups) in [(300, 7), (1000, 17)] {
        let out = run_tree(n, Faults::default(), 20);
        for (algorithm, r) in &out {
            assert_eq!(algorithm, &format!("offload tree of {groups} groups ({} chunks)", groups / 2), "n={n}");
            assert_eq!(r, &Ok(20), "n={n}");
        }
    }
}

#[test]
fn a_tree_survives_every_fault_kind() {
    // 130 ranks on the switch: two chunks, a tree of five groups. A lost arrival of a member
    // that is not its chunk's leader must be noticed by whoever waits on that group.
    let kinds: [(&str, Faults, bool); 6] = [
        ("drop_release", Faults { drop_release: 0.01, ..Faults::default() }, true),
        ("drop_arrival", Faults { drop_arrival: 0.01, ..Faults::default() }, true),
        ("duplicate_release", Faults { duplicate_release: 0.2, ..Faults::default() }, false),
        ("stick_error", Faults { stick_error_after: Some(40), ..Faults::default() }, true),
        ("vanish", Faults { vanish_after: Some(40), ..Faults::default() }, true),
        ("slow_engine", Faults { slow_engine: Duration::from_micros(200), ..Faults::default() }, false),
    ];
    for (name, faults, stops) in kinds {
        let out = run_tree(130, Faults { seed: 7, ..faults }, 150);
        for (algorithm, r) in &out {
            assert_eq!(r, &Ok(150), "{name}: {algorithm}");
        }
        if stops {
            assert!(out.iter().all(|(a, _)| a.starts_with("fallback")), "{name}: every rank must fall back: {out:?}");
        }
    }
}

#[test]
fn a_release_still_being_written_is_not_a_lost_release() {
    // The device stores COMPLETED_EPOCH before it writes the release flags; with 30 ms per
    // member it is still writing when a 10 ms watchdog looks. That is slowness, not a fault.
    for (kind, map) in DEVICES {
        let latency = barrier_emu::Latency { per_hop: Duration::ZERO, per_member: Duration::from_millis(30) };
        let emu = Emulator::start(Config { latency, ..Config::new(map) }).unwrap();
        let p = params(kind, &emu).set(format!("BARRIER_{}_WATCHDOG", kind.to_ascii_uppercase()), "10ms");
        let opts = StressOptions { iterations: 12, spin_one_in: 0, sleep_one_in: 0, ..Default::default() };
        for (algorithm, r) in stress_all(3, p, opts) {
            assert_eq!(r, Ok(12));
            assert!(algorithm.starts_with("offload"), "{kind}: a slow release was taken for a lost one: {algorithm}");
        }
    }
}

#[test]
fn after_a_device_fault_the_communicator_returns_to_a_software_algorithm() {
    for (kind, map) in DEVICES {
        let emu = Emulator::start(Config {
            faults: Faults { stick_error_after: Some(30), ..Faults::default() },
            ..Config::new(map)
        })
        .unwrap();
        let opts = StressOptions { iterations: 300, ..Default::default() };
        let out = stress_all(4, params(kind, &emu), opts);
        for (algorithm, r) in &out {
            assert_eq!(r, &Ok(300), "{kind}");
            let algo = algorithm.strip_prefix("fallback: ").unwrap_or_else(|| panic!("{kind}: {algorithm}"));
            assert!(
                ["central", "dissemination", "tournament", "tree"].iter().any(|a| algo.starts_with(a)),
                "{kind}: still on the flat barrier long after the fault: {algorithm}"
            );
        }
        // The rank that saw the fault keeps its reason; the others say another rank saw one.
        assert!(out.iter().any(|(a, _)| a.contains("ERROR")), "{kind}: {out:?}");
    }
}

#[test]
fn a_device_that_stops_answering_mid_job_is_a_fault_like_any_other() {
    // The daemon "dies" (its engine stops and its file lock goes away) while ranks barrier on it.
    let dir = std::env::temp_dir().join(format!("barrier-emu-dies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("switch0");
    let emu = Emulator::start_at(Config::new(&barrier_hw::SWITCH), &path).unwrap();
    let p = params("switch", &emu).set("BARRIER_TIMEOUT", "60s");
    let killer = {
        let path = path.clone();
        std::thread::spawn(move || {
            while emu.counters().barriers < 300 {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(emu);
            assert!(!path.exists());
        })
    };
    let opts = StressOptions { iterations: 3000, sleep_one_in: 0, ..Default::default() };
    let out = stress_all(3, p, opts);
    killer.join().unwrap();
    for (algorithm, r) in &out {
        assert_eq!(r, &Ok(3000), "{algorithm}");
        assert!(algorithm.starts_with("fallback"), "{algorithm}");
    }
    assert!(out.iter().any(|(a, _)| a.contains("stopped answering")), "{out:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_stale_device_file_is_refused_at_once_and_replaced_by_a_new_daemon() {
    let dir = std::env::temp_dir().join(format!("barrier-emu-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (live, stale) = (dir.join("live"), dir.join("stale"));
    // A daemon that died leaves its file behind: keep a second name for the file, then stop it.
    let emu = Emulator::start_at(Config::new(&barrier_hw::SWITCH), &live).unwrap();
    std::fs::hard_link(&live, &stale).unwrap();
    let second = Emulator::start_at(Config::new(&barrier_hw::SWITCH), &live).unwrap_err();
    assert_eq!(second.kind(), std::io::ErrorKind::AddrInUse, "{second}");
    drop(emu);

    let p = Params::defaults_only()
        .set("BARRIER_BACKEND", "switch")
        .set("BARRIER_SWITCH_DEVICE_PATH", stale.display().to_string())
        .set("BARRIER_TIMEOUT", "60s");
    let start = std::time::Instant::now();
    let err = Job::new(2).params(p.clone()).run(|_| ()).unwrap_err().to_string();
    assert!(start.elapsed() < Duration::from_secs(10), "a stale device took {:?} to refuse", start.elapsed());
    assert!(err.contains("nothing serves") && err.contains("stale"), "{err}");

    let revived = Emulator::start_at(Config::new(&barrier_hw::SWITCH), &stale).unwrap();
    let out = Job::new(2).busy_threads(1).params(p).run(|w| w.algorithm()).unwrap();
    assert!(out.iter().all(|a| a.starts_with("offload")), "{out:?}");
    drop(revived);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_group_stays_with_its_job_while_any_member_lives_and_an_abandoned_claim_is_freed() {
    let _machine = common::one_job_at_a_time();
    let dir = std::env::temp_dir().join(format!("barrier-emu-hold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("switch0");
    let emu = Emulator::start_at(Config::new(&barrier_hw::SWITCH), &path).unwrap();
    let map = &barrier_hw::SWITCH;

    // A claim nobody attached to, by a process that is alive (this one) but holds no lock:
    // judged by pid it would be kept for ever.
    let abandoned = 200;
    emu.device()
        .group_word(map, abandoned, &map.group.owner, 0)
        .store((std::process::id() as u64) << 32 | 7, std::sync::atomic::Ordering::Release);

    // Job A: rank 0 claims the world's group, leaves and exits; rank 1 stays 2.5 s longer.
    let mut spec = barrier_launch::JobSpec::new(2, common::example("faults"));
    spec.args = vec!["hold-group".into(), "2500".into()];
    spec.env = vec![
        ("BARRIER_BACKEND".into(), "switch".into()),
        ("BARRIER_SWITCH_DEVICE_PATH".into(), path.display().to_string()),
    ];
    spec.capture_stderr = true;
    let job = std::thread::spawn(move || barrier_launch::launch(&spec).unwrap());
    // Rank 0 is gone after a few ms; the collector runs every second.
    std::thread::sleep(Duration::from_millis(1800));
    let owner =
        |g: usize| emu.device().group_word(map, g, &map.group.owner, 0).load(std::sync::atomic::Ordering::Acquire);
    assert_ne!(owner(0), 0, "the group was freed while rank 1 of its job was still attached");
    assert_eq!(owner(abandoned), 0, "a claimed group that nobody attached to was never freed");
    let report = job.join().unwrap();
    assert!(report.success(), "{:?}", report.stderr);
    assert!(report.stderr.iter().all(|e| e.contains("offload")), "{:?}", report.stderr);
    emu.quiesce(Duration::from_secs(2));
    assert_eq!(emu.counters().groups_in_use, 0, "the last member frees the group");
    drop(emu);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_chunk_leader_that_computes_inside_an_ibarrier_is_not_a_lost_arrival() {
    // 130 ranks on the switch: chunks led by ranks 0 and 65. Rank 65 starts each ibarrier and
    // computes for 300 ms before it completes it: its chunk's gather group completes long
    // before it sends its arrival to the root. That is a slow rank, not a lost arrival, however
    // many 20 ms watchdogs rank 0 sees pass at the root.
    let emu = Emulator::start(Config::new(&barrier_hw::SWITCH)).unwrap();
    let p = params("switch", &emu).set("BARRIER_TIMEOUT", "120s");
    let out = job(130)
        .params(p)
        .run(|w| {
            for _ in 0..4 {
                let req = w.ibarrier().unwrap();
                if w.rank() == 65 {
                    std::thread::sleep(Duration::from_millis(300));
                }
                req.wait().unwrap();
            }
            w.algorithm()
        })
        .unwrap();
    assert!(out.iter().all(|a| a.starts_with("offload tree")), "{:?}", out[0]);
}

#[test]
fn hardware_backends_are_correct_on_inline_devices() {
    // The device's work runs in the ranks that ring it (the benchmark's default), with the same
    // engine code: the whole correctness check, at odd sizes, with split communicators.
    for (kind, map) in DEVICES {
        let emu = Emulator::start(Config::new(map).inline()).unwrap();
        for n in [2, 3, 8, 13] {
            let opts = StressOptions { iterations: 400, seed: n as u64, ..Default::default() };
            let out = Job::new(n)
                .params(params(kind, &emu))
                .run(|w| {
                    let sub = w.split(w.rank() % 2, w.rank()).unwrap().unwrap();
                    let result = stress(&w, &opts).and_then(|k| stress(&sub, &opts).map(|m| k + m));
                    (w.algorithm(), sub.algorithm(), result.map_err(|e| e.to_string()))
                })
                .unwrap();
            // More ranks than cores: the waiters spin for the device's release once no rank
            // of their CPU is missing (the tail spin), and say so.
            let tail = n > barrier::sys::available_cores();
            for (algorithm, sub_algorithm, result) in out {
                assert!(algorithm.starts_with("offload") && sub_algorithm.starts_with("offload"), "{kind} at {n}");
                assert_eq!(algorithm.ends_with(" + tail spin"), tail, "{kind} at {n}: {algorithm}");
                assert_eq!(result, Ok(800), "{kind} at {n}");
            }
        }
        assert!(emu.quiesce(Duration::from_secs(2)));
        let c = emu.counters();
        assert_eq!((c.errors, c.groups_in_use), (0, 0), "{kind}: {c:?}");
        assert!(c.barriers >= 4 * 800, "{kind}: {c:?}");
    }
}

#[test]
fn an_inline_group_spanning_two_mask_words_completes_by_its_arrival_count() {
    // 70 members: ARRIVED_MASK spans two words, so ARRIVAL_COUNT, not one word filling up,
    // decides each epoch (the other completion rule of the inline device's traps).
    let emu = Emulator::start(Config::new(&barrier_hw::GBA).inline()).unwrap();
    let opts = StressOptions { iterations: 60, seed: 70, ..Default::default() };
    let out = Job::new(70)
        .params(params("gba", &emu))
        .run(|w| (w.algorithm(), stress(&w, &opts).map_err(|e| e.to_string())))
        .unwrap();
    for (algorithm, result) in out {
        assert_eq!(algorithm, "offload group 0");
        assert_eq!(result, Ok(60));
    }
    assert!(emu.quiesce(Duration::from_secs(2)));
    let c = emu.counters();
    assert_eq!((c.errors, c.groups_in_use), (0, 0), "{c:?}");
    assert!(c.barriers >= 60, "{c:?}");
    assert_eq!(c.arrivals, 70 * c.barriers, "every barrier counts all its arrivals: {c:?}");
}

#[test]
fn inline_groups_freed_and_claimed_again_under_a_new_shape_keep_working() {
    // The same ranks (threads, each with its own engine of the device) free a group and claim
    // it again under a new owner, with another member count: every engine must take the new
    // group as it is now, not as it knew it, or a barrier is never released (or falls back).
    for (kind, map) in DEVICES {
        let emu = Emulator::start(Config::new(map).inline()).unwrap();
        let opts = StressOptions { iterations: 50, seed: 5, ..Default::default() };
        let out = Job::new(6)
            .params(params(kind, &emu))
            .run(|w| -> Result<Vec<String>, String> {
                let mut algorithms = Vec::new();
                for round in 0..4 {
                    let color = if round % 2 == 0 { 0 } else { w.rank() % 2 };
                    let sub = w.split(color, w.rank()).map_err(|e| e.to_string())?.expect("a color");
                    stress(&sub, &opts).map_err(|e| e.to_string())?;
                    algorithms.push(sub.algorithm());
                }
                Ok(algorithms)
            })
            .unwrap();
        for result in out {
            let algorithms = result.unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert!(algorithms.iter().all(|a| a.starts_with("offload group")), "{kind}: {algorithms:?}");
        }
        assert!(emu.quiesce(Duration::from_secs(2)));
        assert_eq!(emu.counters().errors, 0, "{kind}");
    }
}

#[test]
fn a_program_without_the_emulator_drives_an_inline_device_through_the_library_the_launcher_names() {
    let _machine = common::one_job_at_a_time();
    let library = barrier_launch::inline_emulator_library().expect("the build makes libbarrier_emu_inline.so");
    let library = library.to_string_lossy().into_owned();
    for map in [&barrier_hw::SWITCH, &barrier_hw::GBA] {
        let mut spec = barrier_launch::JobSpec::new(3, common::example("correctness"));
        spec.args = vec!["2000".into(), "--split".into()];
        spec.env = vec![
            ("BARRIER_BACKEND".into(), map.kind.into()),
            ("BARRIER_TIMEOUT".into(), "60s".into()),
            (barrier::mmio::INLINE_LIBRARY_VAR.into(), library.clone()),
        ];
        spec.emulate = vec![Config::new(map).inline()];
        spec.capture_stdout = true;
        spec.capture_stderr = true;
        let report = barrier_launch::launch(&spec).unwrap();
        assert!(report.success(), "{}: {:?}", map.kind, report.stderr);
        let (_, counters) = report.devices[0];
        // The ranks did the device's work (there is no engine thread), and flushed their counts.
        assert!(counters.barriers >= 2000 && counters.errors == 0, "{}: {counters:?}", map.kind);
    }
    // A file that is not the library is refused, and the forced backend says why.
    let mut spec = barrier_launch::JobSpec::new(2, common::example("correctness"));
    spec.args = vec!["100".into()];
    let not_a_library = common::example("hello").to_string_lossy().into_owned();
    spec.env = vec![
        ("BARRIER_BACKEND".into(), "gba".into()),
        ("BARRIER_TIMEOUT".into(), "60s".into()),
        (barrier::mmio::INLINE_LIBRARY_VAR.into(), not_a_library),
    ];
    spec.emulate = vec![Config::new(&barrier_hw::GBA).inline()];
    spec.capture_stderr = true;
    let report = barrier_launch::launch(&spec).unwrap();
    let first = report.failure.as_ref().expect("a library that cannot load fails the forced backend").rank;
    // glibc 2.30 and later refuse to load an executable; older ones load it and find no symbol.
    let why = &report.stderr[first];
    assert!(
        why.contains("cannot load the inline emulator library") || why.contains("it is not barrier-emu-inline"),
        "{why}"
    );
}

#[test]
fn a_program_without_the_emulator_cannot_drive_an_inline_device_and_says_why() {
    let _machine = common::one_job_at_a_time();
    let mut spec = barrier_launch::JobSpec::new(2, common::example("correctness"));
    spec.args = vec!["100".into()];
    spec.env = vec![("BARRIER_BACKEND".into(), "switch".into()), ("BARRIER_TIMEOUT".into(), "60s".into())];
    spec.emulate = vec![Config::new(&barrier_hw::SWITCH).inline()];
    spec.capture_stdout = true;
    spec.capture_stderr = true;
    let report = barrier_launch::launch(&spec).unwrap();
    let first = report.failure.as_ref().expect("a forced backend that cannot run fails").rank;
    assert!(report.stderr[first].contains("emulated inline"), "{}", report.stderr[first]);
    // Chosen automatically, it declines and the job runs in software.
    spec.env = vec![("BARRIER_TIMEOUT".into(), "60s".into())];
    let report = barrier_launch::launch(&spec).unwrap();
    assert!(report.success(), "{:?}", report.stderr);
    assert!(report.stdout[0].contains("(dissemination,"), "{:?}", report.stdout);
}

/// Another user's device file, one anyone may write, or one reached through a symbolic link is
/// not used: the backend declines with the reason (a forced one fails naming it), because
/// whoever controls the file decides when this user's barriers complete.
#[test]
fn an_untrustworthy_device_file_is_declined_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("barrier-trust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gba0");
    let _ = std::fs::remove_file(&path);
    let emu = Emulator::start_at(Config::new(&barrier_hw::GBA), &path).unwrap();
    let forced = |device: &std::path::Path| {
        let p = Params::defaults_only()
            .set("BARRIER_BACKEND", "gba")
            .set("BARRIER_GBA_DEVICE_PATH", device.display().to_string());
        Job::new(2).params(p).run(|w| w.backend().to_string())
    };
    // Ours, 0600: used.
    assert_eq!(forced(&path).unwrap()[0], "gba");
    // Writable by others: refused, and the automatic choice falls back with the reason.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = forced(&path).unwrap_err().to_string();
    assert!(err.contains("writable by other users"), "{err}");
    let p = Params::defaults_only().set("BARRIER_GBA_DEVICE_PATH", path.display().to_string());
    let why = Job::new(2).params(p).run(|w| w.selection().to_string()).unwrap();
    assert!(why[0].contains("writable by other users"), "{}", why[0]);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Through a symbolic link: refused.
    let link = dir.join("gba-link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let err = forced(&link).unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");
    // A FIFO (issue 40 item 5: opening one waited for a writer for ever): refused at once.
    let fifo = dir.join("gba-fifo");
    let _ = std::fs::remove_file(&fifo);
    let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo {}", fifo.display());
    let (tx, rx) = std::sync::mpsc::channel();
    let at = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(forced(&at).map(|w| w[0].clone()).map_err(|e| e.to_string()));
    });
    let err =
        rx.recv_timeout(std::time::Duration::from_secs(20)).expect("opening a FIFO as a device file hung").unwrap_err();
    assert!(err.contains("neither a regular file nor a character device (a FIFO)"), "{err}");
    // Read-only (the A64FX device and sysfs files), where the open itself waited for a writer.
    let (tx, rx) = std::sync::mpsc::channel();
    let at = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(barrier::sys::open_trusted(&at, false).map(drop).map_err(|e| e.to_string()));
    });
    let err = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("opening a FIFO read-only hung").unwrap_err();
    assert!(err.contains("(a FIFO)"), "{err}");
    // Another user's (as root, the test hands the file to `nobody`): refused.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let err = forced(&path).unwrap_err().to_string();
        assert!(err.contains("belongs to user 65534"), "{err}");
    } else {
        println!("skipped: handing a file to another user needs root");
    }
    drop(emu);
    let _ = std::fs::remove_dir_all(&dir);
}

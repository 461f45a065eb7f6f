//! The hierarchical backend: the correctness suite on every (nodes x ranks per node) shape, as
//! threads and as processes, with split communicators used concurrently; what crosses the
//! network per barrier; the node roots on an emulated switch or GBA, with faults.

mod common;

use std::time::Duration;

use barrier::{threads::Job, Params};
use barrier_emu::{Config, Emulator, Faults};
use barrier_suite::{stress, StressOptions};

/// (nodes, ranks per node).
const SHAPES: [(usize, usize); 7] = [(1, 2), (2, 1), (2, 2), (3, 3), (4, 2), (2, 8), (5, 3)];

fn params() -> Params {
    Params::defaults_only().set("BARRIER_BACKEND", "hierarchical").set("BARRIER_TIMEOUT", "60s")
}

/// ⌈log2 n⌉.
fn rounds(n: usize) -> u64 {
    barrier::rounds(n) as u64
}

#[test]
fn every_shape_is_correct_as_threads_with_splits_used_concurrently() {
    for (nodes, per) in SHAPES {
        for radix in ["2", "4"] {
            let n = nodes * per;
            let opts = StressOptions { iterations: 300, seed: n as u64, ..Default::default() };
            let out = Job::new(n)
                .nodes(nodes)
                .params(params().set("BARRIER_HIER_RADIX", radix))
                .run(|w| {
                    // Two colors that cut across the nodes, each its own hierarchical barrier.
                    let sub = w.split(w.rank() % 2, 0).map_err(|e| e.to_string())?.expect("a color");
                    let a = stress(&sub, &opts).map_err(|e| e.to_string())?;
                    let b = stress(&w, &StressOptions { iterations: 150, ..opts }).map_err(|e| e.to_string())?;
                    let c = stress(&sub, &StressOptions { iterations: 150, ..opts }).map_err(|e| e.to_string())?;
                    Ok::<_, String>((w.backend().to_string(), sub.backend().to_string(), a + b + c))
                })
                .unwrap();
            for (rank, r) in out.into_iter().enumerate() {
                let (world, sub, count) = r.unwrap_or_else(|e| panic!("{nodes}x{per} radix {radix} rank {rank}: {e}"));
                assert_eq!((world.as_str(), sub.as_str(), count), ("hierarchical", "hierarchical", 600));
            }
        }
    }
}

#[test]
fn every_shape_is_correct_as_processes_with_splits() {
    for (nodes, per) in SHAPES {
        let n = nodes * per;
        let _machine = common::one_job_at_a_time();
        let mut spec = barrier_launch::JobSpec::new(n, common::example("correctness"));
        spec.nodes = nodes;
        spec.args = vec!["400".into(), "--split".into(), "--seed".into(), n.to_string().into()];
        spec.env = vec![("BARRIER_BACKEND".into(), "hierarchical".into()), ("BARRIER_TIMEOUT".into(), "60s".into())];
        spec.capture_stdout = true;
        spec.capture_stderr = true;
        let report = barrier_launch::launch(&spec).unwrap();
        assert!(report.success(), "{nodes}x{per}: {:?} {:?}", report.describe(n), report.stderr);
        assert!(report.stdout[0].contains("(hierarchical"), "{nodes}x{per}: {:?}", report.stdout);
    }
}

#[test]
fn auto_takes_hierarchical_only_across_nodes_with_enough_ranks_on_each() {
    let choose = |n: usize, nodes: usize, extra: &[(&str, &str)]| {
        let mut p = Params::defaults_only();
        for (k, v) in extra {
            p = p.set(*k, *v);
        }
        Job::new(n).nodes(nodes).params(p).run(|w| w.backend().to_string()).unwrap()
    };
    assert!(choose(8, 2, &[]).iter().all(|b| b == "hierarchical"));
    assert!(choose(8, 1, &[]).iter().all(|b| b == "dissemination"), "one node: no hierarchy");
    assert!(choose(4, 4, &[]).iter().all(|b| b == "dissemination"), "one rank per node is under the threshold");
    assert!(choose(9, 3, &[("BARRIER_HIER_THRESHOLD", "4")]).iter().all(|b| b == "dissemination"));
    // Splits: a color with one rank per node falls back on its own, the world keeps the hierarchy.
    let out = Job::new(8)
        .nodes(2)
        .params(Params::defaults_only())
        .run(|w| {
            let pairs = w.split(w.local_rank(), 0).unwrap().unwrap();
            (w.backend().to_string(), pairs.backend().to_string(), pairs.num_nodes())
        })
        .unwrap();
    assert!(out.iter().all(|(w, p, nodes)| w == "hierarchical" && p == "dissemination" && *nodes == 2), "{out:?}");
}

/// Network operations per barrier on each rank of `world`, over `iterations` barriers.
fn network_per_barrier(w: &barrier::Communicator, iterations: u64) -> (bool, u64) {
    w.barrier().unwrap();
    let before = w.network_ops();
    for _ in 0..iterations {
        w.barrier().unwrap();
    }
    let sent = w.network_ops() - before;
    assert_eq!(sent % iterations, 0, "rank {}: {sent} network operations in {iterations} barriers", w.rank());
    (w.local_rank() == 0, sent / iterations)
}

#[test]
fn only_node_roots_put_to_the_network_log2_nodes_puts_each() {
    for (nodes, per) in [(2, 2), (3, 3), (4, 2), (5, 3), (2, 8)] {
        let out = Job::new(nodes * per).nodes(nodes).params(params()).run(|w| network_per_barrier(&w, 50)).unwrap();
        for (rank, (root, puts)) in out.iter().enumerate() {
            let expected = if *root { rounds(nodes) } else { 0 };
            assert_eq!(*puts, expected, "{nodes}x{per}: rank {rank} (root: {root})");
        }
        // Flat dissemination over the same job puts far more, from every rank.
        let flat = Job::new(nodes * per)
            .nodes(nodes)
            .params(params().set("BARRIER_BACKEND", "dissemination"))
            .run(|w| network_per_barrier(&w, 50).1)
            .unwrap();
        let hier: u64 = out.iter().map(|(_, p)| p).sum();
        assert!(flat.iter().sum::<u64>() > hier, "{nodes}x{per}: flat {flat:?} vs hierarchical {hier}");
    }
}

fn device_params(kind: &str, emu: &Emulator) -> Params {
    params()
        .set("BARRIER_HIER_INTERNODE", kind)
        .set(format!("BARRIER_{}_DEVICE_PATH", kind.to_ascii_uppercase()), emu.path().display().to_string())
        .set(format!("BARRIER_{}_WATCHDOG", kind.to_ascii_uppercase()), "20ms")
}

#[test]
fn roots_on_a_device_send_one_arrival_each_and_nothing_else_crosses() {
    for (kind, map) in [("switch", &barrier_hw::SWITCH), ("gba", &barrier_hw::GBA)] {
        let emu = Emulator::start(Config::new(map)).unwrap();
        for (nodes, per) in [(2, 2), (3, 3), (4, 2)] {
            let out = Job::new(nodes * per)
                .nodes(nodes)
                .busy_threads(1)
                .params(device_params(kind, &emu))
                .run(|w| {
                    let (root, ops) = network_per_barrier(&w, 50);
                    let opts = StressOptions { iterations: 200, ..Default::default() };
                    (root, ops, w.algorithm(), stress(&w, &opts).map_err(|e| e.to_string()))
                })
                .unwrap();
            for (rank, (root, ops, algorithm, result)) in out.iter().enumerate() {
                assert_eq!(*ops, u64::from(*root), "{kind} {nodes}x{per}: rank {rank} ({algorithm})");
                assert!(algorithm.contains(&format!("roots: {kind}")), "{algorithm}");
                assert_eq!(result, &Ok(200), "{kind} {nodes}x{per} rank {rank}");
            }
        }
        emu.quiesce(Duration::from_secs(2));
        let c = emu.counters();
        assert_eq!((c.errors, c.groups_in_use), (0, 0), "{kind}: {c:?}");
    }
}

#[test]
fn an_explicit_device_that_is_missing_fails_with_the_reason_and_auto_uses_dissemination() {
    let p = params().set("BARRIER_HIER_INTERNODE", "switch").set("BARRIER_SWITCH_DEVICE_PATH", "/nonexistent/switch0");
    let err = Job::new(4).nodes(2).params(p).run(|w| w.barrier()).unwrap_err().to_string();
    assert!(err.contains("BARRIER_HIER_INTERNODE=switch") && err.contains("/nonexistent/switch0"), "{err}");
    let p = params()
        .set("BARRIER_SWITCH_DEVICE_PATH", "/nonexistent/switch0")
        .set("BARRIER_GBA_DEVICE_PATH", "/nonexistent/gba0");
    let algos = Job::new(4).nodes(2).params(p).run(|w| w.algorithm()).unwrap();
    assert!(algos.iter().all(|a| a.contains("roots: dissemination over net-sim")), "{algos:?}");
}

#[test]
fn a_device_fault_among_the_roots_moves_every_root_to_software_at_once_and_nobody_hangs() {
    for (kind, map) in [("switch", &barrier_hw::SWITCH), ("gba", &barrier_hw::GBA)] {
        for faults in [
            Faults { vanish_after: Some(40), ..Faults::default() },
            Faults { stick_error_after: Some(25), ..Faults::default() },
            Faults { drop_arrival: 0.02, seed: 7, ..Faults::default() },
        ] {
            let emu = Emulator::start(Config { faults, ..Config::new(map) }).unwrap();
            let opts = StressOptions { iterations: 300, sleep_one_in: 0, ..Default::default() };
            let out = Job::new(9)
                .nodes(3)
                .busy_threads(1)
                .params(device_params(kind, &emu).set("BARRIER_TIMEOUT", "30s"))
                .run(|w| {
                    let result = stress(&w, &opts).map_err(|e| e.to_string());
                    (w.local_rank() == 0, w.algorithm(), result)
                })
                .unwrap();
            for (root, algorithm, result) in &out {
                assert_eq!(result, &Ok(300), "{kind} {faults:?}: {algorithm}");
                if faults.drop_arrival == 0.0 {
                    assert!(!root || algorithm.contains("fallback"), "{kind} {faults:?}: a root stayed: {algorithm}");
                }
            }
        }
    }
}

#[test]
fn simulated_network_latency_slows_the_network_puts_it_is_meant_to() {
    // Not a speed assertion: a floor. Every barrier passes through 2 rounds of 200 us puts
    // among the 4 roots, so 20 barriers cannot take less than 20 * 2 * 200 us on any rank.
    let p = params().set("BARRIER_NET_PUT_LATENCY", "200us");
    let out = Job::new(8)
        .nodes(4)
        .params(p)
        .run(|w| {
            w.barrier().unwrap();
            let t = std::time::Instant::now();
            for _ in 0..20 {
                w.barrier().unwrap();
            }
            t.elapsed()
        })
        .unwrap();
    assert!(out.iter().all(|&t| t >= Duration::from_millis(8)), "{out:?}");
}

#[test]
fn phase_times_are_reported_with_hier_debug() {
    // Two nodes: on one the backend runs the flat barrier, which has no phases.
    let _machine = common::one_job_at_a_time();
    let mut spec = barrier_launch::JobSpec::new(4, common::example("hello"));
    spec.nodes = 2;
    spec.env = vec![("BARRIER_BACKEND".into(), "hierarchical".into()), ("BARRIER_HIER_DEBUG".into(), "1".into())];
    spec.capture_stderr = true;
    let report = barrier_launch::launch(&spec).unwrap();
    assert!(report.success(), "{:?}", report.stderr);
    let all = report.stderr.concat();
    assert!(all.contains("per barrier: gather") && all.contains("internode") && all.contains("release"), "{all}");
}

#[test]
fn a_device_setting_on_one_rank_does_not_split_the_roots() {
    // Rank 2 (the root of node 1) alone disables the GBA; the device list among the roots is
    // rank 0's, so every rank tries the same devices in the same order and all agree.
    let _machine = common::one_job_at_a_time();
    let script = "[ \"$BARRIER_RANK\" = 2 ] && export BARRIER_GBA_DISABLE=1; exec \"$@\"";
    let mut spec = barrier_launch::JobSpec::new(4, "sh");
    spec.args = vec!["-c".into(), script.into(), "sh".into(), common::example("correctness").into(), "300".into()];
    spec.nodes = 2;
    spec.env = vec![("BARRIER_BACKEND".into(), "hierarchical".into()), ("BARRIER_TIMEOUT".into(), "30s".into())];
    spec.emulate = vec![Config::new(&barrier_hw::SWITCH)];
    spec.capture_stdout = true;
    spec.capture_stderr = true;
    let report = barrier_launch::launch(&spec).unwrap();
    assert!(report.success(), "{:?} {:?}", report.describe(4), report.stderr);
    assert!(report.stdout[0].contains("roots: switch"), "{:?}", report.stdout);
}

#[test]
fn asynchronous_network_puts_complete_through_progress_calls() {
    // Puts that land only when their initiator progresses the transport (as MPI's would): both
    // put-based backends must keep calling progress while they wait, and finish their puts
    // before they report a barrier complete. (Without those calls the first barrier times out.)
    for backend in ["hierarchical", "dissemination"] {
        for (nodes, per, latency) in [(2, 2, "0"), (3, 3, "30us"), (5, 3, "0"), (4, 2, "30us")] {
            let p = params()
                .set("BARRIER_BACKEND", backend)
                .set("BARRIER_NET_ASYNC", "1")
                .set("BARRIER_NET_PUT_LATENCY", latency);
            let opts = StressOptions { iterations: 300, seed: nodes as u64, ..Default::default() };
            let out = Job::new(nodes * per)
                .nodes(nodes)
                .params(p)
                .run(|w| {
                    let sub = w.split(w.rank() % 2, 0).unwrap().unwrap();
                    let a = stress(&w, &opts).map_err(|e| e.to_string());
                    let b = stress(&sub, &StressOptions { iterations: 100, ..opts }).map_err(|e| e.to_string());
                    (a, b)
                })
                .unwrap();
            for (rank, r) in out.iter().enumerate() {
                assert_eq!(r, &(Ok(300), Ok(100)), "{backend} {nodes}x{per} latency {latency}: rank {rank}");
            }
        }
    }
}

/// A small xorshift, so that each rank's delays differ and repeat from run to run.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The halves of `Communicator::halves` (barrier-mpi's and barrier-shmem's node phases): the
/// root's phase runs only once every rank has arrived (the gather), and no rank leaves the
/// release before the root's phase is over; blocking and split phase, odd sizes, random delays.
#[test]
fn the_halves_gather_before_the_roots_phase_and_release_after_it() {
    use std::sync::atomic::{AtomicU64, Ordering};
    for n in [1, 2, 3, 5, 8, 13] {
        for radix in ["1", "3", "64"] {
            let arrived = AtomicU64::new(0);
            let phase = AtomicU64::new(0);
            let iterations = 200u64;
            Job::new(n)
                .params(params().set("BARRIER_HIER_RADIX", radix))
                .run(|w| {
                    let h = w.halves().unwrap();
                    assert_eq!(h.backend().to_string(), "hierarchical");
                    assert!(h.algorithm().contains(&format!("radix {radix}")), "{}", h.algorithm());
                    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ ((w.rank() as u64 + 1) * 7919);
                    for k in 1..=iterations {
                        if next(&mut state).is_multiple_of(8) {
                            std::thread::sleep(Duration::from_micros(next(&mut state) % 50));
                        }
                        arrived.fetch_add(1, Ordering::SeqCst);
                        // Split phase on every third barrier, blocking otherwise.
                        let split = k % 3 == 0;
                        if split {
                            let mut r = h.ibarrier().unwrap();
                            while !r.test().unwrap() {
                                std::hint::spin_loop();
                            }
                        } else {
                            h.barrier().unwrap();
                        }
                        if w.rank() == 0 {
                            let seen = arrived.load(Ordering::SeqCst);
                            assert!(
                                seen >= n as u64 * k,
                                "n {n} radix {radix}: the gather of {k} let the root on at {seen} arrivals"
                            );
                            if next(&mut state).is_multiple_of(4) {
                                std::thread::sleep(Duration::from_micros(next(&mut state) % 100));
                            }
                            phase.store(k, Ordering::SeqCst);
                        }
                        if split {
                            h.ibarrier().unwrap().wait().unwrap();
                        } else {
                            h.barrier().unwrap();
                        }
                        let now = phase.load(Ordering::SeqCst);
                        assert!(
                            now >= k,
                            "n {n} radix {radix} rank {}: left release {k} before the root's phase ({now})",
                            w.rank()
                        );
                    }
                })
                .unwrap();
        }
    }
}

#[test]
fn halves_refuse_a_communicator_that_spans_nodes() {
    let out = Job::new(4).nodes(2).params(params()).run(|w| w.halves().map(|_| ()).map_err(|e| e.to_string())).unwrap();
    for r in out {
        let e = r.unwrap_err();
        assert!(e.contains("spans 2 nodes"), "{e}");
    }
}

/// On one node the hierarchical backend runs the flat barrier the software backend would (its
/// gather and release only pay where they keep ranks off the network); across nodes, the node
/// phases with one release flag.
#[test]
fn hierarchical_runs_the_flat_barrier_on_one_node_and_its_node_phases_across_nodes() {
    for (nodes, want) in [(1, "one node: flat "), (2, "radix 8; roots: dissemination")] {
        let out = Job::new(4).nodes(nodes).params(params()).run(|w| w.algorithm()).unwrap();
        assert!(out[0].starts_with(want), "{nodes} node(s): {}", out[0]);
    }
}

#[test]
fn a_late_node_root_is_named_by_the_roots_and_its_node_and_a_root_that_left_fails_the_rest_at_once() {
    // Two nodes of two: rank 2 (node 1's root) is 3 s late with a 500 ms timeout.
    let p = params().set("BARRIER_TIMEOUT", "500ms");
    let out = Job::new(4)
        .nodes(2)
        .params(p.clone())
        .run(|w| {
            w.barrier().map_err(|e| e.to_string())?;
            if w.rank() == 2 {
                std::thread::sleep(Duration::from_secs(3));
            }
            w.barrier().map_err(|e| e.to_string())
        })
        .unwrap();
    // The other root names it as the node root its round waits for, in the words barrier-mpi
    // and barrier-openshmem use (one report function).
    let root = out[0].as_ref().unwrap_err();
    assert!(root.contains("internode phase") && root.contains("the node root at world rank 2"), "{root}");
    assert!(root.contains("world ranks [2]"), "{root}");
    // The nodes' other ranks wait in their release: reported in the user's barriers and ranks
    // (barrier 2 of the communicator of 4), not the node's communicator's. Each times out
    // naming its root, or (node 0's, when its root's timeout came first) learns at once that
    // its root failed.
    for (rank, root) in [(1, 0), (3, 2)] {
        let other = out[rank].as_ref().unwrap_err();
        assert!(other.contains("barrier 2 (within this node, its release phase)"), "{other}");
        let timed_out = other.contains(&format!("rank {rank} of a communicator of 4"))
            && other.contains(&format!("world ranks [{root}]"));
        let root_failed =
            rank == 1 && other.contains("rank 0 (world rank 0) left the communicator after barrier 1, when");
        assert!(timed_out || root_failed, "{other}");
    }
    assert!(out[2].is_ok(), "{:?}", out[2]);

    // Node 1's root (rank 2) leaves after one barrier: the other root fails at once, not at the
    // timeout, and holds the communicator 5 s more. Rank 1, blocking in its node's release,
    // learns it from its root's failure meanwhile (its node's communicator watches only its
    // node); rank 3 from its root's departure.
    let started = std::time::Instant::now();
    let out = Job::new(4)
        .nodes(2)
        .params(params().set("BARRIER_TIMEOUT", "30s"))
        .run(|w| {
            w.barrier().map_err(|e| (e.to_string(), Duration::ZERO))?;
            let t0 = std::time::Instant::now();
            let failed = |e: barrier::Error| (e.to_string(), t0.elapsed());
            match w.rank() {
                2 => Ok(()),
                0 => {
                    let result = w.barrier().map_err(failed);
                    std::thread::sleep(Duration::from_secs(5));
                    result
                }
                _ => w.barrier().map_err(failed),
            }
        })
        .unwrap();
    let (root, _) = out[0].as_ref().unwrap_err();
    assert!(root.contains("rank 2 (world rank 2) left the communicator"), "{root}");
    let (blocking, after) = out[1].as_ref().unwrap_err();
    assert!(blocking.contains("rank 0 (world rank 0) left") && blocking.contains("its release phase"), "{blocking}");
    assert!(*after < Duration::from_secs(4), "rank 1 learnt it only when its root dropped: {after:?}");
    let (other, _) = out[3].as_ref().unwrap_err();
    assert!(other.contains("rank 2 (world rank 2) left") && other.contains("its release phase"), "{other}");
    assert!(started.elapsed() < Duration::from_secs(20), "the roots waited for their timeout: {root}");
}

#[test]
fn a_node_root_that_arrived_and_then_panicked_is_named_after_the_grace_not_at_the_timeout() {
    // Node 1's root starts barrier 2 (its arrival is recorded) and panics while it holds the
    // request: it leaves as failed, having arrived. The other root's looks at the departures
    // must let the grace run out across them and name it, not wait for the 30 s timeout.
    let started = std::time::Instant::now();
    let out = Job::new(4)
        .nodes(2)
        .params(params().set("BARRIER_TIMEOUT", "30s"))
        .run(|w| {
            w.barrier().map_err(|e| e.to_string())?;
            if w.rank() == 2 {
                let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                    let _request = w.ibarrier();
                    panic!("node 1's root panics on purpose");
                }));
                assert!(unwound.is_err());
                return Ok(());
            }
            w.barrier().map_err(|e| e.to_string())
        })
        .unwrap();
    let root = out[0].as_ref().unwrap_err();
    assert!(root.contains("rank 2 (world rank 2) panicked"), "{root}");
    assert!(started.elapsed() < Duration::from_secs(20), "the other root waited for its timeout: {root}");
}

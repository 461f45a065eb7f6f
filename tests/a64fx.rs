//! The correctness suite on the `a64fx` backend against an emulated A64FX node: thread ranks in
//! one CMG (2..12) and across CMGs (up to 48, oversubscribed), process ranks declining, blade
//! and window exhaustion falling back, a dead owner's blades and windows freed, and the sysfs
//! tree read back.

mod common;

use barrier::backends::a64fx::{node_info, NodeInfo};
use barrier::{threads::Job, Communicator, Params};
use barrier_emu::a64fx::Node;
use barrier_hw::a64fx::node::Layout;
use barrier_suite::{stress, StressOptions};

fn node() -> Node {
    Node::start(Layout::A64FX).expect("starting an emulated A64FX node")
}

fn params(node: &Node) -> Params {
    node.params(Params::defaults_only().set("BARRIER_TIMEOUT", "60s"))
}

fn forced(node: &Node) -> Params {
    params(node).set("BARRIER_BACKEND", "a64fx")
}

/// Runs the stress check on `cpus.len()` thread ranks pinned to `cpus`; each rank's backend,
/// algorithm and result.
fn stress_on(node: &Node, cpus: Vec<usize>, iterations: u64) -> Vec<(String, String, Result<u64, String>)> {
    let opts = StressOptions { iterations, seed: cpus.len() as u64, ..Default::default() };
    Job::new(cpus.len())
        .pin_cpus(cpus)
        .params(forced(node))
        .run(|w| (w.backend().to_string(), w.algorithm(), stress(&w, &opts).map_err(|e| e.to_string())))
        .unwrap()
}

#[test]
fn one_cmg_is_correct_for_2_to_12_thread_ranks() {
    let node = node();
    let info = NodeInfo::read(node.sysfs()).unwrap();
    for n in [2, 3, 5, 8, 12] {
        for (backend, algorithm, result) in stress_on(&node, info.compact_cpus(n).unwrap(), 500) {
            assert_eq!((backend.as_str(), algorithm.as_str()), ("a64fx", "blade"), "n={n}");
            assert_eq!(result, Ok(500), "n={n}");
        }
        assert_eq!((node.blades_in_use(), node.windows_in_use()), (0, 0), "n={n}: freed after the job");
    }
}

#[test]
fn communicators_across_cmgs_use_a_blade_per_cmg_and_leaders_in_software() {
    let node = node();
    let info = NodeInfo::read(node.sysfs()).unwrap();
    // 13 ranks as 7 + 6 over two CMGs; 48 over all four (oversubscribed: the waits park).
    let split13: Vec<usize> = (0..7).chain(12..18).collect();
    for (cpus, iterations) in [(split13, 300), (info.compact_cpus(48).unwrap(), 100)] {
        let n = cpus.len();
        for (backend, algorithm, result) in stress_on(&node, cpus, iterations) {
            assert_eq!(backend, "a64fx", "n={n}");
            assert!(algorithm.starts_with("blades x"), "n={n}: {algorithm}");
            assert_eq!(result, Ok(iterations), "n={n}");
        }
    }
    assert_eq!((node.blades_in_use(), node.windows_in_use()), (0, 0));
}

#[test]
fn split_and_dup_communicators_get_their_own_blades() {
    let node = node();
    let out = Job::new(8)
        .pin_cpus((0..8).collect())
        .params(params(&node))
        .run(|w| {
            let half = w.split(w.rank() % 2, 0).unwrap().unwrap();
            let dup = w.dup().unwrap();
            let opts = StressOptions { iterations: 200, ..Default::default() };
            let r = (stress(&half, &opts).unwrap(), stress(&dup, &opts).unwrap(), stress(&w, &opts).unwrap());
            (half.backend().to_string(), dup.backend().to_string(), r)
        })
        .unwrap();
    for (half, dup, r) in out {
        assert_eq!((half.as_str(), dup.as_str()), ("a64fx", "a64fx"));
        assert_eq!(r, (200, 200, 200));
    }
}

fn a64fx_outcome(c: &Communicator) -> String {
    c.selection().candidates.iter().find(|k| k.name == "a64fx").map(|k| k.outcome.to_string()).unwrap_or_default()
}

#[test]
fn the_seventh_blade_of_a_cmg_declines_and_falls_back() {
    let node = node();
    // The world takes one blade of CMG 0; six pairs want six more: one pair finds none.
    let out = Job::new(12)
        .pin_cpus((0..12).collect())
        .params(params(&node))
        .run(|w| {
            let pair = w.split(w.rank() / 2, 0).unwrap().unwrap();
            let opts = StressOptions { iterations: 200, ..Default::default() };
            let ok = stress(&pair, &opts).unwrap();
            w.barrier().unwrap();
            (w.backend().to_string(), pair.backend().to_string(), a64fx_outcome(&pair), ok)
        })
        .unwrap();
    let fell_back: Vec<_> = out.iter().filter(|o| o.1 != "a64fx").collect();
    assert!(out.iter().all(|o| o.0 == "a64fx" && o.3 == 200), "{out:?}");
    assert_eq!(fell_back.len(), 2, "exactly one pair falls back: {out:?}");
    assert!(fell_back.iter().all(|o| o.2.contains("every barrier blade of CMG 0 is in use")), "{fell_back:?}");
    assert_eq!((node.blades_in_use(), node.windows_in_use()), (0, 0));
}

#[test]
fn the_fifth_window_of_a_pe_declines_and_falls_back() {
    let node = node();
    let out = Job::new(2)
        .pin_cpus(vec![3, 4])
        .params(params(&node))
        .run(|w| {
            // The world and three dups take the PEs' four windows; the fourth dup finds none.
            let dups: Vec<Communicator> = (0..4).map(|_| w.dup().unwrap()).collect();
            for d in &dups {
                d.barrier().unwrap();
            }
            dups.iter().map(|d| (d.backend().to_string(), a64fx_outcome(d))).collect::<Vec<_>>()
        })
        .unwrap();
    for rank in out {
        assert!(rank[..3].iter().all(|d| d.0 == "a64fx"), "{rank:?}");
        assert_ne!(rank[3].0, "a64fx", "{rank:?}");
        assert!(rank[3].1.contains("has no free barrier window"), "{rank:?}");
    }
    assert_eq!((node.blades_in_use(), node.windows_in_use()), (0, 0));
}

#[test]
fn unbound_threads_and_shared_pes_decline_with_the_reason() {
    let node = node();
    let unbound = Job::new(2).params(forced(&node)).run(|_| ()).unwrap_err().to_string();
    assert!(unbound.contains("not bound to one CPU"), "{unbound}");
    let shared = Job::new(2).pin_cpus(vec![5, 5]).params(forced(&node)).run(|_| ()).unwrap_err().to_string();
    assert!(shared.contains("both on PE 5 of CMG 0"), "{shared}");
    let lonely = Job::new(3).pin_cpus(vec![0, 1, 12]).params(forced(&node)).run(|_| ()).unwrap_err().to_string();
    assert!(lonely.contains("only rank on CMG 1"), "{lonely}");
    // Automatic selection falls back instead.
    let auto = Job::new(3).pin_cpus(vec![0, 1, 12]).params(params(&node)).run(|w| w.backend().to_string()).unwrap();
    assert!(auto.iter().all(|b| b != "a64fx"), "{auto:?}");
    assert_eq!((node.blades_in_use(), node.windows_in_use()), (0, 0));
}

#[test]
fn process_ranks_decline_with_the_reason() {
    let node = node();
    let mut env: Vec<(String, String)> = node.env();
    env.push(("BARRIER_BACKEND".into(), "a64fx".into()));
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let forced = common::run_example(2, "correctness", &["100"], &env_ref);
    assert!(!forced.success(), "forced a64fx on process ranks must fail");
    let text = forced.stderr.join("\n");
    assert!(text.contains("separate processes") && text.contains("belongs to the process"), "{text}");
    // Automatic selection falls back to software, which passes.
    let auto = common::run_example(2, "correctness", &["100"], &env_ref[..2]);
    assert!(auto.success(), "{:?} {:?}", auto.stdout, auto.stderr);
}

/// The child half of `a_dead_owners_blades_and_windows_are_freed`: does nothing unless started
/// by it.
#[test]
fn child_holds_a_blade_and_dies() {
    let (Ok(path), Ok(sysfs)) = (std::env::var("A64FX_CHILD_DEVICE"), std::env::var("A64FX_CHILD_SYSFS")) else {
        return;
    };
    let p = Params::defaults_only()
        .set("BARRIER_BACKEND", "a64fx")
        .set(barrier::backends::a64fx::DEVICE_PATH, path)
        .set(barrier::backends::a64fx::SYSFS, sysfs);
    Job::new(2)
        .pin_cpus(vec![14, 15])
        .params(p.clone())
        .run(|w| {
            w.barrier().unwrap();
            w.barrier().unwrap();
            let held = node_info(&p).unwrap();
            if w.rank() == 0 {
                println!("HOLDING {} {}", held.cmgs[1].used_blades, held.free_windows(1));
            }
            w.barrier().unwrap();
            if w.rank() == 0 {
                // SAFETY: _exit ends the process at once: nothing is released in an orderly way.
                unsafe { libc::_exit(0) };
            }
            std::thread::sleep(std::time::Duration::from_secs(30));
        })
        .unwrap();
}

#[test]
fn a_dead_owners_blades_and_windows_are_freed() {
    let node = node();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holds_a_blade_and_dies", "--nocapture", "--test-threads=1"])
        .env("A64FX_CHILD_DEVICE", node.path())
        .env("A64FX_CHILD_SYSFS", node.sysfs())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // While alive the child held blade 0 of CMG 1 and one window on each of its two PEs.
    assert!(stdout.contains("HOLDING 1 46"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let freed = || {
        let info = NodeInfo::read(node.sysfs()).unwrap();
        (node.blades_in_use(), node.windows_in_use(), info.free_blades(1), info.free_windows(1)) == (0, 0, 6, 48)
    };
    while !freed() {
        assert!(std::time::Instant::now() < deadline, "the dead child's blade and windows were not freed");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn the_sysfs_tree_reads_back_in_the_real_layout() {
    let node = node();
    let info = NodeInfo::read(node.sysfs()).unwrap();
    assert_eq!((info.cmgs.len(), info.blades_per_cmg, info.windows_per_pe, info.max_pe), (4, 6, 4, 13));
    assert_eq!(info.cmgs[1].pes[0], (12, 0));
    assert_eq!(info.compact_cpus(14).unwrap()[12..], [12, 13]);
    assert!(info.compact_cpus(49).is_none());
    assert_eq!(std::fs::read_to_string(node.sysfs().join("hwinfo")).unwrap(), "4 6 4 13\n");
    let out = Job::new(3)
        .pin_cpus(vec![24, 25, 30])
        .params(forced(&node))
        .run(|w| {
            w.barrier().unwrap();
            let seen = NodeInfo::read(node.sysfs()).unwrap();
            w.barrier().unwrap();
            (seen.free_blades(2), seen.free_windows(2), seen.cmgs[2].used_windows[6])
        })
        .unwrap();
    assert!(out.iter().all(|&(b, w, pe30)| b == 5 && w == 45 && pe30 == (30, 1)), "{out:?}");
    let mask = std::fs::read_to_string(node.sysfs().join("CMG2/init_sync_bb0")).unwrap();
    assert_eq!(mask, "0000\n0000\n", "freed when the job ended");
}

#[test]
fn a_communicator_dropped_on_another_thread_is_released_when_the_device_closes() {
    let node = node();
    let dups = Job::new(2)
        .pin_cpus(vec![6, 7])
        .params(forced(&node))
        .run(|w| {
            let dup = w.dup().unwrap();
            dup.barrier().unwrap();
            dup
        })
        .unwrap();
    // The worlds were dropped on their own threads; the dups live on, moved out of them.
    assert_eq!((node.blades_in_use(), node.windows_in_use()), (1, 2));
    // Dropped on this thread, bound to neither PE: BW_UNASSIGN would act on the wrong PE, so
    // nothing is disconnected; closing the device (the last communicator) hands the blade and
    // windows back, as the driver does when a process closes it.
    drop(dups);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while (node.blades_in_use(), node.windows_in_use()) != (0, 0) {
        assert!(std::time::Instant::now() < deadline, "not released after the device closed");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn hybrid_processes_each_get_a_cmg_under_the_launcher() {
    let _machine = common::one_job_at_a_time();
    let mut spec = barrier_launch::JobSpec::new(2, common::example("hybrid"));
    spec.args = vec!["12".into(), "300".into()];
    spec.emulate_a64fx = Some(Layout::A64FX);
    spec.env.push(("BARRIER_TIMEOUT".into(), "60s".into()));
    spec.capture_stdout = true;
    let report = barrier_launch::launch(&spec).unwrap();
    assert!(report.success(), "{:?}", report.stdout);
    for (rank, cpus) in [(0, "0-11"), (1, "12-23")] {
        let line = &report.stdout[rank];
        assert!(line.contains(&format!("on CPUs {cpus} passed 300 barriers on a64fx (blade)")), "{line}");
    }
}

/// Issue 49 item 4: a program's own threads, bound one per PE of a CMG, form a group
/// (`threads::Group`) whose barrier is the A64FX hardware barrier, chosen by the selector and
/// checked barrier by barrier; unbound threads get the software barrier and the selection says
/// why. Blades and windows are released when the members' communicators go.
#[test]
fn a_group_of_the_programs_own_threads_gets_the_hardware_barrier() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let node = node();
    let info = NodeInfo::read(node.sysfs()).unwrap();
    for n in [2, 5, 12] {
        let cpus = info.compact_cpus(n).unwrap();
        let group = barrier::threads::Group::with_params(n, params(&node)).unwrap();
        let arrived = AtomicU64::new(0);
        let outcomes: Vec<(String, String)> = std::thread::scope(|s| {
            let handles: Vec<_> = cpus
                .iter()
                .map(|&cpu| {
                    let (group, arrived) = (&group, &arrived);
                    s.spawn(move || {
                        barrier::sys::bind_thread_to_cpu(cpu).unwrap();
                        let comm = group.join().unwrap();
                        for k in 1..=300u64 {
                            arrived.fetch_add(1, Ordering::AcqRel);
                            comm.barrier().unwrap();
                            // Every member arrived k times before anyone left barrier k.
                            let seen = arrived.load(Ordering::Acquire);
                            assert!(seen >= k * n as u64, "left barrier {k} early: {seen} arrivals of {n} members");
                            comm.barrier().unwrap();
                        }
                        (comm.backend().to_string(), comm.algorithm())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(outcomes.iter().all(|(b, a)| b == "a64fx" && a == "blade"), "n={n}: {outcomes:?}");
        assert_eq!((node.blades_in_use(), node.windows_in_use()), (0, 0), "n={n}: released");
    }
    // Unbound threads: software, and the selection says why.
    let group = barrier::threads::Group::with_params(3, params(&node)).unwrap();
    let why: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let comm = group.join().unwrap();
                    comm.barrier().unwrap();
                    (comm.backend().to_string(), a64fx_outcome(&comm))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(why.iter().all(|(b, o)| b != "a64fx" && o.contains("not bound to one CPU")), "{why:?}");
    // A join past the group's size fails with a reason.
    let full = barrier::threads::Group::with_params(1, params(&node)).unwrap();
    let _only = full.join().unwrap();
    assert!(full.join().unwrap_err().to_string().contains("join once per thread"));
}

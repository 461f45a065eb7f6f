//! The communicator's behaviour through the public API, in thread jobs: the world, odd sizes,
//! splits, requests, timeouts, ranks that leave or panic (moved out of `lib.rs`).
#![cfg(not(loom))]

use barrier::*;

fn job(n: usize) -> threads::Job {
    threads::Job::new(n).params(Params::defaults_only().set("BARRIER_TIMEOUT", "20s"))
}

#[test]
fn singleton_world_works_without_launcher() {
    let u = init_with(Params::defaults_only()).unwrap();
    let w = u.world();
    assert_eq!((w.rank(), w.size()), (0, 1));
    for _ in 0..10 {
        w.barrier().unwrap();
    }
    assert_eq!(w.backend(), "dissemination");
}

#[test]
fn every_algorithm_completes_on_odd_sizes() {
    for algo in ["central", "dissemination", "tournament", "tree"] {
        for n in [1, 2, 3, 5] {
            let p = Params::defaults_only().set("BARRIER_SW_ALGORITHM", algo).set("BARRIER_TIMEOUT", "20s");
            let out = threads::Job::new(n)
                .params(p)
                .run(|w| {
                    for _ in 0..200 {
                        w.barrier().unwrap();
                    }
                    (w.algorithm(), w.epoch())
                })
                .unwrap();
            assert!(out.iter().all(|(a, e)| a.starts_with(algo) && *e == 200), "{algo} n={n}: {out:?}");
        }
    }
}

#[test]
fn timeout_names_the_missing_rank() {
    let p = Params::defaults_only().set("BARRIER_TIMEOUT", "200ms");
    let out = threads::Job::new(3)
        .params(p)
        .run(|w| {
            if w.rank() == 2 {
                // Alive but absent: it arrives only after the others have given up.
                std::thread::sleep(std::time::Duration::from_millis(800));
                Ok(())
            } else {
                w.barrier()
            }
        })
        .unwrap();
    for r in &out[..2] {
        match r {
            Err(Error::Timeout { missing, missing_world, .. }) => {
                assert_eq!((missing, missing_world), (&vec![2], &vec![2]))
            }
            other => panic!("expected a timeout naming rank 2, got {other:?}"),
        }
    }
    let msg = out[0].as_ref().unwrap_err().to_string();
    assert!(msg.contains("world ranks [2]") && msg.contains("raise Params::set(\"BARRIER_TIMEOUT\", ..)"), "{msg}");
}

/// Issue 41 item 3: a setting given in code is named the way it was given, never as the
/// environment variable (`Params::set_as` is what a builder such as barrier-mpi's
/// `FastBarrierSettings` uses).
#[test]
fn errors_name_settings_the_way_they_were_given() {
    let given = |name: &str, value: &str| {
        let method = format!("Builder::{}", name.trim_start_matches("BARRIER_").to_ascii_lowercase());
        Params::defaults_only().set_as(name, value, method)
    };
    let no_variable = |msg: &str| {
        assert!(!msg.contains("BARRIER_TIMEOUT") && !msg.contains("BARRIER_BACKEND"), "names a variable: {msg}")
    };

    let out = threads::Job::new(2)
        .params(given("BARRIER_TIMEOUT", "200ms"))
        .run(|w| {
            if w.rank() == 1 {
                std::thread::sleep(std::time::Duration::from_millis(800));
                Ok(())
            } else {
                w.barrier()
            }
        })
        .unwrap();
    let msg = out[0].as_ref().unwrap_err().to_string();
    assert!(msg.contains("or raise Builder::timeout"), "{msg}");
    no_variable(&msg);

    let msg = threads::Job::new(2).params(given("BARRIER_TIMEOUT", "soon")).run(|_| ()).unwrap_err().to_string();
    assert!(msg.contains("\"soon\" for Builder::timeout"), "{msg}");
    no_variable(&msg);

    let msg = threads::Job::new(2).params(given("BARRIER_BACKEND", "nonesuch")).run(|_| ()).unwrap_err().to_string();
    assert!(msg.contains("\"nonesuch\" in Builder::backend"), "{msg}");
    no_variable(&msg);

    let p = given("BARRIER_BACKEND", "dissemination").set("BARRIER_DISSEMINATION_MIN_COMM_SIZE", "4");
    let msg = threads::Job::new(2).params(p).run(|_| ()).unwrap_err().to_string();
    assert!(msg.contains("(given in Builder::backend)"), "{msg}");
    no_variable(&msg);

    let outcomes = threads::Job::new(2)
        .params(given("BARRIER_BACKEND", "dissemination"))
        .run(|w| w.selection().candidates.iter().map(|c| c.outcome.to_string()).collect::<Vec<_>>())
        .unwrap();
    let not_listed: Vec<&String> = outcomes[0].iter().filter(|o| o.starts_with("not listed")).collect();
    assert!(
        !not_listed.is_empty() && not_listed.iter().all(|o| *o == "not listed in Builder::backend"),
        "{outcomes:?}"
    );

    // From the environment (or unset) a setting is its variable: how to change it.
    let p = Params::defaults_only();
    assert_eq!(p.source("BARRIER_TIMEOUT"), "BARRIER_TIMEOUT");
    // A value derived from the user's keeps its source.
    let p = given("BARRIER_BACKEND", "a,mpi").derive("BARRIER_BACKEND", "a");
    assert_eq!(
        (p.get("BARRIER_BACKEND").unwrap().as_str(), p.source("BARRIER_BACKEND").as_str()),
        ("a", "Builder::backend")
    );
    assert_eq!(p.set("BARRIER_BACKEND", "b").source("BARRIER_BACKEND"), "Params::set(\"BARRIER_BACKEND\", ..)");
}

#[test]
fn a_rank_that_returns_early_is_named_by_the_ranks_waiting_for_it() {
    // No timeout: without the departure record the others would wait for ever.
    let start = std::time::Instant::now();
    let out = threads::Job::new(3)
        .params(Params::defaults_only())
        .run(|w| {
            w.barrier()?;
            if w.rank() == 2 {
                return Ok(());
            }
            w.barrier()
        })
        .unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
    for r in &out[..2] {
        match r {
            Err(e @ Error::RankLeft { rank: 2, world_rank: 2, .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("after barrier 1") && msg.contains("barrier 2"), "{msg}");
            }
            other => panic!("expected rank 2 to be named as gone, got {other:?}"),
        }
    }
}

#[test]
fn a_rank_that_panicked_is_named_as_having_panicked() {
    let out = threads::Job::new(3)
        .params(Params::defaults_only())
        .run(|w| {
            let sub = w.split(0u32, w.rank() as u32)?.expect("a color");
            sub.barrier()?;
            if w.rank() == 2 {
                // The communicator is dropped while the thread unwinds; the rank goes on.
                let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                    let _held = sub;
                    panic!("rank 2 panics on purpose");
                }));
                assert!(unwound.is_err());
                return Ok(());
            }
            sub.barrier()
        })
        .unwrap();
    for r in &out[..2] {
        match r {
            Err(e @ Error::RankLeft { rank: 2, .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("panicked and left the communicator after barrier 1"), "{msg}");
            }
            other => panic!("expected rank 2 to be named as having panicked, got {other:?}"),
        }
    }
    assert!(out[2].is_ok());
}

#[test]
fn a_polled_request_times_out_naming_the_missing_rank() {
    let p = Params::defaults_only().set("BARRIER_TIMEOUT", "200ms");
    let out = threads::Job::new(2)
        .params(p)
        .run(|w| {
            if w.rank() == 1 {
                std::thread::sleep(std::time::Duration::from_millis(800));
                return Ok(true);
            }
            let mut req = w.ibarrier()?;
            loop {
                if req.test()? {
                    return Ok(true);
                }
                std::thread::yield_now();
            }
        })
        .unwrap();
    match &out[0] {
        Err(Error::Timeout { missing, .. }) => assert_eq!(missing, &vec![1]),
        other => panic!("expected a timeout naming rank 1, got {other:?}"),
    }
}

/// `test()` never blocks, under either wait policy (under `park` it yields the core once per
/// incomplete call, issue 41 item 1: if it waited, rank 0 would never store the flag the others
/// wait for, and the job would hang).
#[test]
fn ibarrier_completes_only_when_everyone_arrived() {
    for policy in ["spin", "park"] {
        let p = Params::defaults_only().set("BARRIER_TIMEOUT", "20s").set("BARRIER_WAIT_POLICY", policy);
        let out = threads::Job::new(3)
            .params(p)
            .run(|w| {
                let win = w.shared_window(1).unwrap();
                let go = &win.words()[0];
                if w.rank() == 0 {
                    let mut req = w.ibarrier().unwrap();
                    // Ranks 1 and 2 arrive only after rank 0 stores 1, so it cannot be complete
                    // (`poll` is `test` without the yield).
                    for _ in 0..100 {
                        assert!(!req.test().unwrap());
                        assert!(!req.poll().unwrap());
                    }
                    go.store(1, std::sync::atomic::Ordering::SeqCst);
                    req.wait().unwrap();
                } else {
                    while go.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                        std::thread::yield_now();
                    }
                    let mut req = w.ibarrier().unwrap();
                    while !req.poll().unwrap() {
                        std::thread::yield_now();
                    }
                }
                w.barrier().unwrap();
                (w.epoch(), w.wait_policy())
            })
            .unwrap();
        let want = if policy == "park" { barrier::wait::WaitPolicy::Park } else { barrier::wait::WaitPolicy::Spin };
        assert_eq!(out, vec![(2, want); 3], "{policy}");
    }
}

#[test]
fn forced_unknown_backend_is_a_clear_error() {
    let p = Params::defaults_only().set("BARRIER_BACKEND", "nonesuch");
    let err = threads::Job::new(2).params(p).run(|_| ()).unwrap_err().to_string();
    assert!(err.contains("nonesuch") && err.contains("dissemination"), "{err}");
}

#[test]
fn disabled_only_backend_fails_with_reasons() {
    let p = Params::defaults_only().set("BARRIER_DISSEMINATION_DISABLE", "1");
    let err = threads::Job::new(2).params(p).run(|_| ()).unwrap_err().to_string();
    assert!(err.contains("disabled"), "{err}");
    let p =
        Params::defaults_only().set("BARRIER_BACKEND", "dissemination").set("BARRIER_DISSEMINATION_MIN_COMM_SIZE", "4");
    let err = threads::Job::new(2).params(p).run(|_| ()).unwrap_err().to_string();
    assert!(err.contains("MIN_COMM_SIZE=4"), "{err}");
}

#[test]
fn rank0_algorithm_wins_agreement() {
    // Only rank 0's value matters: run with a valid value and check every rank agrees.
    let p = Params::defaults_only().set("BARRIER_SW_ALGORITHM", "tree").set("BARRIER_TREE_ARITY", "2");
    let out = threads::Job::new(5).params(p).run(|w| w.algorithm()).unwrap();
    assert!(out.iter().all(|a| a == "tree"));
}

#[test]
fn panicking_rank_aborts_the_others() {
    let r = std::panic::catch_unwind(|| {
        job(3).run(|w| {
            if w.rank() == 1 {
                panic!("rank 1 fails on purpose");
            }
            w.barrier()
        })
    });
    assert!(r.is_err(), "the panic must reach the caller instead of hanging");
}

#[test]
fn node_topology_follows_blocks() {
    let out = threads::Job::new(6)
        .nodes(2)
        .params(Params::defaults_only())
        .run(|w| (w.node(), w.local_rank(), w.local_size(), w.num_nodes()))
        .unwrap();
    assert_eq!(out, vec![(0, 0, 3, 2), (0, 1, 3, 2), (0, 2, 3, 2), (1, 0, 3, 2), (1, 1, 3, 2), (1, 2, 3, 2)]);
}

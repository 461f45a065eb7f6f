//! The correctness suite with ranks as threads, plus property tests.

use barrier::{threads::Job, Color, Params};
use barrier_suite::{stress, StressOptions};
use proptest::prelude::*;

fn params(algo: &str) -> Params {
    Params::defaults_only().set("BARRIER_SW_ALGORITHM", algo).set("BARRIER_TIMEOUT", "60s")
}

#[test]
fn every_algorithm_is_correct_at_odd_sizes_as_threads() {
    for algo in ["auto", "central", "dissemination", "tournament", "tree"] {
        for n in [1, 2, 3, 5, 8, 13] {
            let opts = StressOptions { iterations: 1500, seed: n as u64, ..Default::default() };
            let out = Job::new(n).params(params(algo)).run(|w| stress(&w, &opts).map_err(|e| e.to_string())).unwrap();
            for r in out {
                assert_eq!(r, Ok(1500), "{algo} at {n} threads");
            }
        }
    }
}

#[test]
fn split_groups_run_concurrently_and_world_still_works() {
    let out = Job::new(8)
        .params(params("auto"))
        .run(|w| {
            let sub = w.split(w.rank() as u32 % 3, -(w.rank() as i32)).unwrap().unwrap();
            // Keys are negated: ranks are ordered by descending world rank within each color.
            let expected_size = (0..8).filter(|r| r % 3 == w.rank() % 3).count();
            assert_eq!(sub.size(), expected_size);
            let opts = StressOptions { iterations: 600, ..Default::default() };
            stress(&sub, &opts).unwrap();
            stress(&w, &StressOptions { iterations: 200, ..opts }).unwrap();
            let dup = sub.dup().unwrap();
            stress(&dup, &StressOptions { iterations: 200, ..opts }).unwrap();
            (sub.rank(), sub.size())
        })
        .unwrap();
    // Rank 6 is the highest world rank of color 0, so it is rank 0 there.
    assert_eq!(out[6], (0, 3));
    assert_eq!(out[0], (2, 3));
}

#[test]
fn undefined_color_gets_no_communicator() {
    let out = Job::new(4)
        .params(params("auto"))
        .run(|w| {
            let color = if w.rank() == 1 { Color::Undefined } else { Color::Value(7) };
            let sub = w.split(color, 0).unwrap();
            if let Some(s) = &sub {
                s.barrier().unwrap();
            }
            sub.map(|s| s.size())
        })
        .unwrap();
    assert_eq!(out, vec![Some(3), None, Some(3), Some(3)]);
}

#[test]
fn many_communicators_are_independent() {
    let out = Job::new(3)
        .params(params("auto"))
        .run(|w| {
            let comms: Vec<_> = (0..20).map(|_| w.dup().unwrap()).collect();
            for (i, c) in comms.iter().enumerate() {
                for _ in 0..=i {
                    c.barrier().unwrap();
                }
            }
            comms.iter().map(|c| c.epoch()).sum::<u64>()
        })
        .unwrap();
    assert_eq!(out, vec![210; 3]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_sizes_delays_and_algorithms_never_release_early(
        n in 1usize..=9,
        algo in prop::sample::select(vec!["central", "dissemination", "tournament", "tree"]),
        arity in 2usize..=5,
        iterations in 20u64..300,
        seed in any::<u64>(),
        spin_one_in in 1u64..16,
        split_phase in any::<bool>(),
        policy in prop::sample::select(vec!["spin", "park"]),
    ) {
        let p = params(algo).set("BARRIER_TREE_ARITY", arity.to_string()).set("BARRIER_WAIT_POLICY", policy);
        let opts = StressOptions { iterations, seed, spin_one_in, sleep_one_in: 64, split_phase, die_before: None };
        let out = Job::new(n).params(p).run(|w| stress(&w, &opts).map_err(|e| e.to_string())).unwrap();
        for r in out {
            prop_assert_eq!(r, Ok(iterations));
        }
    }
}

/// The flat algorithm `auto` picks follows the rank count where ranks spin (a machine with a
/// core per rank, faked here with `BARRIER_WAIT_POLICY=spin`), and is central where they park;
/// every choice runs correct barriers.
#[test]
fn the_automatic_flat_algorithm_follows_the_rank_count() {
    let from = barrier::algo::flag::GATHER_FROM;
    let cases = [
        (4, "spin", "dissemination"),
        (from - 1, "spin", "dissemination"),
        (from, "spin", "gather"),
        (13, "spin", "gather"),
        (4, "park", "central"),
    ];
    for (n, policy, want) in cases {
        let params = barrier::Params::defaults_only()
            .set("BARRIER_BACKEND", "dissemination")
            .set("BARRIER_WAIT_POLICY", policy)
            .set("BARRIER_TIMEOUT", "60s");
        let out = barrier::threads::Job::new(n)
            .params(params)
            .run(|w| {
                let opts = barrier_suite::StressOptions { iterations: 50, seed: n as u64, ..Default::default() };
                barrier_suite::stress(&w, &opts).map_err(|e| e.to_string())?;
                Ok::<_, String>(w.algorithm())
            })
            .unwrap();
        for r in out {
            let algorithm = r.unwrap();
            assert!(algorithm.starts_with(want), "{n} ranks, {policy}: {algorithm}");
        }
    }
}

//! `barrier::sync`: the drop-in for `std::sync::Barrier` and the thread team, tested for
//! behaviour: nobody leaves early, one leader per generation, threads that change between
//! generations, the team's departure error, timeout and stall report, rayon's broadcast.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use barrier::sync::{Barrier, Member, Team};
use barrier::{Error, WaitPolicy};

const SIZES: [usize; 6] = [1, 2, 3, 5, 8, 13];

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn the_drop_in_is_send_and_sync_and_a_member_is_send() {
    assert_send_sync::<Barrier>();
    fn send<T: Send>() {}
    send::<Member>();
}

/// A pseudo-random pause now and then, so arrivals interleave differently every run.
fn jitter(seed: &mut u64) {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    if *seed >> 61 == 0 {
        std::thread::sleep(Duration::from_micros(*seed >> 52 & 0x1ff));
    } else if *seed >> 60 == 1 {
        std::thread::yield_now();
    }
}

/// The same n threads every generation: after generation g's wait, all n arrived at it; one
/// leader per generation. Both wait policies.
#[test]
fn no_thread_leaves_before_all_have_arrived_and_one_leads_each_generation() {
    const GENERATIONS: usize = 150;
    for policy in [WaitPolicy::Spin, WaitPolicy::Park] {
        for n in SIZES {
            let barrier = Barrier::with_policy(n, policy);
            let arrived: Vec<AtomicUsize> = (0..GENERATIONS).map(|_| AtomicUsize::new(0)).collect();
            let leaders: Vec<AtomicUsize> = (0..GENERATIONS).map(|_| AtomicUsize::new(0)).collect();
            std::thread::scope(|s| {
                for t in 0..n {
                    let (barrier, arrived, leaders) = (&barrier, &arrived, &leaders);
                    s.spawn(move || {
                        let mut seed = t as u64 + 1;
                        for g in 0..GENERATIONS {
                            jitter(&mut seed);
                            arrived[g].fetch_add(1, Ordering::Relaxed);
                            if barrier.wait().is_leader() {
                                leaders[g].fetch_add(1, Ordering::Relaxed);
                            }
                            assert_eq!(arrived[g].load(Ordering::Relaxed), n, "{policy}: left generation {g} early");
                        }
                    });
                }
            });
            assert!(leaders.iter().all(|l| l.load(Ordering::Relaxed) == 1), "{policy} n={n}: one leader each");
        }
    }
}

/// std's contract: any n threads form a generation, and a thread may be in one generation
/// and not the next. Every round spawns 2n fresh threads that wait once each at one barrier of
/// n (which n form each generation is up to the scheduler): no thread ever leaves while fewer
/// than n arrivals of its generation exist (departures never exceed n times the generations the
/// arrivals can have completed), and the leaders are one per generation.
#[test]
fn threads_may_change_between_generations() {
    const ROUNDS: usize = 25;
    for n in SIZES {
        let barrier = Barrier::with_policy(n, WaitPolicy::Park);
        let (arrivals, departures, leaders) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        for round in 0..ROUNDS {
            std::thread::scope(|s| {
                for t in 0..2 * n {
                    let (barrier, arrivals, departures, leaders) = (&barrier, &arrivals, &departures, &leaders);
                    s.spawn(move || {
                        let mut seed = (977 * t + round) as u64 + 3;
                        jitter(&mut seed);
                        arrivals.fetch_add(1, Ordering::SeqCst);
                        if barrier.wait().is_leader() {
                            leaders.fetch_add(1, Ordering::Relaxed);
                        }
                        // (In this order: every departure counted so far came from a generation
                        // whose arrivals this load sees.)
                        let d = departures.fetch_add(1, Ordering::SeqCst) + 1;
                        let a = arrivals.load(Ordering::SeqCst);
                        assert!(d <= n * (a / n), "n={n}: {d} departures with only {a} arrivals: one left early");
                    });
                }
            });
        }
        assert_eq!(leaders.load(Ordering::Relaxed), 2 * ROUNDS);
    }
}

#[test]
fn zero_and_one_never_wait_and_always_lead_as_std_does() {
    for n in [0, 1] {
        let ours = Barrier::new(n);
        let std = std::sync::Barrier::new(n);
        for _ in 0..3 {
            assert!(ours.wait().is_leader());
            assert!(std.wait().is_leader());
        }
    }
    // Debug reads as std's.
    assert_eq!(format!("{:?}", Barrier::new(1).wait()), format!("{:?}", std::sync::Barrier::new(1).wait()));
}

/// Threads outnumbering cores: `auto` parks (no spin forever), and it completes.
#[test]
fn more_threads_than_cores_park_and_complete() {
    let n = 4 * barrier::sys::available_cores() + 1;
    let barrier = Barrier::new(n);
    if std::env::var_os("BARRIER_WAIT_POLICY").is_none() {
        assert!(format!("{barrier:?}").contains("policy: Park"), "{barrier:?}");
    }
    std::thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| {
                for _ in 0..50 {
                    barrier.wait();
                }
            });
        }
    });
}

#[test]
fn a_team_releases_nobody_early_at_odd_sizes() {
    const BARRIERS: usize = 200;
    // Both forms on any machine: the rounds (spin) and, past two members, the central barrier
    // (park).
    for (policy, n) in [WaitPolicy::Spin, WaitPolicy::Park].into_iter().flat_map(|p| SIZES.map(|n| (p, n))) {
        let arrived: Vec<AtomicUsize> = (0..BARRIERS).map(|_| AtomicUsize::new(0)).collect();
        let team = Team::with(n, policy, None, None);
        std::thread::scope(|s| {
            for mut member in (0..n).map(|_| team.join().unwrap()) {
                let arrived = &arrived;
                s.spawn(move || {
                    let mut seed = member.index() as u64 * 31 + 7;
                    for (b, count) in arrived.iter().enumerate() {
                        jitter(&mut seed);
                        count.fetch_add(1, Ordering::Relaxed);
                        member.wait().unwrap();
                        assert_eq!(
                            count.load(Ordering::Relaxed),
                            n,
                            "member {} left barrier {b} early",
                            member.index()
                        );
                    }
                });
            }
        });
    }
}

/// `wait_then` (issue 49 item 5): member 0 runs the work once every member has arrived and
/// nobody leaves before it returned; mixed with plain waits, at odd sizes, both policies.
#[test]
fn wait_then_runs_the_work_between_everyone_arriving_and_anyone_leaving() {
    const BARRIERS: usize = 150;
    for (policy, n) in [WaitPolicy::Spin, WaitPolicy::Park].into_iter().flat_map(|p| SIZES.map(|n| (p, n))) {
        let arrived: Vec<AtomicUsize> = (0..BARRIERS).map(|_| AtomicUsize::new(0)).collect();
        let worked: Vec<AtomicUsize> = (0..BARRIERS).map(|_| AtomicUsize::new(0)).collect();
        let team = Team::with(n, policy, None, None);
        std::thread::scope(|s| {
            for mut member in (0..n).map(|_| team.join().unwrap()) {
                let (arrived, worked) = (&arrived, &worked);
                s.spawn(move || {
                    let mut seed = member.index() as u64 * 17 + 3;
                    for b in 0..BARRIERS {
                        jitter(&mut seed);
                        arrived[b].fetch_add(1, Ordering::Relaxed);
                        if b % 3 == 2 {
                            // A plain barrier between, as a program may mix them.
                            member.wait().unwrap();
                        } else {
                            member
                                .wait_then(|| {
                                    assert_eq!(arrived[b].load(Ordering::Relaxed), n, "work ran before all arrived");
                                    std::thread::yield_now();
                                    worked[b].fetch_add(1, Ordering::Relaxed);
                                    Ok(())
                                })
                                .unwrap();
                            assert_eq!(worked[b].load(Ordering::Relaxed), 1, "left barrier {b} before the work");
                        }
                        assert_eq!(arrived[b].load(Ordering::Relaxed), n, "member {} left {b} early", member.index());
                    }
                });
            }
        });
    }
}

/// Work that fails on member 0 fails every member's barrier, and the team's later ones.
#[test]
fn failed_work_breaks_every_members_barrier() {
    let team = Team::with(3, WaitPolicy::Spin, None, None);
    let results: Vec<(usize, String, bool)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let mut member = team.join().unwrap();
                s.spawn(move || {
                    let first = member
                        .wait_then(|| Err(Error::InvalidArgument("the rank's barrier failed".into())))
                        .unwrap_err();
                    let later = matches!(member.wait(), Err(Error::TeamBroken(_)));
                    (member.index(), first.to_string(), later)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (index, first, later) in results {
        if index == 0 {
            assert!(first.contains("the rank's barrier failed"), "{first}");
        } else {
            assert!(first.contains("member 0") && first.contains("failed"), "{first}");
        }
        assert!(later, "member {index}'s later barrier must fail");
    }
}

#[test]
fn a_team_hands_out_exactly_its_members() {
    let team = Team::new(2);
    let (a, b) = (team.join().unwrap(), team.join().unwrap());
    assert_eq!((a.index(), b.index(), a.team_size()), (0, 1, 2));
    let e = team.join().unwrap_err().to_string();
    assert!(e.contains("a team of 2 threads has handed out all its members"), "{e}");
}

/// A member whose thread panics: the others' waits end with an error naming it, within a park
/// slice, never a hang; later waits say the member's team is broken.
#[test]
fn a_member_dropped_by_a_panic_ends_the_others_waits_with_its_name() {
    for policy in [WaitPolicy::Spin, WaitPolicy::Park] {
        let team = Team::with(3, policy, Some(Duration::from_secs(30)), None);
        let members: Vec<Member> = (0..3).map(|_| team.join().unwrap()).collect();
        let start = Instant::now();
        let errors: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = members
                .into_iter()
                .map(|mut m| {
                    s.spawn(move || {
                        m.wait().unwrap();
                        if m.index() == 1 {
                            panic!("member 1 fails in its work");
                        }
                        let e = m.wait().unwrap_err();
                        assert!(
                            matches!(
                                e,
                                Error::TeamMemberGone { member: 1, completed: 1, epoch: 2, panicked: true, .. }
                            ),
                            "{e}"
                        );
                        let again = m.wait().unwrap_err();
                        assert!(matches!(again, Error::TeamBroken(_)), "{again}");
                        e.to_string()
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        assert_eq!(errors.len(), 2);
        assert!(
            errors[0]
                .contains("member 1 of a team of 3 threads was dropped while its thread panicked after 1 barrier(s)"),
            "{}",
            errors[0]
        );
        assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    }
}

/// A member that never comes: the timeout names it, in the rounds (spin) and in the central
/// barrier (park, more than two members).
#[test]
fn a_team_timeout_names_the_member_waited_for() {
    for policy in [WaitPolicy::Spin, WaitPolicy::Park] {
        // (2 s: on a loaded machine the other member's thread starts and signals well within it.)
        let team = Team::with(3, policy, Some(Duration::from_secs(2)), Some(Duration::from_millis(500)));
        let [mut m0, mut m1, m2] = [team.join().unwrap(), team.join().unwrap(), team.join().unwrap()];
        // Both keep their handles until both have failed (a handle dropped first would be a
        // member gone, which the other would name instead).
        let both_failed = std::sync::Barrier::new(2);
        let (e0, e1) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                let e = m0.wait().unwrap_err();
                both_failed.wait();
                e
            });
            let b = s.spawn(|| {
                let e = m1.wait().unwrap_err();
                both_failed.wait();
                e
            });
            (a.join().unwrap(), b.join().unwrap())
        });
        for e in [e0, e1] {
            assert!(matches!(e, Error::TeamTimeout { waiting_for: 2, .. }), "{policy}: {e}");
        }
        drop(m2);
    }
}

/// rayon: a barrier among a pool's threads inside `broadcast` (rayon issue 1163's pattern,
/// with ours in place of std's).
#[test]
fn a_barrier_among_a_rayon_pools_threads_in_broadcast() {
    for threads in [1, 2, 3, 5] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let barrier = Barrier::new(threads);
        let phase = AtomicUsize::new(0);
        let seen: Vec<usize> = pool.broadcast(|_| {
            phase.fetch_add(1, Ordering::SeqCst);
            barrier.wait();
            // Every thread of the pool has done phase one before any reads it.
            let after = phase.load(Ordering::SeqCst);
            barrier.wait();
            after
        });
        assert_eq!(seen, vec![threads; threads]);
    }
}

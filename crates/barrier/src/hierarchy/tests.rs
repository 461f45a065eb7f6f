//! The roots' phase over an in-process link: threads as node roots, slots as shared counters
//! (a signal adds one, as OpenSHMEM's link does), a departure word per root.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use super::*;
use crate::error::{Error, Result};
use crate::wait::Pace;

#[derive(Debug)]
struct Board {
    /// slots[root][round]: signals received.
    slots: Vec<Vec<AtomicU64>>,
    /// departed[root]: barriers completed + 1, once it left.
    departed: Vec<AtomicU64>,
}

#[derive(Debug)]
struct MemLink {
    board: Arc<Board>,
    index: usize,
}

impl RootsLink for MemLink {
    fn signal(&self, round: usize, _epoch: u64) -> Result<()> {
        let r = self.board.slots.len();
        self.board.slots[(self.index + (1 << round)) % r][round].fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn reached(&self, round: usize, epoch: u64) -> bool {
        self.board.slots[self.index][round].load(Ordering::Acquire) >= epoch
    }

    fn progress(&self) -> Result<()> {
        Ok(())
    }

    fn departed(&self, epoch: u64) -> Option<Error> {
        self.board.departed.iter().enumerate().find_map(|(j, w)| {
            let w = w.load(Ordering::Acquire);
            (w != 0 && w - 1 < epoch).then(|| Error::RankLeft {
                rank: j,
                world_rank: j,
                during: format!("barrier {epoch}"),
                how: "left".into(),
            })
        })
    }
}

/// The implementation's barrier among the roots: std's.
#[derive(Debug)]
struct StdOwn(Arc<Barrier>);

impl OwnBarrier for StdOwn {
    fn name(&self) -> &'static str {
        "std's barrier"
    }
    fn barrier(&self) -> Result<()> {
        self.0.wait();
        Ok(())
    }
}

fn names(r: usize, index: usize) -> Names {
    Names {
        layer: "test",
        member: "rank",
        me: format!("root {index}"),
        index,
        rank: index,
        world_rank: index,
        size: r,
        roots: (0..r).map(|j| format!("the node root {j}")).collect(),
        root_ranks: (0..r).map(|j| (j, j)).collect(),
        limit: "BARRIER_TIMEOUT".into(),
        setting: "TEST_INTERNODE",
        flat: false,
    }
}

fn board(r: usize) -> Arc<Board> {
    let rounds = crate::region::rounds(r);
    Arc::new(Board {
        slots: (0..r).map(|_| (0..rounds).map(|_| AtomicU64::new(0)).collect()).collect(),
        departed: (0..r).map(|_| AtomicU64::new(0)).collect(),
    })
}

fn roots(board: &Arc<Board>, index: usize, timeout: Option<Duration>) -> Roots<MemLink> {
    let r = board.slots.len();
    let waits = RootsWaits { pace: Pace::Yield, timeout, stall: None };
    Roots::new(MemLink { board: board.clone(), index }, None, names(r, index), waits)
}

/// No root leaves a barrier before every root has arrived at it, blocking and split phase,
/// at odd root counts, with random delays.
#[test]
fn no_root_leaves_early() {
    for r in [1, 2, 3, 5, 8, 13] {
        let board = board(r);
        const BARRIERS: u64 = 60;
        let arrived: Arc<Vec<AtomicUsize>> = Arc::new((0..=BARRIERS).map(|_| AtomicUsize::new(0)).collect());
        std::thread::scope(|s| {
            for index in 0..r {
                let (board, arrived) = (board.clone(), arrived.clone());
                s.spawn(move || {
                    let me = roots(&board, index, Some(Duration::from_secs(60)));
                    let mut seed = index as u64 * 7919 + 1;
                    for e in 1..=BARRIERS {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        if seed >> 60 == 0 {
                            std::thread::sleep(Duration::from_micros(seed >> 50 & 0x3ff));
                        }
                        arrived[e as usize].fetch_add(1, Ordering::AcqRel);
                        if e % 2 == 0 {
                            me.barrier(e).unwrap();
                        } else {
                            let mut flight = Flight::new(e);
                            while !me.advance(&mut flight).unwrap() {
                                std::thread::yield_now();
                            }
                        }
                        assert_eq!(
                            arrived[e as usize].load(Ordering::Acquire),
                            r,
                            "root {index} left barrier {e} early"
                        );
                    }
                });
            }
        });
    }
}

/// A root that never comes: the others time out naming it (the sender of the round they wait in).
#[test]
fn a_timeout_names_the_root_waited_for() {
    let board = board(3);
    let errors = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for index in [0, 2] {
            let board = board.clone();
            let errors = &errors;
            s.spawn(move || {
                let me = roots(&board, index, Some(Duration::from_millis(200)));
                let e = me.barrier(1).unwrap_err();
                errors.lock().unwrap().push(e);
            });
        }
    });
    for e in errors.into_inner().unwrap() {
        match &e {
            Error::Timeout { missing_world, during, .. } => {
                assert_eq!(missing_world, &vec![1], "{e}");
                assert!(during.contains("the node root 1 never signalled"), "{e}");
            }
            other => panic!("not a timeout: {other}"),
        }
    }
}

/// The same wait where the members are every rank (a flat dissemination): the error speaks of a
/// dissemination among all ranks, not of nodes and roots.
#[test]
fn a_flat_timeout_speaks_of_ranks() {
    let board = board(2);
    let names = Names { flat: true, roots: vec!["rank 0".into(), "rank 1".into()], ..names(2, 0) };
    let waits = RootsWaits { pace: Pace::Yield, timeout: Some(Duration::from_millis(100)), stall: None };
    let me = Roots::new(MemLink { board, index: 0 }, None, names, waits);
    match me.barrier(1).unwrap_err() {
        Error::Timeout { missing_world, during, .. } => {
            assert_eq!(missing_world, vec![1]);
            assert!(during.starts_with("the dissemination among all ranks of barrier 1 (round 0): rank 1"), "{during}");
            assert!(!during.contains("node"), "{during}");
        }
        other => panic!("not a timeout: {other}"),
    }
}

/// A root that left after 2 barriers: the others fail its barrier 3 at once (no timeout set).
#[test]
fn a_departed_root_fails_the_wait_at_once() {
    let board = board(2);
    board.departed[1].store(3, Ordering::Release);
    let me = roots(&board, 0, None);
    let e = me.barrier(3).unwrap_err();
    assert!(matches!(e, Error::RankLeft { rank: 1, .. }), "{e}");
}

/// `Measure` times both ways and every root keeps root 0's verdict; both ways then run.
#[test]
fn the_timed_choice_is_root_zeros_on_every_root() {
    let r = 3;
    let board = board(r);
    let own = Arc::new(Barrier::new(r));
    let verdict = Arc::new(Mutex::new([0u64; 3]));
    let meet = Arc::new(Barrier::new(r));
    let chosen: Vec<Chosen> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..r)
            .map(|index| {
                let (board, own, verdict, meet) = (board.clone(), own.clone(), verdict.clone(), meet.clone());
                s.spawn(move || {
                    let waits = RootsWaits { pace: Pace::Yield, timeout: None, stall: None };
                    let link = MemLink { board, index };
                    let mut me = Roots::new(link, Some(Box::new(StdOwn(own))), names(r, index), waits);
                    let chosen = me
                        .choose(Choice::Measure, |words| {
                            if index == 0 {
                                *verdict.lock().unwrap() = *words;
                            }
                            meet.wait();
                            *words = *verdict.lock().unwrap();
                            Ok(())
                        })
                        .unwrap();
                    for e in 1..=20 {
                        me.barrier(e).unwrap();
                    }
                    assert_eq!(me.entered(20), 20 + 6 * 20, "the timing's barriers count");
                    chosen
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(chosen.iter().all(|c| *c == chosen[0] && c.timed.is_some()), "{chosen:?}");
}

#[test]
fn choices_and_verdicts_survive_their_words() {
    for c in [Choice::Measure, Choice::Fixed(Way::Ours), Choice::Fixed(Way::Own), Choice::OursForReports] {
        assert_eq!(Choice::from_word(c.to_word()), c);
    }
    let timed =
        Chosen { way: Way::Own, timed: Some((Duration::from_micros(3), Duration::from_micros(2))), ..Chosen::OURS };
    assert_eq!(Chosen::from_words(timed.to_words()), timed);
    let text = timed.describe("dissemination over x", "X's barrier", "S=x");
    assert!(text.starts_with("X's barrier among the node roots, the faster (2.0µs"), "{text}");
    assert_eq!(Choice::from_setting(Some(" MPI "), "mpi", false), Choice::Fixed(Way::Own));
    assert_eq!(Choice::from_setting(None, "mpi", true), Choice::OursForReports);
}

/// The node's set-up of a rank alone on its node: no exchange to make.
struct Alone(usize);

impl NodeExchange for Alone {
    fn me(&self) -> usize {
        self.0
    }
    fn name(&self, id: usize) -> String {
        format!("rank {id}")
    }
    fn share_from_node_first(&self, _words: &mut [u64; 5]) -> Result<()> {
        Ok(())
    }
    fn first_failed(&self, ok: bool) -> Result<Option<usize>> {
        Ok((!ok).then_some(self.0))
    }
}

/// Rank `index` of `r`, alone on its node across nodes: its node set up.
fn node_of_one(index: usize, r: usize) -> Node {
    let spec = NodeSpec {
        local_rank: 0,
        shape: crate::shm::JobShape { world_size: 1, nodes: 1, ranks_on_machine: r, cores: 2 },
        params: crate::params::Params::default(),
        progress: None,
        names: crate::shm::RankNames { world: vec![index], comm: vec![index], comm_size: r, hierarchical: true },
        across_nodes: true,
    };
    set_up_node(&Alone(index), spec).expect("a node of one")
}

/// Every rank alone on its node (a flat barrier is a hierarchy of such nodes): no rank leaves a
/// barrier early, blocking or split phase, with two flights outstanding at times, at odd rank
/// counts, with random delays; the flights skip the node's halves.
#[test]
fn ranks_alone_on_their_nodes_never_leave_early() {
    for r in [1, 2, 3, 5] {
        let board = board(r);
        const BARRIERS: u64 = 60;
        let arrived: Arc<Vec<AtomicUsize>> = Arc::new((0..=BARRIERS).map(|_| AtomicUsize::new(0)).collect());
        std::thread::scope(|s| {
            for index in 0..r {
                let (board, arrived) = (board.clone(), arrived.clone());
                s.spawn(move || {
                    let node = node_of_one(index, r);
                    assert!(node.alone());
                    let halves = node.halves.expect("across nodes");
                    let roots = roots(&board, index, Some(Duration::from_secs(60)));
                    let hier =
                        Hierarchy::new(halves, Some(roots), Some(node.seg), true, index, "BARRIER_TIMEOUT".into());
                    let mut seed = index as u64 * 7919 + 1;
                    let mut e = 1;
                    while e <= BARRIERS {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        if seed >> 60 == 0 {
                            std::thread::sleep(Duration::from_micros(seed >> 50 & 0x3ff));
                        }
                        arrived[e as usize].fetch_add(1, Ordering::AcqRel);
                        match e % 3 {
                            0 => hier.barrier().unwrap(),
                            1 if e < BARRIERS => {
                                // Two at once: completing the second completes the first.
                                hier.ibarrier().unwrap();
                                arrived[e as usize + 1].fetch_add(1, Ordering::AcqRel);
                                let second = hier.ibarrier().unwrap();
                                while !hier.drive(second, false).unwrap() {
                                    std::thread::yield_now();
                                }
                                e += 1;
                            }
                            _ => {
                                let flight = hier.ibarrier().unwrap();
                                while !hier.drive(flight, false).unwrap() {
                                    std::thread::yield_now();
                                }
                            }
                        }
                        for b in 1..=e {
                            assert_eq!(
                                arrived[b as usize].load(Ordering::Acquire),
                                r,
                                "rank {index} left barrier {b} early"
                            );
                        }
                        e += 1;
                    }
                    assert!(hier.is_quiet());
                });
            }
        });
    }
}

/// An in-process link with put semantics (a slot keeps the largest value sent, one sender per
/// slot) that can carry the agreement's bit as barrier-mpi's private channel does: `2 × epoch +
/// bit`.
#[derive(Debug)]
struct PutLink {
    /// board[member][round].
    board: Arc<Vec<Vec<AtomicU64>>>,
    index: usize,
    /// With agreement: the OR of this member's bit and every bit it has read.
    failed: Option<std::cell::Cell<bool>>,
}

impl RootsLink for PutLink {
    fn signal(&self, round: usize, epoch: u64) -> Result<()> {
        let n = self.board.len();
        let value = match &self.failed {
            Some(bit) => 2 * epoch + u64::from(bit.get()),
            None => epoch,
        };
        self.board[(self.index + (1 << round)) % n][round].fetch_max(value, Ordering::AcqRel);
        Ok(())
    }

    fn reached(&self, round: usize, epoch: u64) -> bool {
        let held = self.board[self.index][round].load(Ordering::Acquire);
        match &self.failed {
            Some(bit) if held >= 2 * epoch => {
                bit.set(bit.get() || held & 1 == 1);
                true
            }
            Some(_) => false,
            None => held >= epoch,
        }
    }

    fn progress(&self) -> Result<()> {
        Ok(())
    }
}

impl ahead::AgreeingLink for PutLink {
    fn any_failed(&self) -> bool {
        self.failed.as_ref().is_some_and(std::cell::Cell::get)
    }
}

fn put_board(r: usize) -> Arc<Vec<Vec<AtomicU64>>> {
    let rounds = crate::region::rounds(r);
    Arc::new((0..r).map(|_| (0..rounds).map(|_| AtomicU64::new(0)).collect()).collect())
}

/// Flights fixed in advance: every rank calls up to three before its set-up resolves (at a
/// moment of its own) and up to two more before it drives them, the first flight agrees (within
/// a blocking or a split-phase drive), and every rank then takes the same way (the hierarchy, or
/// the flat dissemination where one node's set-up failed); no rank leaves a flight early,
/// blocking or split phase, at odd rank counts, with nodes of one, two and three ranks (a node's
/// other ranks go through the node's halves, its root through the roots' phase too), with random
/// delays.
#[test]
fn flights_ahead_agree_on_one_way_and_never_leave_early() {
    use ahead::{Agreed, Ahead, Built};
    // (ranks, ranks per node, the rank whose set-up fails: its whole node's does)
    let layouts: [(usize, usize, Option<usize>); 12] = [
        (1, 1, None),
        (2, 1, None),
        (3, 1, Some(1)),
        (5, 1, None),
        (5, 1, Some(4)),
        (8, 1, Some(0)),
        (4, 2, None),
        (5, 2, None),
        (5, 2, Some(3)),
        (3, 2, Some(2)),
        (7, 3, None),
        (7, 3, Some(0)),
    ];
    for (r, k, failing) in layouts {
        let nodes = r.div_ceil(k);
        let (flat_board, roots_board) = (put_board(r), put_board(nodes));
        let node_boards: Vec<_> = (0..nodes)
            .map(|n| {
                let size = k.min(r - n * k);
                Arc::new((Barrier::new(size), Mutex::new(vec![[0u64; 5]; size])))
            })
            .collect();
        const FLIGHTS: u64 = 40;
        let arrived: Arc<Vec<AtomicUsize>> = Arc::new((0..=FLIGHTS).map(|_| AtomicUsize::new(0)).collect());
        let ways: Vec<Agreed> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..r)
                .map(|index| {
                    let (flat_board, roots_board, arrived) = (flat_board.clone(), roots_board.clone(), arrived.clone());
                    let (node, local) = (index / k, index % k);
                    let fault = failing.filter(|&f| f == index).map(|f| ("join", f));
                    let exchange = node::tests::Threads { rank: index, local, board: node_boards[node].clone(), fault };
                    s.spawn(move || {
                        let waits =
                            RootsWaits { pace: Pace::Yield, timeout: Some(Duration::from_secs(20)), stall: None };
                        let first = RootsWaits { timeout: Some(Duration::from_secs(40)), ..waits };
                        let mut flights = Ahead::<PutLink>::new(index);
                        // splitmix64, seeded by rank, rank count and node size.
                        let mut seed = (index * 131 + r * 7 + k) as u64;
                        let mut next = || {
                            seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
                            let mut z = seed;
                            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                            z ^ (z >> 31)
                        };
                        let check = |upto: u64| {
                            for b in 1..=upto {
                                let seen = arrived[b as usize].load(Ordering::Acquire);
                                assert_eq!(seen, r, "rank {index} left flight {b} early");
                            }
                        };
                        // Flights called before this rank's set-up resolves: none begins.
                        let early = next() % 4;
                        for e in 1..=early {
                            arrived[e as usize].fetch_add(1, Ordering::AcqRel);
                            assert_eq!(flights.start().unwrap(), e);
                            assert!(!flights.drive(e, false).unwrap(), "a flight began before the set-up resolved");
                        }
                        std::thread::sleep(Duration::from_micros(next() % 500));
                        let size = k.min(r - node * k);
                        let spec = NodeSpec {
                            local_rank: local,
                            shape: crate::shm::JobShape { world_size: size, nodes: 1, ranks_on_machine: r, cores: 2 },
                            // A failure on another thread must not leave this node's ranks waiting for
                            // ever in the node's halves (and the environment sets nothing here).
                            params: crate::params::Params::defaults_only().set("BARRIER_TIMEOUT", "30s"),
                            progress: None,
                            names: crate::shm::RankNames {
                                world: (node * k..node * k + size).collect(),
                                comm: (node * k..node * k + size).collect(),
                                comm_size: r,
                                hierarchical: true,
                            },
                            across_nodes: true,
                        };
                        let built = set_up_node(&exchange, spec).ok().map(|set_up| {
                            let roots = (local == 0).then(|| {
                                let link = PutLink { board: roots_board, index: node, failed: None };
                                Roots::new(link, None, names(nodes, node), waits)
                            });
                            let alone = set_up.alone();
                            assert_eq!(alone, size == 1);
                            let halves = set_up.halves.expect("across nodes");
                            let hier =
                                Hierarchy::new(halves, roots, Some(set_up.seg), alone, index, "BARRIER_TIMEOUT".into());
                            Built { hier, node: set_up.universe, detail: "the hierarchy".into() }
                        });
                        // A node's set-up fails on all its ranks or none.
                        assert_eq!(built.is_none(), failing.is_some_and(|f| f / k == node));
                        let flat_link =
                            PutLink { board: flat_board, index, failed: Some(std::cell::Cell::new(built.is_none())) };
                        let flat = Roots::new(flat_link, None, names(r, index), first);
                        flights.resolve(flat, built, waits);
                        // Flights called after the set-up resolved, before the agreement.
                        let called = early + 1 + next() % 2;
                        for e in early + 1..=called {
                            arrived[e as usize].fetch_add(1, Ordering::AcqRel);
                            assert_eq!(flights.start().unwrap(), e);
                        }
                        if next() % 2 == 0 {
                            assert!(flights.drive(called, true).unwrap());
                        } else {
                            while !flights.drive(called, false).unwrap() {
                                std::thread::yield_now();
                            }
                        }
                        check(called);
                        let way = flights.take_agreed().expect("the first flight agreed");
                        for e in called + 1..=FLIGHTS {
                            if next() % 8 == 0 {
                                std::thread::sleep(Duration::from_micros(next() % 300));
                            }
                            arrived[e as usize].fetch_add(1, Ordering::AcqRel);
                            assert_eq!(flights.start().unwrap(), e);
                            if e % 3 == 0 {
                                assert!(flights.drive(e, true).unwrap());
                            } else {
                                while !flights.drive(e, false).unwrap() {
                                    std::thread::yield_now();
                                }
                            }
                            check(e);
                        }
                        assert_eq!(flights.detail().is_some(), way == Agreed::Hierarchy);
                        way
                    })
                })
                .collect();
            runs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let want = if failing.is_some() { Agreed::Flat } else { Agreed::Hierarchy };
        assert!(ways.iter().all(|w| *w == want), "r={r}, k={k}, failing={failing:?}: {ways:?}");
    }
}

//! Model checks of the parking protocol with loom: every interleaving of a signaller and
//! parked waiters, with the futex emulated under loom (see `wait::primitive`).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p hpc-barrier --test loom --release`
//!
//! These checks can fail: with `flag.signal(1, false)` (the spin policy's signal, which skips
//! the wake-up) in place of `signal(1, true)`, loom reports
//! `deadlock; threads = [(Id(0), Blocked), (Id(1), Blocked)]` for the first test. (loom aborts
//! the process on a deadlock, so that negative control cannot live in the suite as a
//! `should_panic` test.)

#![cfg(loom)]

use barrier::wait::{Flag, Unwatched, WaitConfig, WaitPolicy};
use loom::sync::Arc;
use loom::thread;

/// Straight to the park phase: no spinning (every spin would be a branch of the model).
fn parking() -> WaitConfig {
    WaitConfig { policy: WaitPolicy::Park, spin: 0, yields: 0, timeout: None, progress: None }
}

#[test]
fn a_parked_waiter_always_sees_the_signal() {
    loom::model(|| {
        let flag = Arc::new(Flag::default());
        let waiter = {
            let flag = flag.clone();
            thread::spawn(move || parking().wait(&flag, 1, &Unwatched))
        };
        flag.signal(1, true);
        assert_eq!(waiter.join().unwrap(), Ok(()));
    });
}

/// The split form the hardware module's arrival record uses: the communicator stores the
/// epoch without waking, the module wakes later, from the same thread.
#[test]
fn a_store_without_wake_followed_by_a_wake_reaches_a_parked_waiter() {
    loom::model(|| {
        let flag = Arc::new(Flag::default());
        let waiter = {
            let flag = flag.clone();
            thread::spawn(move || parking().wait(&flag, 1, &Unwatched))
        };
        flag.signal(1, false);
        flag.wake();
        assert_eq!(waiter.join().unwrap(), Ok(()));
    });
}

#[test]
fn a_waiter_for_a_later_epoch_sleeps_through_earlier_signals_and_wakes_at_its_own() {
    loom::model(|| {
        let flag = Arc::new(Flag::default());
        let waiter = {
            let flag = flag.clone();
            thread::spawn(move || parking().wait(&flag, 2, &Unwatched))
        };
        flag.signal(1, true);
        flag.signal(2, true);
        assert_eq!(waiter.join().unwrap(), Ok(()));
        assert_eq!(flag.load(), 2);
    });
}

// The hierarchical backend's intranode phases (gather up a k-ary tree of up-slots, release
// through the node's one release flag): every interleaving of a small node, over consecutive epochs, with parking
// waits. Each rank records its arrival with a relaxed store before the barrier and, after it,
// requires every rank's record to be there: that checks both "nobody leaves before everybody
// arrived" and that the release/acquire chain up and down the tree makes earlier writes
// visible.

mod hier {
    use barrier::hier_tree::{LocalTree, TreeSlots};
    use barrier::wait::{Flag, Unwatched};
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    use super::parking;

    /// Rank `l`'s slots in a node of `tree.size` ranks; `skip_last_child`: a broken gather
    /// that does not wait for its last child (the negative control).
    fn slots(
        tree: LocalTree,
        l: usize,
        up: &[Arc<Flag>],
        release: &Arc<Flag>,
        skip_last_child: bool,
    ) -> TreeSlots<Arc<Flag>> {
        let children: Vec<usize> = tree.children(l).collect();
        let waited =
            if skip_last_child && !children.is_empty() { &children[..children.len() - 1] } else { &children[..] };
        TreeSlots {
            up: tree.parent(l).map(|_| up[l].clone()),
            children_up: waited.iter().map(|&c| up[c].clone()).collect(),
            release: release.clone(),
        }
    }

    fn rank(s: &TreeSlots<Arc<Flag>>, me: usize, arrived: &[Arc<AtomicU64>], epochs: u64) {
        for e in 1..=epochs {
            arrived[me].store(e, Ordering::Relaxed);
            let mut next = 0;
            while let Err(flag) = s.gather(&mut next, e, true) {
                parking().wait(flag, e, &Unwatched).unwrap();
            }
            // (The root would run the internode phase here; one node has none.)
            while let Err(flag) = s.release(e, true) {
                parking().wait(flag, e, &Unwatched).unwrap();
            }
            for (peer, a) in arrived.iter().enumerate() {
                let seen = a.load(Ordering::Relaxed);
                assert!(seen >= e, "rank {me} left barrier {e} before rank {peer} arrived (saw {seen})");
            }
        }
    }

    /// `preemptions`: loom's bound on forced thread switches per execution (the state space
    /// grows steeply with it; 2 finds the broken gather below at once).
    fn check(size: usize, radix: usize, epochs: u64, skip_last_child: bool, preemptions: usize) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(preemptions);
        builder.check(move || {
            let tree = LocalTree::new(size, radix);
            let up: Vec<Arc<Flag>> = (0..size).map(|_| Arc::new(Flag::default())).collect();
            let release = Arc::new(Flag::default());
            let arrived: Vec<Arc<AtomicU64>> = (0..size).map(|_| Arc::new(AtomicU64::new(0))).collect();
            let others: Vec<_> = (1..size)
                .map(|l| {
                    let s = slots(tree, l, &up, &release, skip_last_child);
                    let arrived = arrived.clone();
                    thread::spawn(move || rank(&s, l, &arrived, epochs))
                })
                .collect();
            rank(&slots(tree, 0, &up, &release, skip_last_child), 0, &arrived, epochs);
            for t in others {
                t.join().unwrap();
            }
        });
    }

    #[test]
    fn a_root_and_two_leaves_over_two_epochs() {
        check(3, 2, 2, false, 1);
    }

    #[test]
    fn a_root_and_two_leaves() {
        check(3, 2, 1, false, 2);
    }

    #[test]
    fn a_chain_of_three_levels() {
        check(3, 1, 1, false, 2);
    }

    /// The check can fail: a gather that forgets its last child lets a rank out early.
    #[test]
    #[should_panic(expected = "before rank")]
    fn a_gather_that_skips_a_child_is_caught() {
        check(3, 2, 1, true, 2);
    }
}

/// `barrier::sync::Barrier`'s hand-over between generations: two threads, two generations;
/// exactly one leader per generation, and each thread sees the other's write of a generation
/// after it (the tickets' release sequence and the released flag). With two threads no
/// generation can start before the one before it is released, so the case the `fetch_max`
/// raise exists for (a leader descheduled after its ticket while the next generation
/// completes) is not reached here: a model of four threads at a barrier of two reaches it but
/// did not finish within ten minutes. Negative control: with the first arrival as the leader
/// (`ticket % n == 0`) in place of the last, loom fails this test ("a write before the barrier
/// was lost").
#[test]
fn the_drop_in_hands_generations_over_with_one_leader_each_and_visible_writes() {
    drop_in_hand_over(WaitPolicy::Park);
}

/// The same with spinning waiters, which watch the tickets before the release flag.
#[test]
fn the_drop_in_s_spinning_waiters_see_the_tickets_and_the_writes() {
    drop_in_hand_over(WaitPolicy::Spin);
}

fn drop_in_hand_over(policy: WaitPolicy) {
    use barrier::sync::Barrier;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    // Four preemptions keep the model to seconds (unbounded it runs for over ten minutes).
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(4);
    model.check(move || {
        let barrier = Arc::new(Barrier::with_policy(2, policy));
        let data = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let leaders = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let run = |me: usize| {
            let (barrier, data, leaders) = (barrier.clone(), data.clone(), leaders.clone());
            move || {
                for generation in 0..2 {
                    data[me].store(generation + 1, Ordering::Relaxed);
                    if barrier.wait().is_leader() {
                        leaders[generation].fetch_add(1, Ordering::Relaxed);
                    }
                    assert!(data[1 - me].load(Ordering::Relaxed) > generation, "a write before the barrier was lost");
                }
            }
        };
        let other = thread::spawn(run(1));
        run(0)();
        other.join().unwrap();
        assert_eq!(leaders[0].load(Ordering::Relaxed), 1);
        assert_eq!(leaders[1].load(Ordering::Relaxed), 1);
    });
}

/// The hand-over (`wait::handover`): two ranks make three barrier calls each and become ready
/// before any one of them; in every interleaving, each call goes to the same barrier on both.
/// Negative control: with `Handover::call` not counting an undecided call in `issued`, loom
/// finds an interleaving where a call is the new barrier's on one rank and the old's on the other.
#[test]
fn the_hand_over_switches_every_rank_at_the_same_call() {
    use barrier::wait::handover::{Handover, HandoverWords, Switch};
    use loom::sync::atomic::{AtomicU8, Ordering};
    const CALLS: usize = 3;
    for ready_at in [(0, 0), (0, 2), (1, 1), (2, 0), (1, 3)] {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(move || {
            let words = Arc::new(HandoverWords::new());
            // 1: the old barrier, 2: the new one, per rank and call.
            let served = Arc::new([(); 2 * CALLS].map(|()| AtomicU8::new(0)));
            let run = |me: usize, ready: usize| {
                let (words, served) = (words.clone(), served.clone());
                move || {
                    let handover = Handover::new(&words, 2);
                    let mut new = false;
                    for call in 0..CALLS {
                        if call == ready {
                            handover.ready(call as u64);
                        }
                        if call >= ready && !new {
                            new = handover.call(call as u64) == Switch::New;
                        }
                        served[me * CALLS + call].store(if new { 2 } else { 1 }, Ordering::Relaxed);
                    }
                }
            };
            let other = thread::spawn(run(1, ready_at.1));
            run(0, ready_at.0)();
            other.join().unwrap();
            for call in 0..CALLS {
                let (a, b) = (served[call].load(Ordering::Relaxed), served[CALLS + call].load(Ordering::Relaxed));
                assert_eq!(a, b, "call {call}: rank 0 and rank 1 went to different barriers (ready at {ready_at:?})");
            }
        });
    }
}

//! The wait layer's unit tests (not under loom: `tests/loom.rs` model-checks the protocol).

use super::policy::FIRST_CHECK;
use super::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cfg(policy: WaitPolicy, timeout: Option<Duration>) -> WaitConfig {
    WaitConfig { policy, spin: 10, yields: 2, timeout, progress: None }
}

#[test]
fn parked_waiter_is_woken_by_signal() {
    for _ in 0..200 {
        let flag = Arc::new(Flag::default());
        let f2 = flag.clone();
        let t = std::thread::spawn(move || cfg(WaitPolicy::Park, None).wait(&f2, 1, &Unwatched));
        std::thread::yield_now();
        flag.signal(1, true);
        assert_eq!(t.join().unwrap(), Ok(()));
    }
}

#[test]
fn wait_times_out_and_reports_how_long() {
    let flag = Flag::default();
    // Yield counts below, at and above the one where the clock starts, and parking after.
    for (policy, yields) in [
        (WaitPolicy::Spin, 0),
        (WaitPolicy::Park, 0),
        (WaitPolicy::Park, 2),
        (WaitPolicy::Park, FIRST_CHECK),
        (WaitPolicy::Park, 300),
    ] {
        let config = WaitConfig { yields, ..cfg(policy, Some(Duration::from_millis(30))) };
        let begun = Instant::now();
        match config.wait(&flag, 1, &Unwatched) {
            // Never more than really passed, and not far past the limit (the clock starts
            // at the eighth yield, and a loaded machine may be slow to wake the waiter).
            Err(WaitError::Timeout(d)) => {
                assert!(d <= begun.elapsed(), "{policy} {yields}: reported {d:?} of {:?}", begun.elapsed());
                assert!(begun.elapsed() < Duration::from_secs(5), "{policy} {yields}: {:?}", begun.elapsed());
            }
            other => panic!("expected timeout, got {other:?}"),
        }
    }
}

#[test]
fn recheck_slices_of_one_wait_share_its_clock_and_its_timeout() {
    let flag = Flag::default();
    let slice = Duration::from_millis(5);
    // Room for several slices even when a loaded machine is slow to run the waiter.
    let limit = Duration::from_millis(200);
    for (policy, yields) in [(WaitPolicy::Spin, 0), (WaitPolicy::Park, 0), (WaitPolicy::Park, 256)] {
        let config = WaitConfig { yields, ..cfg(policy, Some(limit)) };
        let begun = Instant::now();
        let mut clock = None;
        let mut slices = 0;
        let timed_out = loop {
            let slice_begun = Instant::now();
            match config.wait_or_recheck(&flag, 1, &Unwatched, Some(slice), &mut clock) {
                Err(WaitError::Recheck) => {
                    assert!(slice_begun.elapsed() >= slice, "{policy} {yields}: a slice ended early");
                    slices += 1;
                }
                Err(WaitError::Timeout(d)) => break d,
                other => panic!("expected a recheck or a timeout, got {other:?}"),
            }
            assert!(slices < 100, "{policy} {yields}: the slices never add up to the timeout");
        };
        // The timeout counts the slices together: several slices, then one timeout that
        // covers them, no longer than really passed.
        assert!(slices >= 2, "{policy} {yields}: {slices} slices");
        assert!(
            timed_out >= limit && timed_out <= begun.elapsed(),
            "{policy} {yields}: {timed_out:?} of {:?}",
            begun.elapsed()
        );
    }
}

#[test]
fn an_outside_progress_engine_turns_on_the_slow_path_only() {
    use std::sync::atomic::AtomicUsize;
    static STEPS: AtomicUsize = AtomicUsize::new(0);
    fn step(context: usize) {
        assert_eq!(context, 7);
        STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let progress = Some(Progress::new(step, 7));
    // A flag already reached: no call (a release found spinning pays nothing).
    let flag = Flag::default();
    flag.signal(1, false);
    for policy in [WaitPolicy::Spin, WaitPolicy::Park] {
        WaitConfig { progress, ..cfg(policy, None) }.wait(&flag, 1, &Unwatched).unwrap();
    }
    assert_eq!(STEPS.load(Ordering::Relaxed), 0);
    // A long wait, yielding (Spin) or parked (Park): the engine keeps turning throughout, a
    // parked waiter every millisecond or so (a 50 ms slice would give a handful of calls).
    for (policy, yields) in [(WaitPolicy::Spin, 0), (WaitPolicy::Park, 0), (WaitPolicy::Park, 64)] {
        STEPS.store(0, Ordering::Relaxed);
        let flag = Arc::new(Flag::default());
        let signaller = {
            let flag = flag.clone();
            // Signals once the waiter has turned the engine 10 times (or after 30 s, when the
            // assertion below fails): no timing decides the test (under a sanitizer on a busy
            // machine a 100 ms wait saw only 4 calls).
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                while STEPS.load(Ordering::Relaxed) < 10 && start.elapsed() < Duration::from_secs(30) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                flag.signal(1, true);
            })
        };
        let config = WaitConfig { progress, yields, ..cfg(policy, None) };
        config.wait(&flag, 1, &Unwatched).unwrap();
        signaller.join().unwrap();
        let steps = STEPS.load(Ordering::Relaxed);
        assert!(steps >= 10, "{policy} {yields}: {steps} progress calls while the wait went on (30 s at most)");
    }
}

#[test]
fn abort_ends_the_wait() {
    struct Dead;
    impl Watch for Dead {
        fn check(&self, _: Duration) -> Result<(), WaitError> {
            Err(WaitError::Aborted(3))
        }
    }
    let flag = Flag::default();
    assert_eq!(cfg(WaitPolicy::Park, None).wait(&flag, 1, &Dead), Err(WaitError::Aborted(3)));
}

#[test]
fn concurrent_bumps_are_never_merged() {
    // The device doorbell: every ring must count, or the engine may sleep past an arrival.
    let flag = Arc::new(Flag::default());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let flag = flag.clone();
            std::thread::spawn(move || {
                for _ in 0..50_000 {
                    flag.bump(false);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(flag.load(), 200_000);
}

#[test]
fn raise_only_increases() {
    let flag = Flag::default();
    assert_eq!(flag.raise(5, false), 0);
    assert_eq!(flag.raise(3, false), 5);
    assert_eq!(flag.load(), 5);
}

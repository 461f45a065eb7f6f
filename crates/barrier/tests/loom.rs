//! Model checks of the parking protocol with loom: every interleaving of a signaller and
//! parked waiters, with the futex emulated under loom (see `wait::primitive`).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p barrier --test loom --release`
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
    WaitConfig { policy: WaitPolicy::Park, spin: 0, yields: 0, timeout: None }
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

//! Waiting by polling: for waits that cannot sleep on a [`Flag`](super::Flag) because what
//! they wait for moves only while this thread calls something (an MPI request's test, a
//! transport whose messages land in its progress call, an OpenSHMEM implementation's progress).
//!
//! The poll runs on every turn; between turns the waiter spins (`PAUSE`), or yields the core
//! when the machine's ranks outnumber its cores ([`Pace::Yield`]). Every [`LOOK_EVERY`] turns
//! the poll is told to look at the clock (its timeout, its stall report, who left), and a long
//! spinning wait gives the core away every 64 looks, so a progress thread of the implementation
//! on this core still runs. These waits never park: the thing they wait for needs their calls.
//!
//! Every such wait of the house is this function: the node roots' rounds and the
//! implementation's own barrier among them ([`crate::hierarchy`]), MPI's set-up rendezvous,
//! OpenSHMEM's active sets.

use std::time::{Duration, Instant};

use super::primitive::yield_now;

/// Turns between two looks at the clock.
pub const LOOK_EVERY: u32 = 256;

/// What a waiter does between two polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Spin (`PAUSE`): every rank of the machine has a core.
    Spin,
    /// Give the core away: the machine's ranks outnumber its cores.
    Yield,
}

impl Pace {
    /// Yield when `ranks` outnumber `cores`, else spin.
    pub fn for_machine(ranks: usize, cores: usize) -> Pace {
        if ranks > cores {
            Pace::Yield
        } else {
            Pace::Spin
        }
    }

    /// One pause between polls.
    #[inline]
    pub fn pause(self) {
        match self {
            Pace::Spin => std::hint::spin_loop(),
            Pace::Yield => yield_now(),
        }
    }
}

/// Polls until `poll` returns `Ok(true)` (done) or an error. `poll(look)` is told `look = true`
/// on every [`LOOK_EVERY`]-th turn: then, and only then, it reads the clock to check its
/// deadline or say that it waits.
#[inline]
pub fn poll_until<E>(pace: Pace, mut poll: impl FnMut(bool) -> Result<bool, E>) -> Result<(), E> {
    let mut turns: u32 = 0;
    loop {
        let look = turns.is_multiple_of(LOOK_EVERY) && turns > 0;
        if poll(look)? {
            return Ok(());
        }
        turns = turns.wrapping_add(1);
        pace.pause();
        if pace == Pace::Spin && turns.is_multiple_of(LOOK_EVERY * 64) {
            // A long spinning wait: let a progress thread of the implementation on this core run.
            yield_now();
        }
    }
}

/// Polls until `poll` returns `Some`, for at most `limit` (`None`: for ever): `Ok(None)` once
/// the limit has passed. The clock is read every [`LOOK_EVERY`] turns; `pace` as in
/// [`poll_until`].
pub fn poll_for<T, E>(
    pace: Pace,
    limit: Option<Duration>,
    mut poll: impl FnMut() -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    let start = Instant::now();
    let mut found = None;
    poll_until(pace, |look| {
        if let Some(v) = poll()? {
            found = Some(v);
            return Ok(true);
        }
        Ok(look && limit.is_some_and(|l| start.elapsed() >= l))
    })?;
    Ok(found)
}

/// Polls until `poll` returns `Some`, sleeping between polls once the first `busy` has passed:
/// sleeps that double from 20 µs, to at most a tenth of the wait so far (1 ms to 10 ms). For a rank that must not hold a core while it waits for ranks that are still
/// working (a set-up rendezvous with more ranks than cores). `said(waited)` is called before
/// every sleep, to report a long wait.
pub fn poll_asleep<T, E>(
    busy: Duration,
    mut poll: impl FnMut() -> Result<Option<T>, E>,
    mut said: impl FnMut(Duration),
) -> Result<T, E> {
    let start = Instant::now();
    let mut pause = Duration::ZERO;
    loop {
        if let Some(v) = poll()? {
            return Ok(v);
        }
        let waited = start.elapsed();
        if waited < busy {
            std::hint::spin_loop();
            continue;
        }
        said(waited);
        // At most a tenth of the wait so far (and 1 ms to 10 ms): a late rank is met within
        // 10% of its lateness, and a rank that waits long wakes seldom.
        let cap = (waited / 10).clamp(Duration::from_millis(1), Duration::from_millis(10));
        pause = (pause * 2).clamp(Duration::from_micros(20), cap);
        std::thread::sleep(pause);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn poll_until_looks_every_look_every_turns_and_stops_on_done_or_error() {
        let mut turns = 0u32;
        let mut looks = 0u32;
        poll_until(Pace::Spin, |look| {
            turns += 1;
            looks += u32::from(look);
            Ok::<_, ()>(turns == 3 * LOOK_EVERY + 1)
        })
        .unwrap();
        assert_eq!(looks, 3);
        let failed = poll_until(Pace::Yield, |look| if look { Err("looked") } else { Ok(false) });
        assert_eq!(failed, Err("looked"));
    }

    // (Timed: under Miri's emulated clock and scheduler these would take minutes and check no
    // memory access; the loop has none of its own.)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn poll_for_gives_up_after_its_limit_and_returns_what_came() {
        let start = Instant::now();
        let none = poll_for(Pace::Yield, Some(Duration::from_millis(30)), || Ok::<Option<()>, ()>(None)).unwrap();
        assert!(none.is_none() && start.elapsed() >= Duration::from_millis(30));
        let mut n = 0;
        let some = poll_for(Pace::Spin, None, || {
            n += 1;
            Ok::<_, ()>((n == 5).then_some(n))
        });
        assert_eq!(some, Ok(Some(5)));
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn poll_asleep_sleeps_once_busy_has_passed_and_says_how_long_it_waited() {
        let start = Instant::now();
        let mut said = Vec::new();
        let v = poll_asleep(
            Duration::from_micros(50),
            || Ok::<_, ()>((start.elapsed() >= Duration::from_millis(20)).then_some(7)),
            |waited| said.push(waited),
        );
        assert_eq!(v, Ok(7));
        assert!(!said.is_empty() && said.windows(2).all(|w| w[0] <= w[1]), "{said:?}");
        // Asleep: a few dozen sleeps, not thousands of polls.
        assert!(said.len() < 200, "{} sleeps", said.len());
    }
}

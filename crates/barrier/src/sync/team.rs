//! A team: a fixed set of member threads, each with its [`Member`] handle, waiting at the floor.
//!
//! The members' barrier, while they have a core each, is dissemination over flags: ⌈log2 n⌉ rounds; in round `r` member `i`
//! stores its barrier count into round-`r` flag of member `(i + 2^r) mod n` and waits until its
//! own round-`r` flag reaches it. Each flag has one writer and one reader, and flags only grow,
//! so nothing is reset between barriers and no word is shared by all members: at 2 members a
//! barrier is one store and one wait each, the bench's floor. When the members outnumber the
//! cores (the wait policy parks) and are more than 2, the rounds would cost a context switch
//! each, so the team runs a central barrier instead: a member stores its barrier number in its
//! own word and adds one to a shared count; the arrival that makes the count `n * e` releases
//! barrier `e` through one flag (one switch per member, as the drop-in). A member that waits
//! there while every member still missing last ran on another CPU spins for the release (at
//! most `BARRIER_SW_TAIL_SPIN`'s default, 50 µs) instead of yielding its core to a member that
//! has nothing left to do: the central algorithm's tail spin among processes (`algo::tail`).
//!
//! [`Member::wait_then`] is a barrier in two halves around a piece of work: every member arrives
//! (each stores the barrier's number into a flag of its own), member 0 waits for them all, runs
//! the work (the MPI barrier of its rank, in a hybrid program: threads, then ranks, in one
//! barrier), and releases them through one flag. One gather and one release, where "team
//! barrier, the work on one thread, team barrier" costs two whole barriers.
//!
//! A member dropped (its thread ended, or unwound from a panic) records how many barriers it
//! completed. A member waiting for a barrier that a dropped member never made learns it when
//! its wait next looks at the clock (a parked wait within a park slice, 50 ms at most; a
//! spinning one every 64 yields) and fails with
//! [`Error::TeamMemberGone`] naming it; a timeout fails with [`Error::TeamTimeout`] naming the
//! member waited for. After a failure the member's later waits fail too (its rounds are out of
//! step: [`Error::TeamBroken`]). A team waits for all `n` members at every barrier: members
//! never handed out, like members that never call, hold the others until the timeout (none by
//! default: set `BARRIER_TIMEOUT` or use [`Team::with`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::wait::{Flag, WaitConfig, WaitError, WaitPolicy, Watch};

/// What the members share.
#[derive(Debug)]
struct Shared {
    n: usize,
    rounds: usize,
    /// flags[i * rounds + r]: member i's flag of round r, each alone in a block of two lines.
    flags: Box<[Slot]>,
    /// Per member: 0 while it is held; barriers completed + 1 once it was dropped.
    left: Box<[crate::pad::CachePadded<AtomicU64>]>,
    /// Per member: whether it was dropped while its thread panicked.
    panicked: Box<[crate::pad::CachePadded<AtomicU64>]>,
    /// Members handed out so far.
    joined: AtomicUsize,
    /// Threads outnumber cores (the policy parks): a central barrier instead of the rounds,
    /// one hand-over per member where the rounds need one per round.
    central: bool,
    /// The central barrier: arrivals over all barriers, the release flag, and each member's
    /// latest barrier (for the stall report and the timeout).
    count: crate::pad::CachePadded<AtomicU64>,
    release: Slot,
    at: Box<[crate::pad::CachePadded<AtomicU64>]>,
    /// The central barrier's tail spin (threads outnumber this process's cores): each member's
    /// CPU at its last arrival, plus one (0: not known), and how long a waiter whose missing
    /// members all last ran on other CPUs spins for the release instead of yielding its core.
    cpus: Box<[crate::pad::CachePadded<AtomicU64>]>,
    tail_spin: Option<Duration>,
    /// `wait_then`: each member's arrival flag, member 0's release flag, and the last barrier
    /// whose work failed on member 0 (0: none).
    arrived: Box<[Slot]>,
    released: Slot,
    failed: crate::pad::CachePadded<AtomicU64>,
    wait: WaitConfig,
    stall: Option<Duration>,
}

/// A flag alone in a 256-byte block: two members' flags never share a pair of lines that the
/// adjacent-line prefetcher moves together (measured at 2 members: ~46 ns a barrier with
/// 128-byte flags, the floor's ~35 with blocks of 256, as the bench's raw floor uses).
#[repr(C, align(256))]
#[derive(Debug, Default)]
struct Slot(Flag);

/// A team of `n` member threads. Make it, hand a [`Member`] to each thread ([`join`](Self::join)
/// or [`members`](Self::members)), and let each call [`Member::wait`].
#[derive(Debug, Clone)]
pub struct Team {
    shared: Arc<Shared>,
}

/// One member's handle on its team's barrier, for one thread: `Send`, not `Clone`; its
/// [`wait`](Self::wait) takes `&mut self`.
#[derive(Debug)]
pub struct Member {
    shared: Arc<Shared>,
    index: usize,
    /// Barriers this member has entered, and completed (one fewer after a failed wait).
    epoch: u64,
    completed: u64,
    /// Barriers of the central form this member has entered (`wait`'s, not `wait_then`'s).
    central_epoch: u64,
    /// Why its waits fail, once one failed.
    broken: Option<String>,
    /// Per round of the dissemination: the partner's flag it signals, its own flag, and the
    /// member that signals it (computed at join: a division by `n` per round on every barrier
    /// cost ~10 ns at 2 members).
    rounds: Box<[Round]>,
}

/// One round of a member's dissemination.
#[derive(Clone, Copy, Debug)]
struct Round {
    partner_flag: usize,
    own_flag: usize,
    sender: usize,
}

impl Team {
    /// A team of `n` members (at least 1), waiting as the environment's
    /// `BARRIER_WAIT_POLICY`, `BARRIER_TIMEOUT` and `BARRIER_STALL_REPORT` say (`auto`: park
    /// when `n` exceeds this process's cores). A value that does not parse is said on stderr
    /// (once per process) with the value used instead.
    pub fn new(n: usize) -> Team {
        let env = super::env::EnvWaits::read(n);
        Team::with(n, env.policy, env.timeout, env.stall)
    }

    /// A team of `n` members (at least 1) of a program that runs `busy` such threads in all on
    /// this machine's `cores` cores: a hybrid MPI program, where every rank on the machine has
    /// its team (`barrier_mpi::hybrid_team` counts them). It waits as [`Team::new`]'s, but
    /// `auto` parks when `busy` exceeds `cores`: `Team::new` judges by its own `n` and would spin
    /// on cores the other ranks' teams need (4 ranks of 2 threads on 2 cores took 210 µs a
    /// barrier so, against 11 µs parked).
    pub fn among(n: usize, busy: usize, cores: usize) -> Team {
        let env = super::env::EnvWaits::among(busy.max(n), cores);
        Team::with(n, env.policy, env.timeout, env.stall)
    }

    /// How the members wait (`auto` resolved).
    pub fn wait_policy(&self) -> WaitPolicy {
        self.shared.wait.policy
    }

    /// A team of `n` members that waits by `policy`, gives up after `timeout` and reports a
    /// wait longer than `stall`.
    pub fn with(n: usize, policy: WaitPolicy, timeout: Option<Duration>, stall: Option<Duration>) -> Team {
        let n = n.max(1);
        // ⌈log2 n⌉ (`barrier::rounds`, which lives a layer above this one).
        let rounds = if n > 1 { (usize::BITS - (n - 1).leading_zeros()) as usize } else { 0 };
        let (spin, yields) = if policy == WaitPolicy::Spin { (2000, 4) } else { (0, 256) };
        let padded = || (0..n).map(|_| crate::pad::CachePadded(AtomicU64::new(0))).collect();
        Team {
            shared: Arc::new(Shared {
                n,
                rounds,
                flags: (0..n * rounds).map(|_| Slot::default()).collect(),
                left: padded(),
                panicked: padded(),
                joined: AtomicUsize::new(0),
                central: policy == WaitPolicy::Park && n > 2,
                count: crate::pad::CachePadded(AtomicU64::new(0)),
                release: Slot::default(),
                at: padded(),
                cpus: padded(),
                tail_spin: (n > crate::sys::available_cores() && n <= crate::wait::tail::MAX_HINTS)
                    .then_some(crate::wait::tail::DEFAULT_TAIL_SPIN),
                arrived: (0..n).map(|_| Slot::default()).collect(),
                released: Slot::default(),
                failed: crate::pad::CachePadded(AtomicU64::new(0)),
                wait: WaitConfig { policy, spin, yields, timeout, progress: None },
                stall,
            }),
        }
    }

    /// The next member's handle (members are numbered 0, 1, … in the order they join), or an
    /// error once all `n` have joined.
    pub fn join(&self) -> Result<Member> {
        let index = self.shared.joined.fetch_add(1, Ordering::AcqRel);
        if index >= self.shared.n {
            self.shared.joined.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::InvalidArgument(format!(
                "a team of {} threads has handed out all its members; make the team as large as the number of \
                 threads that wait at it",
                self.shared.n
            )));
        }
        let (n, rounds) = (self.shared.n, self.shared.rounds);
        let rounds = (0..rounds)
            .map(|round| Round {
                partner_flag: (index + (1 << round)) % n * rounds + round,
                own_flag: index * rounds + round,
                sender: (index + n - (1 << round) % n) % n,
            })
            .collect();
        Ok(Member {
            shared: self.shared.clone(),
            index,
            epoch: 0,
            completed: 0,
            central_epoch: 0,
            broken: None,
            rounds,
        })
    }

    /// Every member of a team of `n`, in order: hand one to each thread.
    pub fn members(n: usize) -> Vec<Member> {
        let team = Team::new(n);
        (0..team.size()).map(|_| team.join().expect("n members of a team of n")).collect()
    }

    /// Members of the team.
    pub fn size(&self) -> usize {
        self.shared.n
    }
}

impl Member {
    /// This member's number in its team.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Members of its team.
    pub fn team_size(&self) -> usize {
        self.shared.n
    }

    /// Waits until every member of the team has called `wait` as many times as this member.
    /// Writes a member made before its call are visible to every member after theirs.
    #[inline]
    pub fn wait(&mut self) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(Error::TeamBroken(why.clone()));
        }
        self.epoch += 1;
        let done = self.step();
        self.finish(done)
    }

    /// A barrier in two halves around `work`: every member arrives; member 0, once all have,
    /// runs `work` (the other members' `work` is dropped unrun) and then releases them. Every
    /// member returns after `work` has returned, and sees what it wrote; if `work` failed,
    /// member 0 returns its error and the others [`Error::TeamBroken`] naming it, and the
    /// team's later barriers fail. Every member calls `wait` and `wait_then` in the same order.
    ///
    /// In a hybrid program whose rank has a team of threads, member 0 (the thread that calls
    /// MPI, so `MPI_THREAD_FUNNELED` is enough) passes its rank's barrier: every thread of every
    /// rank then meets in one barrier of three levels.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let team = barrier::sync::Team::new(3);
    /// let ran = AtomicUsize::new(0);
    /// std::thread::scope(|s| {
    ///     for _ in 0..3 {
    ///         let mut m = team.join().unwrap();
    ///         let ran = &ran;
    ///         s.spawn(move || {
    ///             m.wait_then(|| {
    ///                 ran.fetch_add(1, Ordering::Relaxed);
    ///                 Ok(())
    ///             })
    ///             .unwrap();
    ///             assert_eq!(ran.load(Ordering::Relaxed), 1); // run once, before anyone left
    ///         });
    ///     }
    /// });
    /// ```
    pub fn wait_then(&mut self, work: impl FnOnce() -> Result<()>) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(Error::TeamBroken(why.clone()));
        }
        self.epoch += 1;
        let done = self.gather_then(work);
        self.finish(done)
    }

    /// Records the outcome of this member's barrier `self.epoch`.
    fn finish(&mut self, done: Result<()>) -> Result<()> {
        match &done {
            Ok(()) => self.completed = self.epoch,
            // Its rounds are out of step from here on.
            Err(e) => self.broken = Some(e.to_string()),
        }
        done
    }

    /// Barrier `self.epoch`, this member's part.
    #[inline]
    fn step(&mut self) -> Result<()> {
        let s = &*self.shared;
        let wake = s.wait.policy.wakes();
        if s.central {
            s.at[self.index].store(self.epoch, Ordering::Relaxed);
            self.central_epoch += 1;
            // Every member arrives once per barrier, and none at barrier e + 1 before e's
            // release: the arrival that makes the count n * e (e counting the central
            // barriers only: `wait_then`'s do not add to the count) is barrier e's last.
            let cpu = s.tail_spin.map_or(0, |_| self.record_cpu());
            if s.count.fetch_add(1, Ordering::AcqRel) + 1 == s.n as u64 * self.central_epoch {
                s.release.0.signal(self.epoch, wake);
                return Ok(());
            }
            if let Some(limit) = s.tail_spin.filter(|_| self.no_missing_member_on(cpu)) {
                if s.wait.spin_for(&s.release.0, self.epoch, limit) {
                    return Ok(());
                }
            }
            return self.wait_for(&s.release.0, Awaited::Central);
        }
        for (round, r) in self.rounds.iter().enumerate() {
            s.flags[r.partner_flag].0.signal(self.epoch, wake);
            self.wait_for(&s.flags[r.own_flag].0, Awaited::Round { round, sender: r.sender })?;
        }
        Ok(())
    }

    /// `wait_then`'s barrier `self.epoch`, this member's part.
    fn gather_then(&self, work: impl FnOnce() -> Result<()>) -> Result<()> {
        let s = &*self.shared;
        let wake = s.wait.policy.wakes();
        s.at[self.index].store(self.epoch, Ordering::Relaxed);
        if self.index != 0 {
            s.arrived[self.index].0.signal(self.epoch, wake);
            self.wait_for(&s.released.0, Awaited::Leader)?;
            if s.failed.load(Ordering::Acquire) == self.epoch {
                return Err(Error::TeamBroken(format!(
                    "what member 0 ran between the halves of barrier {} failed (member 0 returned its error)",
                    self.epoch
                )));
            }
            return Ok(());
        }
        for j in 1..s.n {
            self.wait_for(&s.arrived[j].0, Awaited::Member(j))?;
        }
        let done = work();
        if done.is_err() {
            s.failed.store(self.epoch, Ordering::Release);
        }
        s.released.0.signal(self.epoch, wake);
        done
    }

    /// Waits for `flag` to reach this member's barrier (in `round`, or the central release).
    #[inline]
    fn wait_for(&self, flag: &Flag, awaited: Awaited) -> Result<()> {
        if self.shared.wait.reached_soon(flag, self.epoch) {
            return Ok(());
        }
        self.wait_round(flag, awaited)
    }

    #[cold]
    fn wait_round(&self, flag: &Flag, awaited: Awaited) -> Result<()> {
        let s = &*self.shared;
        let watch = TeamWatch { member: self, awaited, reported: std::cell::Cell::new(false) };
        let result = s.wait.wait(flag, self.epoch, &watch);
        Err(match result {
            Ok(()) => return Ok(()),
            Err(WaitError::PeerLeft(gone)) => Error::TeamMemberGone {
                member: gone,
                team: s.n,
                completed: s.left[gone].load(Ordering::Acquire).saturating_sub(1),
                epoch: self.epoch,
                panicked: s.panicked[gone].load(Ordering::Acquire) == 1,
            },
            Err(WaitError::Timeout(waited)) => Error::TeamTimeout {
                member: self.index,
                team: s.n,
                epoch: self.epoch,
                waited,
                waiting_for: match awaited {
                    Awaited::Round { sender, .. } => sender,
                    Awaited::Member(j) => j,
                    Awaited::Leader => 0,
                    Awaited::Central => self.missing().first().copied().unwrap_or(self.index),
                },
            },
            Err(other) => Error::Broken(format!("member {}'s wait ended: {other:?}", self.index)),
        })
    }
}

impl Member {
    /// Stores this member's CPU (plus one; 0: not known) where it changed, and returns it.
    fn record_cpu(&self) -> u64 {
        let cpu = crate::sys::current_cpu().map_or(0, |c| u64::from(c) + 1);
        let mine = &self.shared.cpus[self.index];
        if mine.load(Ordering::Relaxed) != cpu {
            mine.store(cpu, Ordering::Relaxed);
        }
        cpu
    }

    /// The central barrier's tail spin (as the central algorithm's among processes,
    /// `algo::tail`): whether every member still missing from this member's barrier last ran
    /// on a CPU other than `cpu`. Then none of them needs this core before the release, and a
    /// yield would only hand it to a member that finds nothing to do: a context switch on the
    /// barrier's path. Hints only (a member may have moved): a wrong one costs one bounded spin.
    /// Not known, or more than a few missing (early arrivers almost always share a CPU with
    /// one of them): no spin.
    fn no_missing_member_on(&self, cpu: u64) -> bool {
        let s = &*self.shared;
        // (At most `wait::tail::MAX_HINTS` members: the tail spin is on only then.)
        let missing = (0..s.n.min(64))
            .filter(|&j| j != self.index && s.at[j].load(Ordering::Relaxed) < self.epoch)
            .fold(0u64, |mask, j| mask | 1 << j);
        crate::wait::tail::spin_beside(missing, cpu, |j| s.cpus[j].load(Ordering::Relaxed))
    }

    /// The members that have not arrived at this member's barrier (the central barrier's).
    fn missing(&self) -> Vec<usize> {
        let s = &*self.shared;
        (0..s.n).filter(|&j| s.at[j].load(Ordering::Relaxed) < self.epoch).collect()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.panicked[self.index].store(u64::from(std::thread::panicking()), Ordering::Relaxed);
        s.left[self.index].store(self.completed + 1, Ordering::Release);
    }
}

/// Whom a member's wait waits for.
#[derive(Clone, Copy)]
enum Awaited {
    /// Its round's sender.
    Round { round: usize, sender: usize },
    /// The central barrier's release: every member that has not arrived.
    Central,
    /// `wait_then`'s gather, on member 0: this member's arrival.
    Member(usize),
    /// `wait_then`'s release, by member 0 once every member arrived and its work ran.
    Leader,
}

/// What a member's slow wait consults: a member that left, and the stall report.
struct TeamWatch<'a> {
    member: &'a Member,
    awaited: Awaited,
    reported: std::cell::Cell<bool>,
}

impl Watch for TeamWatch<'_> {
    fn check(&self, waited: Duration) -> std::result::Result<(), WaitError> {
        let m = self.member;
        let s = &*m.shared;
        // Any member that left before this barrier: this one can never complete. One whose
        // thread panicked is named first (the others may have left because of it).
        let gone: Vec<usize> = (0..s.n)
            .filter(|&j| {
                let left = s.left[j].load(Ordering::Acquire);
                j != m.index && left != 0 && left - 1 < m.epoch
            })
            .collect();
        if let Some(&first) = gone.iter().find(|&&j| s.panicked[j].load(Ordering::Acquire) == 1).or(gone.first()) {
            return Err(WaitError::PeerLeft(first));
        }
        if s.stall.is_some_and(|limit| waited >= limit) && !self.reported.replace(true) {
            let whom = match self.awaited {
                Awaited::Round { round, sender } => {
                    format!("(round {round}): member {sender} has not arrived (or it waits for another member in turn)")
                }
                Awaited::Central => format!("(central): members {:?} have not arrived", m.missing()),
                Awaited::Member(j) => format!("(gather): member {j} has not arrived"),
                Awaited::Leader => format!(
                    "(release): member 0 has not released it (members {:?} have not arrived, or member 0's work between \
                     the halves has not returned)",
                    m.missing()
                ),
            };
            crate::text::say(&format!(
                "barrier::sync::Team: member {} of a team of {} has waited {waited:.1?} in barrier {} {whom}; still \
                 waiting (this report: BARRIER_STALL_REPORT)",
                m.index, s.n, m.epoch
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_spin_waits_only_when_every_missing_member_ran_elsewhere() {
        let team = Team::with(4, WaitPolicy::Park, None, None);
        let mut me = team.join().expect("member 0");
        me.epoch = 5;
        let s = team.shared.clone();
        // Members 1 and 2 arrived at barrier 5; member 3 is missing.
        for (j, at) in [(1, 5), (2, 5), (3, 4)] {
            s.at[j].store(at, Ordering::Relaxed);
        }
        // CPUs plus one: member 3 last ran on CPU 1 (2), this member on CPU 0 (1).
        for (j, cpu) in [(1, 1), (2, 1), (3, 2)] {
            s.cpus[j].store(cpu, Ordering::Relaxed);
        }
        assert!(me.no_missing_member_on(1), "the missing member runs elsewhere: spin");
        assert!(!me.no_missing_member_on(2), "the missing member shares this CPU: yield to it");
        assert!(!me.no_missing_member_on(0), "this CPU not known: no spin");
        s.cpus[3].store(0, Ordering::Relaxed);
        assert!(!me.no_missing_member_on(1), "the missing member's CPU not known: no spin");
        s.at[3].store(5, Ordering::Relaxed);
        assert!(me.no_missing_member_on(1), "nobody missing");
    }
}

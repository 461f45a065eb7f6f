//! Even placement for oversubscribed jobs: the launcher moves a rank off a crowded CPU.
//!
//! With more ranks than cores, a barrier waits in every call for the most crowded CPU: each
//! rank sharing a CPU has to run once before the barrier can complete, so a job of 4 ranks
//! placed 3 + 1 on two CPUs pays three context switches a barrier where 2 + 2 pays two
//! (measured on the 2-core VM: 3.9 us against 2.0). The launcher starts ranks spread, but the
//! kernel moves them in their first moments and then keeps whatever it settled on: a rank
//! that switches every few microseconds always looks cache-hot to the load balancer, which
//! then declines to migrate it, so an uneven placement lasts for the whole job in some
//! launches and not in others.
//!
//! The balancer runs in the launcher, off the ranks' path entirely, on the launcher's own
//! wait loop (a look every 5 ms in the job's first half second, then every 20 ms, up to every
//! 160 ms while the placement stays even):
//!
//! ```text
//! look:  cpu[r] = the CPU rank r's main thread last ran on   (/proc/<pid>/stat, field 39;
//!                 the process that joined as rank r, if it is in rank r's process group)
//!        count ranks per CPU of the job's mask
//!        uneven = most crowded - least crowded >= 2
//!        uneven for STREAK ticks in a row (a lasting imbalance, not a moment of it):
//!            move the highest-numbered rank of the most crowded CPU to the least crowded
//!            (sched_setaffinity of its main thread to that one CPU: the kernel migrates it)
//!        next look: give it the job's whole mask back, and any thread it made meanwhile
//!            (it stays where it was put: the kernel's balancer left the uneven placement
//!            alone, it leaves the even one too)
//! ```
//!
//! It moves only main threads (the balancer assumes the thread that calls the barrier is the
//! main thread, as in most programs), only between the CPUs of the mask the job was given,
//! never a rank whose mask is not the job's whole mask, never when the job is pinned or fits on
//! the cores, and at most [`MAX_MOVES_PER_RANK`] times the ranks on average (a kernel that
//! keeps undoing the moves wins; the balancer then only watches). A look at which some rank
//! has not joined yet, or has ended, counts for nothing. `BARRIER_REBALANCE=0` turns it off; `BARRIER_VERBOSE=1` prints each move.
//! Under MPI the MPI launcher places the ranks and nothing here runs.

/// Ticks in a row an uneven placement must last before a rank is moved.
pub const STREAK: u32 = 2;
/// Moves per rank, on average, after which the balancer gives up.
pub const MAX_MOVES_PER_RANK: usize = 4;

/// A move the balancer made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The rank moved.
    pub rank: usize,
    /// From this CPU.
    pub from: usize,
    /// To this CPU.
    pub to: usize,
    /// Ranks per CPU of the mask before the move, in the mask's order.
    pub before: Vec<usize>,
}

/// The move that evens `placement` (the CPU of each rank, `None` where not known) over `cpus`
/// the most: the highest-numbered rank of the most crowded CPU to the least crowded one, if
/// they differ by two ranks or more. Ranks on CPUs outside `cpus` are left out.
///
/// Only ranks for which `movable` holds are moved (the others still count where they run).
pub fn plan(placement: &[Option<usize>], cpus: &[usize], movable: impl Fn(usize) -> bool) -> Option<Move> {
    let before = counts(placement, cpus);
    let (most, _) = before.iter().enumerate().max_by_key(|&(i, &n)| (n, std::cmp::Reverse(i)))?;
    let (least, _) = before.iter().enumerate().min_by_key(|&(i, &n)| (n, i))?;
    if before[most] < before[least] + 2 {
        return None;
    }
    let rank = (0..placement.len()).rev().find(|&r| placement[r] == Some(cpus[most]) && movable(r))?;
    Some(Move { rank, from: cpus[most], to: cpus[least], before })
}

/// Ranks per CPU of `cpus`.
pub fn counts(placement: &[Option<usize>], cpus: &[usize]) -> Vec<usize> {
    cpus.iter().map(|c| placement.iter().filter(|&&p| p == Some(*c)).count()).collect()
}

/// Where ranks run and how to move them: the kernel's view, or a model of it in tests.
pub trait Placer: std::fmt::Debug {
    /// The CPU `pid`'s main thread last ran on, if `pid` is still a process of process group
    /// `group` (the rank's: a pid that has been reused, or a process that is not the job's,
    /// is left alone).
    fn cpu_of(&mut self, pid: u32, group: u32) -> Option<usize>;
    /// Whether thread `tid` may run on exactly `cpus` (a rank that narrowed its own mask chose
    /// its place: it is not moved).
    fn has_mask(&mut self, tid: u32, cpus: &[usize]) -> bool;
    /// Restricts thread `tid` to `cpus`.
    fn restrict(&mut self, tid: u32, cpus: &[usize]) -> bool;
    /// The threads of process `pid` (its main thread first).
    fn threads(&mut self, pid: u32) -> Vec<u32> {
        vec![pid]
    }
}

/// The kernel: `/proc/<pid>/stat`, `/proc/<pid>/task` and `sched_{get,set}affinity`.
#[derive(Debug)]
pub struct Kernel;

impl Placer for Kernel {
    fn cpu_of(&mut self, pid: u32, group: u32) -> Option<usize> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
        // Field 3 (the state) follows it: field 5 (the process group) is the 3rd after it,
        // field 39 (processor) the 37th.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        (fields.get(2)?.parse::<u32>().ok()? == group).then_some(())?;
        fields.get(36)?.parse().ok()
    }

    fn has_mask(&mut self, tid: u32, cpus: &[usize]) -> bool {
        let Ok(tid) = libc::pid_t::try_from(tid) else { return false };
        // SAFETY: cpu_set_t is plain data; zeroed is its empty value.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: the pointer and size describe `set`, which outlives the call.
        if unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
            return false;
        }
        let want = barrier::sys::cpu_set(cpus);
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads one bit inside each set; the index is below its capacity.
            .all(|c| unsafe { libc::CPU_ISSET(c, &set) == libc::CPU_ISSET(c, &want) })
    }

    fn restrict(&mut self, tid: u32, cpus: &[usize]) -> bool {
        let set = barrier::sys::cpu_set(cpus);
        let Ok(tid) = libc::pid_t::try_from(tid) else { return false };
        // SAFETY: the pointer and size describe `set`, which outlives the call; a thread that
        // has gone only makes the call fail.
        unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
    }

    fn threads(&mut self, pid: u32) -> Vec<u32> {
        let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        tids.sort_by_key(|&t| (t != pid, t));
        tids
    }
}

/// A rank the balancer has restricted to one CPU, until the next look.
#[derive(Debug, Clone, Copy)]
struct Held {
    rank: usize,
    pid: u32,
    group: u32,
    to: usize,
}

/// The balancer of one job.
#[derive(Debug)]
pub struct Balancer<P: Placer> {
    placer: P,
    cpus: Vec<usize>,
    streak: u32,
    held: Option<Held>,
    moves: Vec<Move>,
    max_moves: usize,
    verbose: bool,
    looks: usize,
    even_looks: usize,
    /// Consecutive even looks up to the last one.
    settled: usize,
    last: Vec<usize>,
}

impl<P: Placer> Balancer<P> {
    /// A balancer for ranks that may run on `cpus` (the job's mask).
    pub fn new(placer: P, cpus: Vec<usize>, ranks: usize, verbose: bool) -> Self {
        Balancer {
            placer,
            cpus,
            streak: 0,
            held: None,
            moves: Vec::new(),
            max_moves: ranks * MAX_MOVES_PER_RANK,
            verbose,
            looks: 0,
            even_looks: 0,
            settled: 0,
            last: Vec::new(),
        }
    }

    /// One look at the placement of the ranks (`ranks[r]`: the pid that joined as rank r and
    /// the rank's process group, `None` while it has not joined or once it has ended), and at
    /// most one move.
    pub fn tick(&mut self, ranks: &[Option<(u32, u32)>]) {
        if self.held.is_some() {
            // The kernel moved the rank when its mask changed; one look later, the job's whole
            // mask goes back.
            self.release(ranks);
            return;
        }
        if self.gave_up() {
            return;
        }
        let placement: Vec<Option<usize>> =
            ranks.iter().map(|p| p.and_then(|(pid, group)| self.placer.cpu_of(pid, group))).collect();
        if placement.iter().any(Option::is_none) {
            // A rank that has not joined yet, or has ended: the placement says nothing.
            self.streak = 0;
            return;
        }
        self.last = counts(&placement, &self.cpus);
        self.looks += 1;
        let even = self.last.iter().max() <= self.last.iter().min().map(|m| m + 1).as_ref();
        self.even_looks += usize::from(even);
        self.settled = if even { self.settled + 1 } else { 0 };
        let (placer, cpus) = (std::cell::RefCell::new(&mut self.placer), &self.cpus);
        let movable = |r: usize| ranks[r].is_some_and(|(pid, _)| placer.borrow_mut().has_mask(pid, cpus));
        let Some(mv) = plan(&placement, cpus, movable) else {
            self.streak = 0;
            return;
        };
        self.streak += 1;
        if self.streak < STREAK {
            return;
        }
        self.streak = 0;
        let Some((pid, group)) = ranks[mv.rank] else { return };
        if !self.placer.restrict(pid, &[mv.to]) {
            return;
        }
        if self.verbose {
            let before: Vec<String> = self.cpus.iter().zip(&mv.before).map(|(c, n)| format!("cpu{c}:{n}")).collect();
            eprintln!(
                "barrier run: ranks per CPU {}: rank {} moved from CPU {} to CPU {} (BARRIER_REBALANCE=0 turns this off)",
                before.join(" "),
                mv.rank,
                mv.from,
                mv.to
            );
        }
        self.held = Some(Held { rank: mv.rank, pid, group, to: mv.to });
        self.moves.push(mv);
    }

    /// Gives the rank moved at the last look the job's whole mask back: its main thread, and any
    /// thread it made meanwhile (which inherited the one CPU), if the rank is still the same
    /// process and nobody changed that mask since.
    pub fn release(&mut self, ranks: &[Option<(u32, u32)>]) {
        let Some(held) = self.held.take() else { return };
        if ranks.get(held.rank).copied().flatten() != Some((held.pid, held.group))
            || self.placer.cpu_of(held.pid, held.group).is_none()
        {
            return;
        }
        for tid in self.placer.threads(held.pid) {
            if self.placer.has_mask(tid, &[held.to]) {
                self.placer.restrict(tid, &self.cpus);
            }
        }
    }

    /// Whether the balancer has used up its moves (and holds no rank): it then only watches.
    pub fn gave_up(&self) -> bool {
        self.held.is_none() && self.moves.len() >= self.max_moves
    }

    /// What the balancer saw and did, in one line: the looks, how many found the ranks even
    /// (no CPU with two more than another), the moves, and the last placement.
    pub fn summary(&self) -> String {
        let last: Vec<String> = self.cpus.iter().zip(&self.last).map(|(c, n)| format!("cpu{c}:{n}")).collect();
        format!(
            "barrier run: placement even at {} of {} looks (the last {} in a row), {} moves{}; ranks per CPU at the last look {}",
            self.even_looks,
            self.looks,
            self.settled,
            self.moves.len(),
            if self.moves.len() >= self.max_moves { " (the limit: the kernel kept undoing them)" } else { "" },
            last.join(" ")
        )
    }

    /// Looks in a row, up to the last, that found the ranks even.
    pub fn settled(&self) -> usize {
        self.settled
    }

    /// Whether moves and the summary are printed.
    pub fn verbose(&self) -> bool {
        self.verbose
    }

    /// The moves made so far.
    pub fn moves(&self) -> &[Move] {
        &self.moves
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel that never moves a rank on its own (the sticky placement the balancer exists
    /// for): ranks stay where they are put.
    #[derive(Debug)]
    struct Sticky {
        cpu: Vec<usize>,
        mask: Vec<Vec<usize>>,
    }

    impl Placer for Sticky {
        fn cpu_of(&mut self, pid: u32, _: u32) -> Option<usize> {
            self.cpu.get(pid as usize).copied()
        }
        fn has_mask(&mut self, pid: u32, cpus: &[usize]) -> bool {
            self.mask[pid as usize] == cpus
        }
        fn restrict(&mut self, pid: u32, cpus: &[usize]) -> bool {
            let r = pid as usize;
            if !cpus.contains(&self.cpu[r]) {
                self.cpu[r] = cpus[0];
            }
            self.mask[r] = cpus.to_vec();
            true
        }
    }

    fn all(_: usize) -> bool {
        true
    }

    #[test]
    fn plan_moves_the_last_rank_of_the_most_crowded_cpu_to_the_least() {
        let p = [Some(0), Some(0), Some(0), Some(1)];
        assert_eq!(plan(&p, &[0, 1], all), Some(Move { rank: 2, from: 0, to: 1, before: vec![3, 1] }));
        assert_eq!(plan(&[Some(0), Some(1), Some(0), Some(1)], &[0, 1], all), None);
        // Odd counts: 3 + 2 is as even as five ranks get.
        assert_eq!(plan(&[Some(0), Some(1), Some(0), Some(1), Some(0)], &[0, 1], all), None);
        // Unknown CPUs and CPUs outside the mask do not count.
        assert_eq!(plan(&[None, Some(7), Some(0), Some(0)], &[0, 1], all).map(|m| m.rank), Some(3));
        // An idle third CPU gets the rank.
        assert_eq!(plan(&[Some(2), Some(2), Some(3), Some(3)], &[2, 3, 5], all).map(|m| (m.rank, m.to)), Some((1, 5)));
        // A rank that pinned itself stays; the next one on its CPU goes.
        assert_eq!(plan(&p, &[0, 1], |r| r != 2).map(|m| m.rank), Some(1));
        assert_eq!(plan(&p, &[0, 1], |_| false), None);
    }

    fn run(ranks: usize, cpus: &[usize], start: usize, ticks: usize) -> (Vec<usize>, Balancer<Sticky>) {
        let placer = Sticky { cpu: vec![start; ranks], mask: vec![cpus.to_vec(); ranks] };
        let mut b = Balancer::new(placer, cpus.to_vec(), ranks, false);
        let pids: Vec<Option<(u32, u32)>> = (0..ranks as u32).map(|r| Some((r, r))).collect();
        for _ in 0..ticks {
            b.tick(&pids);
        }
        let placement: Vec<Option<usize>> = b.placer.cpu.iter().map(|&c| Some(c)).collect();
        (counts(&placement, cpus), b)
    }

    #[test]
    fn all_ranks_on_one_cpu_end_even_and_keep_the_whole_mask() {
        for (ranks, cpus) in
            [(4usize, vec![0, 1]), (8, vec![0, 1]), (5, vec![0, 1]), (13, vec![0, 1, 2]), (3, vec![4, 6])]
        {
            // Each move takes STREAK ticks to decide and one to hand the mask back.
            let moves_needed = ranks - ranks.div_ceil(cpus.len());
            let (even, b) = run(ranks, &cpus, cpus[0], moves_needed * (STREAK as usize + 1) + 1);
            assert!(
                even.iter().max().unwrap() - even.iter().min().unwrap() <= 1,
                "{ranks} ranks on {cpus:?}: {even:?}"
            );
            assert_eq!(b.moves().len(), moves_needed, "{ranks} ranks: one move per rank out of place");
            assert!(b.placer.mask.iter().all(|m| *m == cpus), "every rank has the job's mask back");
            assert!(b.moves().iter().all(|m| cpus.contains(&m.to)), "never outside the mask");
        }
    }

    #[test]
    fn a_passing_imbalance_is_left_alone() {
        let placer = Sticky { cpu: vec![0, 0, 0, 1], mask: vec![vec![0, 1]; 4] };
        let mut b = Balancer::new(placer, vec![0, 1], 4, false);
        let pids: Vec<Option<(u32, u32)>> = (0..4).map(|r| Some((r, r))).collect();
        for _ in 0..10 {
            b.tick(&pids);
            // The kernel evens it out itself before the streak is long enough.
            b.placer.cpu = if b.placer.cpu == [0, 0, 0, 1] { vec![0, 1, 0, 1] } else { vec![0, 0, 0, 1] };
        }
        assert!(b.moves().is_empty());
    }

    #[test]
    fn gives_up_after_its_move_budget() {
        // A kernel that puts every rank back on CPU 0 at once.
        #[derive(Debug)]
        struct Stubborn(usize);
        impl Placer for Stubborn {
            fn cpu_of(&mut self, _: u32, _: u32) -> Option<usize> {
                Some(0)
            }
            fn has_mask(&mut self, _: u32, _: &[usize]) -> bool {
                true
            }
            fn restrict(&mut self, _: u32, _: &[usize]) -> bool {
                self.0 += 1;
                true
            }
        }
        let mut b = Balancer::new(Stubborn(0), vec![0, 1], 2, false);
        for _ in 0..1000 {
            b.tick(&[Some((0, 0)), Some((1, 1))]);
        }
        assert_eq!(b.moves().len(), 2 * MAX_MOVES_PER_RANK);
    }
}

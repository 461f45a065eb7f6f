//! Active-set barriers whose PEs all share one node (`shmem_barrier(start, stride, size, pSync)`
//! with every member on this PE's node): a counter barrier in a table of the node's shared
//! memory, never touching `pSync`.
//!
//! The table (a shared window of the node's communicator, made at set-up) holds [`SLOTS`]
//! entries, each three cache lines (the set's key: its start, stride and size; the cumulative
//! count of arrivals; the release epoch) and a word per member (the last barrier it arrived
//! at, read only to name who is missing), then a word per PE of the node, set when it calls
//! `shmem_finalize`. A member's barrier number `e` on a set counts its
//! calls for that set (every member makes the same calls, in order). It adds one to the count;
//! the member whose addition makes it `size * e` stores `e` into the release word; every member
//! waits until the release word reaches `e`. No member can arrive at `e + 1` before `e` is
//! released, so the count reaches `size * e` exactly once, at the last arrival. Release store
//! and acquire load (and the counter's read-modify-writes, one release sequence) carry every
//! member's writes before its arrival to every member after it leaves.
//!
//! Entries are claimed, never freed: the first member of a set to arrive takes the first empty
//! entry by compare-and-swap of its key; every later member of the set finds that key first,
//! since every entry before it was taken before it (and stays taken). A full table makes every
//! member of a new set pass through to the implementation alike (it cannot become less full).
//!
//! A wait takes no lock (threads of one PE may wait in different sets at once), says once who
//! has not arrived after `BARRIER_STALL_REPORT`, fails at once when a missing member has called
//! `shmem_finalize`, and gives up after `BARRIER_TIMEOUT` (the job's agreed values).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use barrier::wait::poll_until;
use barrier::SharedWindow;

use crate::progress::call_progress;
use crate::waits::{pe_list, report_stall, Failure, Result, Waits};

/// Active sets a node can serve.
pub const SLOTS: usize = 64;
/// Words per cache line (128-byte lines).
const LINE_WORDS: usize = 16;

/// Words of a node's table for a node of `node_size` PEs.
pub fn table_words(node_size: usize) -> usize {
    SLOTS * entry_words(node_size) + node_size
}

/// Words per entry: key, count and release, a line each, then a word per member.
fn entry_words(node_size: usize) -> usize {
    3 * LINE_WORDS + node_size.div_ceil(LINE_WORDS) * LINE_WORDS
}

/// This PE's side of the node's table.
#[derive(Debug)]
pub struct Sets {
    table: SharedWindow,
    /// The node's PEs, in order (a PE's place here is its word among the departures).
    node_pes: Vec<usize>,
    /// This PE's barrier count per set (by key).
    epochs: Mutex<HashMap<u64, u64>>,
}

/// A set's key: never 0 (an empty entry).
fn key(start: i32, stride: i32, size: i32) -> u64 {
    1 << 63 | (start as u32 as u64) << 32 | (stride as u8 as u64) << 24 | (size as u32 as u64 & 0xff_ffff)
}

impl Sets {
    pub fn new(table: SharedWindow, node_pes: Vec<usize>) -> Sets {
        Sets { table, node_pes, epochs: Mutex::new(HashMap::new()) }
    }

    /// The entry of the set, claimed if it has none; `None` when the table is full.
    fn entry(&self, k: u64) -> Option<&[AtomicU64]> {
        let words = self.table.words();
        let len = entry_words(self.node_pes.len());
        for e in 0..SLOTS {
            let entry = &words[e * len..(e + 1) * len];
            match entry[0].compare_exchange(0, k, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(entry),
                Err(found) if found == k => return Some(entry),
                Err(_) => {}
            }
        }
        None
    }

    /// The word a PE of the node sets when it calls `shmem_finalize`.
    fn departed(&self, pe: usize) -> Option<&AtomicU64> {
        let at = self.node_pes.iter().position(|&p| p == pe)?;
        self.table.words().get(SLOTS * entry_words(self.node_pes.len()) + at)
    }

    /// This PE calls `shmem_finalize`: a member waiting for it in any set learns it at once.
    pub fn depart(&self, me: usize) {
        if let Some(word) = self.departed(me) {
            word.store(1, Ordering::Release);
        }
    }

    /// The barrier of the set `members` (`start, stride, size`; this PE, `me`, among them):
    /// `Ok(false)` when the table is full and the call must pass through.
    pub fn barrier(&self, members: &[usize], set: (i32, i32, i32), me: usize, waits: Waits) -> Result<bool> {
        let (start, stride, size) = set;
        let k = key(start, stride, size);
        let Some(entry) = self.entry(k) else { return Ok(false) };
        let epoch = {
            let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
            let e = epochs.entry(k).or_insert(0);
            *e += 1;
            *e
        };
        let (count, release) = (&entry[LINE_WORDS], &entry[2 * LINE_WORDS]);
        let arrivals = &entry[3 * LINE_WORDS..];
        let index = members.iter().position(|&pe| pe == me).expect("this PE is a member");
        arrivals[index].store(epoch, Ordering::Release);
        let total = size as u64 * epoch;
        if count.fetch_add(1, Ordering::AcqRel) + 1 == total {
            release.store(epoch, Ordering::Release);
        }
        let began = Instant::now();
        let mut looks: u32 = 0;
        let mut reported = false;
        let missing = || -> Vec<usize> {
            members
                .iter()
                .enumerate()
                .filter(|&(i, _)| arrivals[i].load(Ordering::Acquire) < epoch)
                .map(|(_, &pe)| pe)
                .collect()
        };
        let what = || {
            format!(
                "the active-set barrier {epoch} of PEs {} (start {start}, stride 2^{stride}, size {size})",
                pe_list(members)
            )
        };
        // Progress at every look, the checks at every fourth.
        poll_until(waits.pace, |look| {
            if release.load(Ordering::Acquire) >= epoch {
                return Ok(true);
            }
            if !look {
                return Ok(false);
            }
            call_progress(0);
            looks = looks.wrapping_add(1);
            if !looks.is_multiple_of(4) {
                return Ok(false);
            }
            if release.load(Ordering::Acquire) >= epoch {
                return Ok(true);
            }
            let missing = missing();
            let gone =
                missing.iter().find(|&&pe| self.departed(pe).is_some_and(|w| w.load(Ordering::Acquire) != 0)).copied();
            // A member that arrived (and was last: it released the barrier), left and finalized
            // after `missing` read its arrival word: its departure flag, acquired above, follows
            // its release store, so the release is visible now and the barrier is done.
            if gone.is_some() && release.load(Ordering::Acquire) >= epoch {
                return Ok(true);
            }
            if let Some(gone) = gone {
                return Err(Failure(format!(
                    "PE {gone} called shmem_finalize before it arrived at {}, so it can never complete (PE {me} waits \
                     in it); every member of an active set must make the same barrier calls before shmem_finalize",
                    what()
                )));
            }
            let waited = began.elapsed();
            if let Some(limit) = waits.timeout.filter(|&l| waited >= l) {
                return Err(Failure(format!(
                    "{} timed out after {:.1?} on PE {me}: {} of {size} members have not arrived: PEs {}; check that \
                     every member makes the same barrier calls, or raise BARRIER_TIMEOUT (PE 0's value is the job's)",
                    what(),
                    waited.max(limit),
                    missing.len(),
                    pe_list(&missing)
                )));
            }
            if !reported && waits.stall.is_some_and(|s| waited >= s) {
                reported = true;
                report_stall(format!(
                    "barrier-shmem: PE {me} has waited {waited:.1?} in {}: not arrived yet: PEs {}",
                    what(),
                    pe_list(&missing)
                ));
            }
            Ok(false)
        })?;
        Ok(true)
    }
}

/// The PEs of an active set, if they are valid (OpenSHMEM's rules: a non-negative start and
/// stride exponent, at least one member, every member a PE of the job).
pub fn members(start: i32, stride: i32, size: i32, npes: usize) -> Option<Vec<usize>> {
    if start < 0 || !(0..31).contains(&stride) || size < 1 || size as usize > npes {
        return None;
    }
    // The last member decides, before anything is allocated: a size of 2^31 made a list of
    // 2^31 members (16 GiB) before they were checked against the job.
    let last = ((size as usize - 1).checked_shl(stride as u32)).and_then(|d| d.checked_add(start as usize))?;
    if last >= npes {
        return None;
    }
    Some((0..size as usize).map(|i| start as usize + (i << stride as usize)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_follow_openshmems_rules() {
        assert_eq!(members(0, 0, 4, 4), Some(vec![0, 1, 2, 3]));
        assert_eq!(members(1, 1, 3, 6), Some(vec![1, 3, 5]));
        assert_eq!(members(2, 1, 3, 6), None, "PE 6 does not exist");
        assert_eq!(members(-1, 0, 2, 4), None);
        assert_eq!(members(0, 0, 0, 4), None);
    }

    /// Issue 40 item 2: sizes and strides from a program are checked before anything is
    /// allocated (INT_MAX made 2^31 members first).
    #[test]
    fn hostile_sets_are_refused_before_anything_is_allocated() {
        assert_eq!(members(0, 0, i32::MAX, 4), None);
        assert_eq!(members(0, 30, 3, 1 << 31), None, "the last member is PE 2^31");
        assert_eq!(members(i32::MAX, 0, 2, 4), None);
        assert_eq!(members(0, 0, -5, 4), None);
        assert_eq!(members(0, -1, 2, 4), None);
        assert_eq!(members(0, 31, 2, 4), None);
        assert_eq!(members(3, 0, 2, 4), None, "PE 4 does not exist");
        assert_eq!(members(0, 2, 2, 5), Some(vec![0, 4]));
    }

    proptest::proptest! {
        /// Issue 40 item 10: the active-set arguments a program passes, fuzzed: a set is refused,
        /// or it is `size` distinct PEs of the job in increasing order, never more than the job.
        #[test]
        fn any_active_set_arguments_are_refused_or_a_set_of_the_job(
            start in proptest::prop_oneof![proptest::prelude::any::<i32>(), -2i32..100],
            stride in -2i32..40,
            size in proptest::prop_oneof![proptest::prelude::any::<i32>(), -2i32..70],
            npes in proptest::prop_oneof![1usize..(1 << 20), 1usize..200],
        ) {
            if let Some(m) = members(start, stride, size, npes) {
                proptest::prop_assert_eq!(m.len(), size as usize);
                proptest::prop_assert!(m.windows(2).all(|w| w[0] < w[1]));
                proptest::prop_assert!(m.iter().all(|&pe| pe < npes));
                proptest::prop_assert_eq!(m[0], start as usize);
            }
        }
    }

    #[test]
    fn keys_differ_and_are_never_empty() {
        let keys = [key(0, 0, 4), key(0, 1, 4), key(1, 0, 4), key(0, 0, 3)];
        for (i, a) in keys.iter().enumerate() {
            assert_ne!(*a, 0);
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn a_counter_barrier_over_threads_lets_nobody_through_early() {
        let words = barrier::threads::run(4, |world| {
            let (me, n) = (world.rank(), world.size());
            let table = world.shared_window(table_words(n)).unwrap();
            let sets = Sets::new(table, (0..n).collect());
            let members: Vec<usize> = (0..n).collect();
            let waits = Waits { pace: barrier::wait::Pace::Yield, timeout: None, stall: None };
            let seen = world.shared_window(n).unwrap();
            for e in 1..=500u64 {
                seen.words()[me].store(e, Ordering::Release);
                assert!(sets.barrier(&members, (0, 0, n as i32), me, waits).unwrap());
                for w in seen.words() {
                    let v = w.load(Ordering::Acquire);
                    assert!(v == e || v == e + 1, "{v} after barrier {e}");
                }
            }
            world.barrier().unwrap();
        });
        assert!(words.is_ok());
    }
}

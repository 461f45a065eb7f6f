//! Active-set barriers whose PEs all share one node (`shmem_barrier(start, stride, size, pSync)`
//! with every member on this PE's node): a counter barrier in a table of the node's shared
//! memory, never touching `pSync`.
//!
//! The table (a shared window of the node's communicator, made at set-up) holds [`SLOTS`]
//! entries of three cache lines: the set's key (its start, stride and size), the cumulative
//! count of arrivals, and the release epoch. A member's barrier number `e` on a set counts its
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use barrier::{Error, Result, SharedWindow};

use crate::progress::call_progress;

/// Active sets a node can serve.
pub(crate) const SLOTS: usize = 64;
/// Words per cache line (128-byte lines).
const LINE_WORDS: usize = 16;
/// Words per entry: key, count and release, a line each.
pub(crate) const ENTRY_WORDS: usize = 3 * LINE_WORDS;

/// This PE's side of the node's table.
#[derive(Debug)]
pub(crate) struct Sets {
    table: SharedWindow,
    /// This PE's barrier count per set (by key).
    epochs: HashMap<u64, u64>,
}

/// A set's key: never 0 (an empty entry).
fn key(start: i32, stride: i32, size: i32) -> u64 {
    1 << 63 | (start as u32 as u64) << 32 | (stride as u8 as u64) << 24 | (size as u32 as u64 & 0xff_ffff)
}

impl Sets {
    pub(crate) fn new(table: SharedWindow) -> Sets {
        Sets { table, epochs: HashMap::new() }
    }

    /// The entry of the set, claimed if it has none; `None` when the table is full.
    fn entry(table: &SharedWindow, k: u64) -> Option<&[AtomicU64]> {
        let words = table.words();
        for e in 0..SLOTS {
            let entry = &words[e * ENTRY_WORDS..(e + 1) * ENTRY_WORDS];
            match entry[0].compare_exchange(0, k, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(entry),
                Err(found) if found == k => return Some(entry),
                Err(_) => {}
            }
        }
        None
    }

    /// The barrier of the set `start, stride, size` (this PE a member): `Ok(false)` when the
    /// table is full and the call must pass through.
    pub(crate) fn barrier(
        &mut self,
        start: i32,
        stride: i32,
        size: i32,
        yields: bool,
        timeout: Option<std::time::Duration>,
    ) -> Result<bool> {
        let k = key(start, stride, size);
        let Some(entry) = Self::entry(&self.table, k) else { return Ok(false) };
        let epoch = self.epochs.get(&k).copied().unwrap_or(0) + 1;
        self.epochs.insert(k, epoch);
        let (count, release) = (&entry[LINE_WORDS], &entry[2 * LINE_WORDS]);
        let total = size as u64 * epoch;
        if count.fetch_add(1, Ordering::AcqRel) + 1 == total {
            release.store(epoch, Ordering::Release);
        }
        let began = Instant::now();
        let mut polls: u32 = 0;
        while release.load(Ordering::Acquire) < epoch {
            polls = polls.wrapping_add(1);
            if yields {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            if polls.is_multiple_of(256) {
                call_progress(0);
                if let Some(limit) = timeout.filter(|&l| began.elapsed() >= l) {
                    return Err(Error::Setup(format!(
                        "the active-set barrier {epoch} of PEs {start} + i * 2^{stride} (i < {size}) timed out after \
                         {limit:?}: {} of {size} members arrived",
                        count.load(Ordering::Acquire).saturating_sub(size as u64 * (epoch - 1))
                    )));
                }
            }
        }
        Ok(true)
    }
}

/// The PEs of an active set, if they are valid (OpenSHMEM's rules: a non-negative start and
/// stride exponent, at least one member, every member a PE of the job).
pub(crate) fn members(start: i32, stride: i32, size: i32, npes: usize) -> Option<Vec<usize>> {
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
            let table = world.shared_window(SLOTS * ENTRY_WORDS).unwrap();
            let mut sets = Sets::new(table);
            let (me, n) = (world.rank(), world.size());
            let seen = world.shared_window(n).unwrap();
            for e in 1..=500u64 {
                seen.words()[me].store(e, Ordering::Release);
                assert!(sets.barrier(0, 0, n as i32, true, None).unwrap());
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

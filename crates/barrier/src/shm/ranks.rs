//! The rank table (who joined as each world rank, and how it ended), the live communicators
//! per rank, and the job's abort word: what every slow wait consults.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::wait::{WaitError, Watch};

use super::segment::*;

impl Segment {
    fn rank_word(&self, rank: usize, which: usize) -> Option<&AtomicU64> {
        // The table's place and size as checked when the segment was mapped, never re-read.
        let shape_size = self.layout.shape.world_size;
        if rank >= shape_size {
            return None;
        }
        let words = self.slice::<AtomicU64>(self.layout.rank_table, shape_size * RANK_WORDS);
        Some(&words[rank * RANK_WORDS + which])
    }

    /// Records that this process is world rank `rank`. Fails if another live process already
    /// joined as that rank (a subprocess of a rank that inherited its environment).
    pub fn join(&self, rank: usize) -> Result<()> {
        let me = std::process::id() as u64;
        let word = self.rank_word(rank, JOINED).ok_or_else(|| {
            Error::Bootstrap(format!(
                "rank {rank} is outside this job of {}",
                crate::text::count(self.shape().world_size, "rank")
            ))
        })?;
        match word.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(pid) if pid == me => Ok(()),
            Err(pid) => Err(Error::Bootstrap(format!(
                "rank {rank} of this job has already joined as process {pid}, and this is process {me}: a \
                 process started by a rank inherits its BARRIER_* environment but is not a rank itself \
                 (only the processes `barrier run` starts are); unset BARRIER_SHM_FD in the environment \
                 of programs a rank starts, or do not call barrier::init() in them"
            ))),
        }
    }

    /// The pid of the process that joined as world rank `rank`, once it has.
    pub fn joined_pid(&self, rank: usize) -> Option<u64> {
        self.rank_word(rank, JOINED).map(|w| w.load(Ordering::Acquire)).filter(|&pid| pid != 0)
    }

    /// Records that world rank `rank` ended cleanly (the launcher reaped it with status 0, or
    /// its thread returned); members waiting for it then stop waiting (see `watch.rs`).
    pub fn mark_exited(&self, rank: usize, how: RankExit) {
        let code = match how {
            RankExit::Status(c) => (c as u32 as u64) + 1,
            RankExit::Returned => u64::MAX,
        };
        if let Some(word) = self.rank_word(rank, EXITED) {
            if word.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.header().exits.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    fn live_counts(&self) -> &[std::sync::atomic::AtomicUsize] {
        self.live.get_or_init(|| (0..self.shape().world_size).map(|_| Default::default()).collect())
    }

    /// Counts a communicator of world rank `rank` made in this process (until
    /// [`Segment::communicator_dropped`]).
    pub(crate) fn communicator_made(&self, rank: usize) {
        if let Some(n) = self.live_counts().get(rank) {
            n.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The communicator counted by [`Segment::communicator_made`] is gone.
    pub(crate) fn communicator_dropped(&self, rank: usize) {
        if let Some(n) = self.live_counts().get(rank) {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// How many communicators of world rank `rank` are alive in this process.
    pub(crate) fn live_communicators(&self, rank: usize) -> usize {
        self.live_counts().get(rank).map_or(0, |n| n.load(Ordering::Acquire))
    }

    /// How world rank `rank` ended, if it has.
    pub fn exited(&self, rank: usize) -> Option<RankExit> {
        match self.rank_word(rank, EXITED)?.load(Ordering::Acquire) {
            0 => None,
            u64::MAX => Some(RankExit::Returned),
            code => Some(RankExit::Status((code - 1) as u32 as i32)),
        }
    }

    /// How many ranks have been marked exited (cheap test before scanning the table).
    pub(crate) fn exit_count(&self) -> u64 {
        self.header().exits.load(Ordering::Acquire)
    }

    /// Marks the job as aborted because `world_rank` failed (the first failure wins).
    pub fn set_abort(&self, world_rank: usize) {
        let _ = self.header().abort.compare_exchange(0, world_rank as u64 + 1, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Marks the job as gone: its launcher died, and every wait ends with [`WaitError::JobGone`].
    pub fn set_job_gone(&self) {
        let _ = self.header().abort.compare_exchange(0, JOB_GONE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Why the job is being torn down, if it is: the failed world rank, or the launcher's death.
    pub fn abort_state(&self) -> Result<(), WaitError> {
        match self.header().abort.load(Ordering::Acquire) {
            0 => Ok(()),
            JOB_GONE => Err(WaitError::JobGone),
            r => Err(WaitError::Aborted(r as usize - 1)),
        }
    }
}

impl Watch for Segment {
    fn check(&self, _waited: std::time::Duration) -> Result<(), WaitError> {
        self.abort_state()
    }
}

//! A rank's record in the background set-up's exchange (one `MPI_Iallgather` in the first
//! call), and what every rank reads back from the gathered records: the words, the settings'
//! agreement replayed over them, each rank's node and its node's first rank's offer.
//!
//! A record is [`HEAD`] words (the component's verdict here, the world rank, the machine word,
//! the PID, the offered memfd's descriptor, device and inode, and whether this rank serves the
//! communicator ahead across nodes), then the settings' agreement's [`SETTINGS`] words, then the
//! CPU mask's [`MASK`] words.

use std::time::Duration;

use barrier::hierarchy::aside::{Fault, Offer};
use barrier::hierarchy::Allgather;
use barrier::{Error, Params, Result};

use crate::settings;

/// Words of a rank's record before the settings' words.
pub(super) const HEAD: usize = 8;
/// The settings' agreement's words ([`barrier::hierarchy::agree_settings`]).
pub(super) const SETTINGS: usize = 10;
/// The CPU mask's words.
pub(super) const MASK: usize = 16;
pub(super) const RECORD: usize = HEAD + SETTINGS + MASK;

/// How long a node's other rank retries to map the first rank's segment at least (its
/// `BARRIER_TIMEOUT` if longer): the first rank lays it out at its own next MPI call.
pub(super) const OPEN_LIMIT: Duration = Duration::from_secs(60);

/// The core's agreement's allgather, recorded: the words are kept, and the call fails (the
/// gather is made with the rest of the record).
struct Record {
    me: usize,
    words: std::cell::RefCell<Vec<u64>>,
}

impl Allgather for Record {
    fn me(&self) -> usize {
        self.me
    }

    fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>> {
        *self.words.borrow_mut() = words.to_vec();
        Err(Error::Setup("recorded".into()))
    }
}

/// The core's agreement's allgather, replayed from the gathered records.
struct Replay<'a> {
    me: usize,
    rows: &'a [Vec<u64>],
}

impl Allgather for Replay<'_> {
    fn me(&self) -> usize {
        self.me
    }

    fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>> {
        debug_assert_eq!(words.len(), SETTINGS);
        Ok(self.rows.to_vec())
    }
}

/// This rank's words of the settings' agreement ([`SETTINGS`] of them, if the agreement is
/// what this build expects).
pub(super) fn own_settings(world_rank: usize, params: &Params) -> Vec<u64> {
    let record = Record { me: world_rank, words: Default::default() };
    let _ = settings::agree_settings_over(&record, params);
    record.words.into_inner()
}

/// The settings' agreement, replayed from the gathered records.
pub(super) fn agree(rows: &[&[u64]], world_rank: usize, params: &Params) -> Result<settings::Agreed> {
    let settings_rows: Vec<Vec<u64>> = rows.iter().map(|r| r[HEAD..HEAD + SETTINGS].to_vec()).collect();
    settings::agree_settings_over(&Replay { me: world_rank, rows: &settings_rows }, params)
}

/// A rank's node: its machine and, with node blocks of `block` ranks, its world rank's block.
pub(super) fn node_key(row: &[u64], block: usize) -> (u64, usize) {
    (row[2], (row[1] as usize).checked_div(block).unwrap_or(0))
}

/// Where a node's first rank offered its memfd.
pub(super) fn offer_of(first: &[u64]) -> Offer {
    Offer { pid: first[3] as u32, fd: first[4] as i32, identity: (first[5], first[6]) }
}

/// How long a node's other rank retries to map its first rank's segment: [`OPEN_LIMIT`], or the
/// agreed timeout where longer.
pub(super) fn open_limit(agreed: &settings::Agreed) -> Duration {
    agreed.core.timeout.unwrap_or(OPEN_LIMIT).max(OPEN_LIMIT)
}

/// A test's fault (`BARRIER_MPI_FAULT`) on `world_rank`: `open` on a node's other rank, `join`
/// on any.
pub(super) fn fault(world_rank: usize, agreed: &settings::Agreed) -> Fault {
    let fault = agreed.fault.clone();
    Box::new(move |stage: &str| match &fault {
        Some((s, r)) if s == stage && *r == world_rank => {
            Err(Error::Setup(format!("fault injected by {}={stage}:{world_rank}", settings::FAULT)))
        }
        _ => Ok(()),
    })
}

//! Trees of groups: a communicator past a device's member limit as chunks and a root group.

use barrier_hw::DeviceMap;

use super::device::Device;

/// For each step of `plan`, the number of arrivals sent up to and including it.
pub(super) fn sends_through(plan: &[Step]) -> Vec<u64> {
    plan.iter()
        .scan(0, |sent, step| {
            *sent += u64::from(matches!(step, Step::Arrive(_)));
            Some(*sent)
        })
        .collect()
}

/// Rank 0's claimed groups during `enable`: on drop, the claim locks are released (the members'
/// own locks keep the groups alive from then on) and, if enabling failed, every group nobody
/// attached to is freed at once rather than left to the device's collector.
pub(super) struct Claims<'a> {
    pub(super) dev: &'a Device,
    pub(super) owner: u64,
    pub(super) groups: Vec<usize>,
    pub(super) ok: bool,
}

impl Claims<'_> {
    pub(super) fn succeeded(mut self) -> Self {
        self.ok = true;
        self
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        for &g in &self.groups {
            if self.ok {
                self.dev.release_claim(g);
            } else {
                self.dev.free_unattached(g, self.owner);
            }
        }
    }
}

/// How a communicator maps onto groups: one group when it fits, otherwise a tree.
///
/// With `c` chunks (contiguous blocks of at most `max` ranks), group `2i` gathers chunk `i`,
/// group `2i + 1` broadcasts to it, and group `2c` (the root) holds the chunk leaders (each
/// chunk's first rank). A non-leader arrives at its gather and broadcast groups and waits for
/// the broadcast release; a leader waits for its gather group, arrives at the root, waits for
/// it, then arrives at its broadcast group and waits for it. The broadcast group completes only
/// once its leader has passed the root, which needed every leader to have seen its whole chunk
/// arrive: nobody leaves before everybody arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeShape {
    /// Ranks.
    pub n: usize,
    /// Chunks (1: a single group, no tree).
    pub chunks: usize,
}

/// One step of a rank's barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Send the arrival for stage `.0`.
    Arrive(usize),
    /// Wait for stage `.0`'s release.
    Wait(usize),
}

impl TreeShape {
    /// The shape for `n` ranks and groups of at most `max` members.
    pub fn new(n: usize, max: usize) -> Self {
        TreeShape { n, chunks: n.div_ceil(max.max(1)).max(1) }
    }

    /// Whether `map`'s device can hold this shape; the reason if not.
    pub fn fits(&self, map: &DeviceMap, name: &str) -> Result<(), String> {
        if self.chunks > map.max_members {
            return Err(format!(
                "{} members > {} (a tree of {name} groups would need {} leaders in its root group of at most {})",
                self.n,
                map.max_members * map.max_members,
                self.chunks,
                map.max_members
            ));
        }
        if self.groups() > map.max_groups {
            return Err(format!(
                "{} members need {} {name} groups as a tree, the device has {}",
                self.n,
                self.groups(),
                map.max_groups
            ));
        }
        Ok(())
    }

    /// Groups needed.
    pub fn groups(&self) -> usize {
        if self.chunks == 1 {
            1
        } else {
            2 * self.chunks + 1
        }
    }

    pub(super) fn chunk_of(&self, rank: usize) -> usize {
        rank * self.chunks / self.n
    }

    /// The first rank of chunk `chunk` (its leader).
    pub fn first_of(&self, chunk: usize) -> usize {
        (chunk * self.n).div_ceil(self.chunks)
    }

    /// The rank that is member `member` of group `k`.
    pub(super) fn rank_of(&self, k: usize, member: usize) -> usize {
        if self.chunks == 1 {
            member
        } else if k == 2 * self.chunks {
            self.first_of(member)
        } else {
            self.first_of(k / 2) + member
        }
    }

    /// Members of group `k`.
    pub fn members_of(&self, k: usize) -> usize {
        if self.chunks == 1 {
            self.n
        } else if k == 2 * self.chunks {
            self.chunks
        } else {
            let chunk = k / 2;
            self.first_of(chunk + 1) - self.first_of(chunk)
        }
    }

    /// The groups `rank` belongs to, as (group index, member index), in plan order.
    pub(super) fn roles(&self, rank: usize) -> Vec<(usize, usize)> {
        if self.chunks == 1 {
            return vec![(0, rank)];
        }
        let chunk = self.chunk_of(rank);
        let local = rank - self.first_of(chunk);
        let mut r = vec![(2 * chunk, local), (2 * chunk + 1, local)];
        if local == 0 {
            r.push((2 * self.chunks, chunk));
        }
        r
    }

    /// The steps of `rank`'s barrier, over the stages in `roles` order.
    pub(super) fn plan(&self, rank: usize) -> Vec<Step> {
        if self.chunks == 1 {
            return vec![Step::Arrive(0), Step::Wait(0)];
        }
        let leader = rank == self.first_of(self.chunk_of(rank));
        if leader {
            // stages: 0 gather, 1 broadcast, 2 root
            vec![Step::Arrive(0), Step::Wait(0), Step::Arrive(2), Step::Wait(2), Step::Arrive(1), Step::Wait(1)]
        } else {
            vec![Step::Arrive(0), Step::Arrive(1), Step::Wait(1)]
        }
    }
}

//! The node phases of a hierarchical barrier: one node's ranks gather up a k-ary tree of
//! cache-line-padded slots, and the node root releases them all through one flag.
//!
//! Local rank 0 (the lowest communicator rank on the node) is the node root; the parent of
//! local rank `l` is `(l - 1) / k` and its children are `k*l + 1 ..= k*l + k`. A radix of at
//! least the node's size less one is the flat gather (the root reads every rank's slot). Every
//! rank owns an **up-slot**, a [`Flag`] alone on its cache line, written only by itself and read
//! only by its parent: "my subtree has arrived at epoch e". The node has one **release flag**,
//! written only by the root and read by every other rank of the node: "you may leave epoch e".
//!
//! **Gather**: wait until every child's up-slot holds at least `e`, then store `e` into the own
//! up-slot (the root stores nothing: it goes on to the phase among roots, if any).
//! **Release**: the root stores `e` into the release flag; every other rank waits until it
//! holds at least `e`.
//!
//! One release flag rather than a fanout down the tree: the root makes one store instead of one
//! per child, a rank waits for one line instead of for each level above it, and a parked node
//! is woken by one futex call (the raw protocols of `barrier bench`'s floor compare the two
//! shapes; docs/benchmark.md).
//!
//! Values only grow (epochs), so nothing is reset, no sense flag is kept, and a slot left at
//! `e` is already correct for a waiter of any epoch up to `e`. A child cannot store `e + 1`
//! into its up-slot before the root released `e`, which the root does only after its own gather
//! of `e`; so a parent never mistakes a later epoch for this one, and no rank passes the release
//! of `e` before the root finished `e`, which needed every rank of the node to arrive. Each
//! store is a release and each wait an acquire, so everything a rank wrote before arriving is
//! visible to every rank after the barrier (a chain up the tree, across the phase among roots,
//! and through the release flag).
//!
//! The protocol is generic over how a slot is held (`S: Deref<Target = Flag>`), so that the
//! same code runs on shared-memory slots in the library and on loom's model in
//! `tests/loom.rs`.

use std::ops::{Deref, Range};

use crate::wait::Flag;

/// The shape of one node's tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalTree {
    /// Ranks on the node.
    pub size: usize,
    /// Children per rank.
    pub radix: usize,
}

impl LocalTree {
    /// A tree of `size` ranks with `radix` children each (at least 1).
    pub fn new(size: usize, radix: usize) -> Self {
        LocalTree { size, radix: radix.max(1) }
    }

    /// Levels below the root: the stores on the way up from the deepest rank (and down to
    /// it), which a gather waits through one after another.
    pub fn depth(&self) -> usize {
        let mut l = self.size.saturating_sub(1);
        let mut depth = 0;
        while let Some(parent) = self.parent(l) {
            l = parent;
            depth += 1;
        }
        depth
    }

    /// The parent of local rank `l`; `None` for the root.
    pub fn parent(&self, l: usize) -> Option<usize> {
        (l > 0).then(|| (l - 1) / self.radix)
    }

    /// The children of local rank `l`.
    pub fn children(&self, l: usize) -> Range<usize> {
        let first = l.saturating_mul(self.radix).saturating_add(1).min(self.size);
        let end = l.saturating_mul(self.radix).saturating_add(self.radix + 1).min(self.size);
        first..end
    }
}

/// The slots one rank touches: its own up-slot (none for the root), its children's, and the
/// node's release flag.
#[derive(Debug)]
pub struct TreeSlots<S> {
    /// This rank's up-slot (it writes, the parent reads); `None` for the root.
    pub up: Option<S>,
    /// Each child's up-slot, in child order.
    pub children_up: Vec<S>,
    /// The node's release flag: the root stores it, every other rank waits on it.
    pub release: S,
}

impl<S: Deref<Target = Flag>> TreeSlots<S> {
    /// Whether this rank is the node root (it has no up-slot).
    pub fn is_root(&self) -> bool {
        self.up.is_none()
    }

    /// The gather at `epoch`, resumable: `next_child` is where the previous call stopped (0 to
    /// start). `Err(slot)`: wait until that slot reaches `epoch`, then call again. `Ok`: the
    /// subtree has arrived and (for a non-root) the up-slot says so.
    #[inline]
    pub fn gather(&self, next_child: &mut usize, epoch: u64, wake: bool) -> Result<(), &Flag> {
        while let Some(slot) = self.children_up.get(*next_child) {
            if !slot.reached(epoch) {
                return Err(slot);
            }
            *next_child += 1;
        }
        if let Some(up) = &self.up {
            up.signal(epoch, wake);
        }
        Ok(())
    }

    /// The release at `epoch`: the root stores it and returns `Ok`; any other rank gets
    /// `Err(flag)` until the release flag reaches `epoch`.
    #[inline]
    pub fn release(&self, epoch: u64, wake: bool) -> Result<(), &Flag> {
        if self.is_root() {
            self.release.signal(epoch, wake);
            return Ok(());
        }
        if self.release.reached(epoch) {
            Ok(())
        } else {
            Err(&self.release)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn depth_is_the_longest_path_to_the_root() {
        assert_eq!(LocalTree::new(1, 8).depth(), 0);
        assert_eq!(LocalTree::new(9, 8).depth(), 1);
        assert_eq!(LocalTree::new(10, 8).depth(), 2);
        assert_eq!(LocalTree::new(48, 8).depth(), 2);
        assert_eq!(LocalTree::new(8, 1).depth(), 7);
        assert_eq!(LocalTree::new(7, 2).depth(), 2);
    }

    #[test]
    fn every_rank_but_the_root_has_one_parent_that_lists_it_as_a_child() {
        for size in [1, 2, 3, 5, 8, 13, 64] {
            for radix in [1, 2, 3, 4, 8, 64] {
                let t = LocalTree::new(size, radix);
                assert_eq!(t.parent(0), None);
                for l in 1..size {
                    let p = t.parent(l).unwrap();
                    assert!(p < l && t.children(p).contains(&l), "size {size} radix {radix} rank {l}");
                }
                let listed: usize = (0..size).map(|l| t.children(l).len()).sum();
                assert_eq!(listed, size - 1);
            }
        }
    }

    #[test]
    fn a_parent_waits_for_the_child_that_has_not_arrived() {
        let flags: Vec<Flag> = (0..2).map(|_| Flag::default()).collect();
        let root = TreeSlots { up: None, children_up: vec![&flags[0]], release: &flags[1] };
        let child = TreeSlots { up: Some(&flags[0]), children_up: vec![], release: &flags[1] };
        let mut next = 0;
        assert!(std::ptr::eq(root.gather(&mut next, 1, false).unwrap_err(), &flags[0]));
        assert!(child.release(1, false).is_err(), "nobody released the child yet");
        let mut c = 0;
        child.gather(&mut c, 1, false).unwrap();
        root.gather(&mut next, 1, false).unwrap();
        root.release(1, false).unwrap();
        child.release(1, false).unwrap();
        // The next epoch starts from where the slots are: no reset needed.
        let mut next = 0;
        assert!(root.gather(&mut next, 2, false).is_err());
        assert!(child.release(2, false).is_err());
    }
}

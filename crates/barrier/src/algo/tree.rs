//! Phases 1 and 3 of the hierarchical barrier: one node's ranks as a k-ary tree over
//! cache-line-padded slots.
//!
//! Local rank 0 (the lowest communicator rank on the node) is the node root; the parent of
//! local rank `l` is `(l - 1) / k` and its children are `k*l + 1 ..= k*l + k`. Every rank owns
//! two slots, each a [`Flag`] alone on its cache line:
//!
//! * its **up-slot**, written only by itself and read only by its parent: "my subtree has
//!   arrived at epoch e";
//! * its **down-slot**, written only by its parent and read only by itself: "you may leave
//!   epoch e".
//!
//! **Gather** (phase 1): wait until every child's up-slot holds at least `e`, then store `e`
//! into the own up-slot (the root stores nothing: it goes on to the internode phase).
//! **Fanout** (phase 3): a non-root waits until its down-slot holds at least `e`; then every
//! rank stores `e` into each child's down-slot.
//!
//! Values only grow (epochs), so nothing is reset, no sense flag is kept, and a slot left at
//! `e` is already correct for a waiter of any epoch up to `e`. A child cannot store `e + 1`
//! into its up-slot before its parent released it from `e`, which the parent does only after
//! its own gather of `e`; so the parent never mistakes a later epoch for this one, and no rank
//! passes the fanout of `e` before the root finished `e`, which needed every rank of the node
//! to arrive. Each store is a release and each wait an acquire, so everything a rank wrote
//! before arriving is visible to every rank after the barrier (a chain up the tree, across the
//! internode phase, and down).
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
    /// it), which a gather or a fanout waits through one after another.
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

/// The slots one rank touches: its own two (none for the root) and its children's.
#[derive(Debug)]
pub struct TreeSlots<S> {
    /// This rank's up-slot (it writes, the parent reads); `None` for the root.
    pub up: Option<S>,
    /// This rank's down-slot (the parent writes, it reads); `None` for the root.
    pub down: Option<S>,
    /// Each child's up-slot, in child order.
    pub children_up: Vec<S>,
    /// Each child's down-slot, in child order.
    pub children_down: Vec<S>,
}

impl<S: Deref<Target = Flag>> TreeSlots<S> {
    /// Whether this rank has children.
    pub fn has_children(&self) -> bool {
        !self.children_up.is_empty()
    }

    /// Phase 1 at `epoch`, resumable: `next_child` is where the previous call stopped (0 to
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

    /// Phase 3 at `epoch`: `Err(slot)` while this rank's down-slot has not reached `epoch`;
    /// then releases every child and returns `Ok`.
    #[inline]
    pub fn fanout(&self, epoch: u64, wake: bool) -> Result<(), &Flag> {
        if let Some(down) = &self.down {
            if !down.reached(epoch) {
                return Err(down);
            }
        }
        for child in &self.children_down {
            child.signal(epoch, wake);
        }
        Ok(())
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
        let flags: Vec<Flag> = (0..4).map(|_| Flag::default()).collect();
        let root = TreeSlots { up: None, down: None, children_up: vec![&flags[0]], children_down: vec![&flags[1]] };
        let child =
            TreeSlots { up: Some(&flags[0]), down: Some(&flags[1]), children_up: vec![], children_down: vec![] };
        let mut next = 0;
        assert!(std::ptr::eq(root.gather(&mut next, 1, false).unwrap_err(), &flags[0]));
        assert!(child.fanout(1, false).is_err(), "nobody released the child yet");
        let mut c = 0;
        child.gather(&mut c, 1, false).unwrap();
        root.gather(&mut next, 1, false).unwrap();
        root.fanout(1, false).unwrap();
        child.fanout(1, false).unwrap();
        // The next epoch starts from where the slots are: no reset needed.
        let mut next = 0;
        assert!(root.gather(&mut next, 2, false).is_err());
        assert!(child.fanout(2, false).is_err());
    }
}

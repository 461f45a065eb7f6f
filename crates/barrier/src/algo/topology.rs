//! Who is where in a communicator that spans nodes: the nodes, their roots (each node's lowest
//! rank) and this rank's node tree. The hierarchical backend's phases and the A64FX backend's
//! CMG leaders (CMGs in the role of nodes) are planned from it.

use super::tree::{LocalTree, TreeSlots};
use crate::wait::Flag;

/// Who is where: the nodes of a communicator, their roots, and this rank's node tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Communicator rank of each node's root, by node index (nodes in ascending id order).
    pub(crate) roots: Vec<usize>,
    /// The communicator ranks on this rank's node, in order (the first is the root).
    pub(crate) local: Vec<usize>,
    /// This rank's index in `local`.
    pub(crate) me: usize,
    pub(crate) tree: LocalTree,
}

impl Topology {
    /// The topology seen by `rank`, given each member's node.
    pub fn new(node_of: &[usize], rank: usize, radix: usize) -> Self {
        let mut ids: Vec<usize> = node_of.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let roots = ids.iter().map(|&id| node_of.iter().position(|&n| n == id).expect("a member")).collect();
        let local: Vec<usize> = (0..node_of.len()).filter(|&r| node_of[r] == node_of[rank]).collect();
        let me = local.iter().position(|&r| r == rank).expect("rank is on its node");
        let tree = LocalTree::new(local.len(), radix);
        Topology { roots, local, me, tree }
    }

    /// Nodes spanned.
    pub fn nodes(&self) -> usize {
        self.roots.len()
    }

    /// Communicator rank of each node's root.
    pub fn roots(&self) -> &[usize] {
        &self.roots
    }

    /// `rank`'s index among the roots, if it is one.
    pub fn root_index(&self, rank: usize) -> Option<usize> {
        self.roots.iter().position(|&r| r == rank)
    }

    /// The communicator rank of this node's local rank `l`.
    pub(crate) fn rank_of(&self, l: usize) -> usize {
        self.local[l]
    }
}

/// This rank's slots of its node's gather and release in a communicator's `region`: the
/// up-slots are the region's tree up-slots, and the node's release flag is its root's down-slot
/// (which no tree of the region writes otherwise: a root has no parent).
pub(crate) fn node_slots(region: &crate::region::Region, topo: &Topology) -> TreeSlots<crate::shm::Shared<Flag>> {
    let up = |rank: usize| region.shared_flag(&region.tree_up()[rank]);
    TreeSlots {
        up: (topo.me != 0).then(|| up(topo.rank_of(topo.me))),
        children_up: topo.tree.children(topo.me).map(|l| up(topo.rank_of(l))).collect(),
        release: region.shared_flag(&region.tree_down()[topo.rank_of(0)]),
    }
}

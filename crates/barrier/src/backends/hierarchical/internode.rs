//! Phase 2 of the hierarchical barrier: the node roots, one per node, and nobody else.
//!
//! * **dissemination** over the transport: ⌈log2 nodes⌉ rounds; in round `r` root `j` puts the
//!   epoch into round-`r` slot of root `(j + 2^r) mod nodes` and waits for its own round-`r`
//!   slot (`algo::dissemination::FabricDissemination` among the roots). Slots only grow, so
//!   nothing is reset between barriers and no put is spent on a reset.
//! * **a device group of the roots** (`switch` or `gba`): the backend of that name, found in the
//!   selector's registry ([`EnableContext::backend`]) and enabled on the roots alone
//!   ([`enable_on_subset`]: their own region in the job segment, their own control plane). Each
//!   root sends one arrival per barrier and polls its release flag; a 4,096-rank job on 128
//!   nodes needs one 128-member group. A device fault is that backend's business: every root
//!   leaves the device at the same epoch for its software fallback among the roots, so ranks
//!   below the roots never notice. This file names the devices only as strings, the values of
//!   `BARRIER_HIER_INTERNODE`: it imports no other backend.

use crate::algo::topology::Topology;
use crate::backend::subset::{enable_on_subset, SubsetModule, SubsetOutcome};
use crate::backend::{Decline, EnableContext};

/// The devices `BARRIER_HIER_INTERNODE=auto` tries among the roots, in the order of their
/// default priorities (GBA 100, switch 90), skipping any whose `BARRIER_<NAME>_DISABLE` is set.
pub(super) const AUTO_DEVICES: [&str; 2] = ["gba", "switch"];

/// A device group of the node roots, on a root.
pub(super) type RootsDevice = SubsetModule;

/// Tries to enable the backend called `name` on a group of the node roots. Collective over the
/// whole communicator; every rank returns the same variant (`Member` on roots, `NotMember`
/// elsewhere) or the same decline.
pub(super) fn enable_device(ctx: &EnableContext<'_>, name: &str, topo: &Topology) -> Result<SubsetOutcome, Decline> {
    match ctx.backend(name) {
        Some(backend) => enable_on_subset(ctx, backend, topo.roots()),
        // The registry is the same on every rank (one build), so is this answer.
        None => Ok(SubsetOutcome::Declined(format!("this build has no backend called {name}"))),
    }
}

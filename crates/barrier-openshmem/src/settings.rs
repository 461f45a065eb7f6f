//! The settings of the OpenSHMEM layer, declared here and registered with the core's registry
//! ([`register`]) before set-up reads them, so that the set-up's check covers them and
//! `barrier info` lists them.

use barrier::params::ParamKind;
use barrier::ParamInfo;

/// `BARRIER_SHMEM_NODE_BLOCK`: every K consecutive PEs of a machine are one simulated node.
pub const NODE_BLOCK: &str = "BARRIER_SHMEM_NODE_BLOCK";
/// `BARRIER_SHMEM_PROGRESS`: a waiting PE keeps the implementation progressing.
pub const PROGRESS: &str = "BARRIER_SHMEM_PROGRESS";
/// `BARRIER_SHMEM_INTERNODE`: how the node roots meet when every node has one PE.
pub const INTERNODE: &str = "BARRIER_SHMEM_INTERNODE";
/// barrier-mpi's node block, read when [`NODE_BLOCK`] is unset (one job can test both layers
/// with one variable). Declared and checked by barrier-mpi, not here.
pub const MPI_NODE_BLOCK: &str = "BARRIER_MPI_NODE_BLOCK";

/// The OpenSHMEM layer's settings, as `barrier info` lists them.
pub fn params() -> Vec<ParamInfo> {
    vec![
        ParamInfo::new(
            NODE_BLOCK,
            "0",
            "OpenSHMEM only: pretend that every K consecutive PEs of a machine are one node, so the internode \
             path (OpenSHMEM puts between node roots) runs on one machine. 0: nodes are the machines (by host \
             name). Unset: BARRIER_MPI_NODE_BLOCK's value.",
        )
        .kind(ParamKind::Int { min: 0, max: i32::MAX as i64 }),
        ParamInfo::new(
            PROGRESS,
            "1",
            "OpenSHMEM only: a PE waiting in a barrier keeps the implementation progressing (Open MPI's \
             opal_progress), so that a put to a static variable aimed at it lands meanwhile. 0 turns it off \
             (a negative control: such a put before a barrier then never lands).",
        )
        .kind(ParamKind::Bool),
        ParamInfo::new(
            INTERNODE,
            "auto",
            "OpenSHMEM only, where every node has one PE: dissemination: our rounds over OpenSHMEM atomics \
             between the PEs (a timeout or stall report names the PE waited for); shmem: the implementation's \
             own shmem_barrier_all and shmem_sync_all serve (passed through); auto: the PEs time both at \
             shmem_init and keep the faster (ours only when 5% faster), unless BARRIER_TIMEOUT or \
             BARRIER_STALL_REPORT is set (dissemination). Nodes of several PEs always run ours. PE 0's value \
             holds.",
        )
        .kind(ParamKind::Choice(&["auto", "dissemination", "shmem"])),
    ]
}

/// Registers [`params`] with the core's registry as the layer `openshmem` (once; later calls do
/// nothing).
pub fn register() {
    barrier::registry::register_layer("openshmem", params);
}

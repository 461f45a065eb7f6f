//! The settings of communicators over MPI (this crate, its interposer and Open MPI's
//! components), declared here and registered with the core's registry ([`register`]) before the
//! first communicator reads them, so that every rank checks them and `barrier info` lists them.
//! Built with or without the `mpi` feature: `barrier info` lists them in either build.

use barrier::params::ParamKind;
use barrier::ParamInfo;

/// `BARRIER_MPI_NODE_BLOCK`: every K consecutive world ranks of a machine are one node.
pub const NODE_BLOCK: &str = "BARRIER_MPI_NODE_BLOCK";
/// `BARRIER_MPI_INTERNODE`: how the node roots meet (ours, MPI's barrier, or timed).
pub const INTERNODE: &str = "BARRIER_MPI_INTERNODE";
/// `BARRIER_MPI_PROGRESS`: a waiting rank keeps MPI's progress engine turning.
pub const PROGRESS: &str = "BARRIER_MPI_PROGRESS";
/// `BARRIER_MPI_FAULT`: a set-up stage that fails on one rank (tests).
pub const FAULT: &str = "BARRIER_MPI_FAULT";

/// The settings of communicators over MPI, as `barrier info` lists them.
pub fn params() -> Vec<ParamInfo> {
    vec![
        ParamInfo::new(
            NODE_BLOCK,
            "0",
            "MPI only: pretend that every K consecutive MPI_COMM_WORLD ranks of a machine are one node, so the \
             internode path (MPI between node roots) runs on one machine. 0: nodes are the machines \
             (MPI_COMM_TYPE_SHARED).",
        )
        .kind(ParamKind::Int { min: 0, max: i32::MAX as i64 }),
        ParamInfo::new(
            INTERNODE,
            "auto",
            "MPI only: how the node roots meet across nodes. dissemination: our rounds over MPI point-to-point \
             (a timeout or stall report names the root waited for); mpi: MPI's barrier on a \
             communicator of the roots (MPI_Barrier; MPI_Ibarrier for split-phase barriers and under a \
             timeout, whose report cannot name the missing root); auto: the roots time \
             both when the communicator is made and keep the faster, unless BARRIER_TIMEOUT or \
             BARRIER_STALL_REPORT is set (dissemination, whose reports name the missing root). Rank 0's \
             value holds.",
        )
        .kind(ParamKind::Choice(&["auto", "dissemination", "mpi"])),
        ParamInfo::new(
            PROGRESS,
            "1",
            "MPI only: a rank waiting in a barrier keeps MPI's progress engine turning (one MPI_Iprobe every 16 \
             yields and around every park, parks cut to 1 ms), so that a large send to it or a one-sided read of \
             its window completes meanwhile, as MPI's progress rule promises. 0 turns it off (tests; programs \
             that never rely on it).",
        )
        .kind(ParamKind::Bool),
        ParamInfo::new(
            FAULT,
            "",
            "MPI only, tests: make one set-up stage fail on one MPI_COMM_WORLD rank, STAGE:RANK with STAGE one of \
             open (mapping the node's segment), join (joining it), internode (the internode set-up), group \
             (scoll only: an active set's communicator), exchange (coll only: the set-up's exchange started at a \
             first MPI_Ibarrier). Every rank must then fall back to MPI_Barrier together (after group and \
             exchange, that rank ends the job, saying why: the others wait for it inside MPI).",
        ),
    ]
}

/// Registers [`params`] with the core's registry as the layer `mpi` (once; later calls do
/// nothing).
pub fn register() {
    barrier::registry::register_layer("mpi", params);
}

//! `barrier model`: a latency model of every backend for job shapes this machine cannot run.
//!
//! A barrier's latency is the sum of the steps on its critical path, and each backend's steps
//! come from the **same planning functions the backend runs**: the dissemination rounds
//! ([`barrier::rounds`]), the depth of a node's k-ary gather and fanout tree
//! ([`barrier::algo::tree::LocalTree::depth`] at `BARRIER_HIER_RADIX`'s default), the tree of device groups past a
//! device's member limit and whether the device can hold it ([`TreeShape`](barrier::backends::offload::TreeShape)), the A64FX node's
//! CMGs. A change to a backend's plan changes the model with it.
//!
//! Each step costs a constant of one of two kinds:
//!
//! * **this machine's**, measured by `barrier model --calibrate` (and read back from a small
//!   file): a shared-memory flag hand-off between two cores, a futex wake, a yield hand-off on
//!   one core, the emulated device's work per barrier;
//! * **the network's**, from a named profile (InfiniBand HDR, Slingshot, Tofu-D, the simulated
//!   nodes of `barrier run --nodes`) or `custom:PUT,GAP`: the one-way latency of a small put
//!   between nodes, the gap between two messages a NIC injects, the time a barrier device (an
//!   in-network switch, a GBA) adds per stage. Every constant's source is in `docs/model.md`.
//!
//! The parts are, per barrier: the intranode gather (tree levels × a flag hand-off), the
//! internode rounds (dissemination rounds × a put, plus the NIC's injection gap for the puts a
//! node sends in the round), the device stages (one per level of its group tree: every member's
//! arrival leaves its NIC, crosses to the device, is aggregated, and the release comes back),
//! and the fanout. A round whose puts cross between nodes costs a put even if only some of them
//! do: the last one is on the critical path.
//!
//! The model is checked against this machine's own runs: `barrier model --check` measures
//! dissemination and hierarchical barriers across simulated nodes (`BARRIER_NET_PUT_LATENCY`)
//! and compares them with what it predicts for the `sim:` profile; `barrier model --check-mpi`
//! measures them over a real MPI's messages (the network namespaces of `tests/net`), its
//! network constant from a ping-pong in the same run.

mod calibrate;
mod check;
pub mod cli;
mod mpi_check;
mod predict;
mod report;
#[cfg(test)]
mod tests;

pub use calibrate::{calibrate, calibrate_from_bench};
pub use check::{check, Check, Verdict, BUSY_CORES, CHECK_ATTEMPTS, CHECK_TOLERANCE, STABLE_SPREAD};
pub use mpi_check::{check_mpi, parse_layouts, parse_report, predict_over_mpi, MpiCheck, MpiCheckOptions, RootsWay};
pub use predict::*;
pub use report::{json, report, sweep, sweep_nodes};

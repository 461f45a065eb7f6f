//! Communicators: a group of ranks with one barrier module.
//!
//! A [`Communicator`] is one rank's handle on a group. It is `Send` (move it to the thread that
//! uses it) but not `Sync`: like an MPI communicator, one thread drives it at a time. Creating,
//! splitting and duplicating communicators are **collective**: every member calls them, in the
//! same order.
//!
//! # The folder
//!
//! `names.rs` (the interface's small types) ← `communicator.rs` (the state and the barrier
//! path) ← `create.rs` (creation, split, dup), `request.rs` (`ibarrier`), `window.rs` (shared
//! windows).

mod communicator;
mod composed;
pub(crate) mod create;
mod names;
mod request;
mod window;

pub use communicator::Communicator;
pub use names::{BackendName, Color, Key};
pub use request::Request;
pub use window::SharedWindow;

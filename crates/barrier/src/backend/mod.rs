//! The backend (component) and module traits.
//!
//! A [`Backend`] is a way to do barriers (a device, an algorithm family). For each new
//! communicator the selector asks every backend, by priority, whether it can serve it:
//! [`Backend::query`] is a cheap local check that returns a reason a person can read when the
//! answer is no; [`Backend::enable`] is collective and builds the per-communicator [`Module`].
//!
//! # The barrier contract
//!
//! A module's barrier at epoch `e` (arrive, then progress until [`Poll::Ready`]) guarantees:
//!
//! 1. **No early exit.** No rank sees `Ready` for `e` before every rank of the communicator has
//!    called `arrive(e)`.
//! 2. **Visibility.** Every write a rank made before `arrive(e)` happens-before every read any
//!    rank makes after it sees `Ready` for `e`. Software modules get this from release stores
//!    of epochs and acquire loads of them (a chain of release/acquire pairs across rounds);
//!    hardware modules from the device's release store into host memory, read with acquire.
//! 3. **Monotone epochs.** Epochs passed to `arrive` increase by one per barrier, starting at 1.
//!    Every signal means "reached epoch e" and every wait is "until at least e", so state is
//!    never reset and a module can take over at any epoch (how the fallback works).
//! 4. **Progress without blocking.** `arrive` and `progress` never block; a module that cannot
//!    finish yet returns [`Poll::Pending`] with the flag it waits on, and the communicator waits
//!    on it with the agreed wait policy (spin, yield, park) and timeout.
//!
//! # The folder
//!
//! * `module.rs`: [`Module`] and [`Poll`], the contract above.
//! * `component.rs`: [`Backend`], [`Decline`], the [`QueryContext`] and [`EnableContext`] a
//!   backend is given.
//! * `mailbox.rs`: [`Mailboxes`], flags per rank that any rank can signal through the best
//!   transport ([`EnableContext::mailboxes`]): what a backend written outside this crate builds
//!   its protocol on.

mod component;
mod mailbox;
mod module;

pub(crate) use component::net_model;
pub use component::{Backend, Decline, EnableContext, QueryContext, NET_ASYNC, NET_PUT_LATENCY};
pub use mailbox::{Mailboxes, Outbox};
pub use module::{Module, Poll};

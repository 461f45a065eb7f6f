//! The backends, one folder each, none importing another (what two share lives in
//! [`crate::algo`]; the hierarchical backend runs a device among its node roots as a
//! communicator of the roots, naming the device's backend in its selection, never importing it):
//!
//! * [`offload`]: the switch offload and the Global Barrier Accelerator (registered as `switch`
//!   and `gba`: one protocol, the two devices as data);
//! * [`a64fx`]: the A64FX's barrier blades;
//! * [`hierarchical`]: gather in each node, the node roots among themselves, one release flag
//!   per node (on one node: the flat barrier);
//! * [`dissemination`]: the software barrier that works everywhere (its flag algorithms are in
//!   [`crate::algo::flag`]; it chooses among them).

pub mod a64fx;
pub mod dissemination;
pub mod hierarchical;
pub mod offload;

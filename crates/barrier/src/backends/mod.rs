//! The backends. Each hardware family gets its own module ([`hw`] drives the switch offload and
//! the Global Barrier Accelerator, [`a64fx`] the A64FX's barrier blades); the software barrier that works everywhere is [`software`],
//! named `dissemination` in parameters and reports.

pub mod a64fx;
pub mod hierarchical;
pub mod offload;
pub mod software;

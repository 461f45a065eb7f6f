//! The backends. Each hardware family gets its own module; the software barrier that works
//! everywhere is [`software`], named `dissemination` in parameters and reports.

pub mod software;

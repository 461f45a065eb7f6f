//! The measurement record beneath `barrier bench` and `barrier model`: a row ([`Row`], its
//! [`Stats`]), the plot of rows against rank or node count ([`plot`]), and the date and machine
//! a record was taken on. The bench measures rows; the model predicts and calibrates rows; both
//! print, plot and date them the same way, from here.

mod date;
pub mod plot;
mod row;

pub(crate) use date::machine_name;
pub use date::today_utc;
pub use row::{Row, Stats, P99_SAMPLES};

//! The small types of the communicator's interface: a backend's name, and the color and key
//! of a split.

use std::fmt;

/// The name of the backend a communicator uses. Compares equal to its `&str` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendName(pub &'static str);

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<&str> for BackendName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<str> for BackendName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// The color argument of [`crate::Communicator::split`]: a value, or `Undefined` to join no group
/// (MPI_UNDEFINED). Any unsigned integer converts, so `split(rank % 3, rank)` needs no casts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Ranks with the same value end up in the same communicator.
    Value(u64),
    /// This rank gets no communicator.
    Undefined,
}

macro_rules! color_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Color {
            fn from(v: $t) -> Self {
                Color::Value(v as u64)
            }
        }
    )*};
}
color_from!(u8, u16, u32, u64, usize);

/// The key argument of [`crate::Communicator::split`]: ranks of a new communicator are ordered by key,
/// then by their rank in the old one. Any integer converts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key(pub i64);

macro_rules! key_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Key {
            fn from(v: $t) -> Self {
                Key(i64::try_from(v).unwrap_or(i64::MAX))
            }
        }
    )*};
}
key_from!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

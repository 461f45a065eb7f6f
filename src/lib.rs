//! Workspace suite: see tests/, examples/ and benches/.

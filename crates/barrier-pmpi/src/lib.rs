//! PMPI interposer (filled below).

//! Text for people: the one-line messages the library and its sibling crates (barrier-mpi, the
//! components, the interposers, the launcher) print, written the same way everywhere.
//!
//! ```
//! assert_eq!(barrier::text::count(1, "rank"), "1 rank");
//! assert_eq!(barrier::text::count(3, "rank"), "3 ranks");
//! barrier::text::say("barrier: an example line on stderr");
//! ```

/// `n` and the noun, singular for one: "1 rank", "3 ranks".
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Writes `line` and a newline to stderr in one `write` (lines up to the pipe buffer are never
/// cut or interleaved with other ranks' output, even if the process is killed right after).
pub fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

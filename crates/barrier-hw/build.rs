//! Hashes this crate's sources into `BARRIER_HW_SOURCE_HASH` ([`SOURCE_HASH`](crate::SOURCE_HASH)):
//! the register maps and flag layouts are the driver side of every emulated device's protocol,
//! so `barrier`'s inline-library interface version folds this hash in.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    // FNV-1a over each file's path (relative to this crate) and contents.
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for file in &files {
        let name = file.strip_prefix(&root).unwrap_or(file).to_string_lossy().into_owned();
        let bytes = std::fs::read(file).unwrap_or_default();
        for b in name.as_bytes().iter().chain(&bytes) {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=BARRIER_HW_SOURCE_HASH={hash:016x}");
}

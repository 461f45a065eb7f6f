//! Publishes the directory of `c/fastbar_glue.h` (the C side of the structures `src/glue.rs`
//! shares with the Open MPI components' C glues) to the crates that depend on this one: they
//! read it as `DEP_FASTBAR_GLUE_INCLUDE` (this package's `links = "fastbar_glue"`). Nothing is
//! compiled or linked here.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=c/fastbar_glue.h");
    let dir = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR")).join("c");
    println!("cargo:include={}", dir.display());
}

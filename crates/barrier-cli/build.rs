//! Records where this build puts its artifacts (`<target>/<profile>`, three levels above
//! OUT_DIR), so that an installed `barrier` (which `cargo install` copies away from the build)
//! still finds the inline emulator library built beside it.

fn main() {
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Some(profile_dir) = out_dir.ancestors().nth(3) {
        println!("cargo:rustc-env=BUILD_PROFILE_DIR={}", profile_dir.display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}

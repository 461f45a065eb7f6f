//! With the `oshmem` feature: compiles the component's C glue (`c/scoll_fastbar.c`) against the
//! installed OSHMEM headers and links it whole into the library. Without it: nothing.

/// Bytes of the Rust static that holds the component structure (`src/scoll.rs` has the same
/// number; the C side checks that its structure fits).
#[cfg(feature = "oshmem")]
const COMPONENT_BYTES: usize = 1024;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "oshmem")]
    oshmem::build();
}

#[cfg(feature = "oshmem")]
mod oshmem {
    use std::path::PathBuf;
    use std::process::Command;

    fn showme(wrapper: &str, what: &str) -> Vec<String> {
        let out = Command::new(wrapper).arg(format!("--showme:{what}")).output().unwrap_or_else(|e| {
            panic!(
                "barrier-oshmem: `{wrapper} --showme:{what}` could not run ({e}): install Open MPI's development files \
                 (Debian: libopenmpi-dev), or set BARRIER_OMPI_MPICC"
            )
        });
        if !out.status.success() {
            panic!("barrier-oshmem: `{wrapper} --showme:{what}` failed: {wrapper} is not Open MPI's wrapper");
        }
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
    }

    pub fn build() {
        println!("cargo:rerun-if-env-changed=BARRIER_OMPI_MPICC");
        let wrapper = std::env::var("BARRIER_OMPI_MPICC").unwrap_or_else(|_| {
            ["mpicc.openmpi", "mpicc"]
                .into_iter()
                .find(|w| Command::new(w).arg("--showme:version").output().is_ok_and(|o| o.status.success()))
                .unwrap_or("mpicc.openmpi")
                .to_string()
        });
        let incdirs = showme(&wrapper, "incdirs");
        let libdirs = showme(&wrapper, "libdirs");
        // The installed OSHMEM headers live beside Open MPI's (include/openshmem) and include
        // two files by their source-tree paths: a shim directory maps them to the installed ones.
        let base = PathBuf::from(incdirs.first().expect("mpicc names an include directory"));
        let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
        let shim = out.join("shim");
        for (path, installed) in [("oshmem/include/shmem.h", "shmem.h"), ("ompi/include/mpi.h", "mpi.h")] {
            let file = shim.join(path);
            std::fs::create_dir_all(file.parent().expect("a parent")).expect("making the shim directory");
            let target = base.join(installed);
            assert!(target.is_file(), "barrier-oshmem: no {} (is libopenmpi-dev installed?)", target.display());
            std::fs::write(&file, format!("#include \"{}\"\n", target.display())).expect("writing the shim");
        }
        println!("cargo:rerun-if-changed=c/scoll_fastbar.c");
        let mut cc = cc::Build::new();
        cc.file("c/scoll_fastbar.c")
            .define("FASTBAR_COMPONENT_BYTES", super::COMPONENT_BYTES.to_string().as_str())
            .flag_if_supported("-std=gnu11")
            .flag_if_supported("-Wno-unused-parameter")
            .cargo_metadata(false);
        for dir in &incdirs {
            cc.include(dir);
        }
        // fastbar_glue.h, from barrier-mpi (its `links` metadata).
        let glue = std::env::var("DEP_FASTBAR_GLUE_INCLUDE").expect("barrier-mpi publishes fastbar_glue.h's directory");
        println!("cargo:rerun-if-changed={glue}/fastbar_glue.h");
        cc.include(&glue);
        cc.include(base.join("openshmem")).include(&shim);
        cc.compile("scoll_fastbar");
        println!("cargo:rustc-link-search=native={}", out.display());
        println!("cargo:rustc-link-lib=static:+whole-archive=scoll_fastbar");
        for dir in &libdirs {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,{dir}");
        }
        for lib in ["oshmem", "mpi", "open-pal"] {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
}

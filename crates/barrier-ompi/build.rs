//! With the `ompi` feature: compiles the component's C glue (`c/coll_fastbar.c`) against the
//! installed Open MPI's headers and links it whole into the library. Without it: nothing.

/// Bytes of the Rust static that holds the component structure (`src/coll.rs` has the same
/// number; the C side checks that its structure fits).
#[cfg(feature = "ompi")]
const COMPONENT_BYTES: usize = 1024;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "ompi")]
    ompi::build();
}

#[cfg(feature = "ompi")]
mod ompi {
    use std::process::Command;

    /// The Open MPI compiler wrapper: BARRIER_OMPI_MPICC, else mpicc.openmpi, else mpicc.
    fn wrapper() -> String {
        println!("cargo:rerun-if-env-changed=BARRIER_OMPI_MPICC");
        if let Ok(w) = std::env::var("BARRIER_OMPI_MPICC") {
            return w;
        }
        for w in ["mpicc.openmpi", "mpicc"] {
            if Command::new(w).arg("--showme:version").output().is_ok_and(|o| o.status.success()) {
                return w.to_string();
            }
        }
        panic!(
            "barrier-ompi (feature ompi): no Open MPI compiler wrapper (mpicc.openmpi or mpicc with --showme) \
             found: install Open MPI's development files (Debian: libopenmpi-dev), or set BARRIER_OMPI_MPICC"
        );
    }

    fn showme(wrapper: &str, what: &str) -> Vec<String> {
        let out = Command::new(wrapper).arg(format!("--showme:{what}")).output().unwrap_or_else(|e| {
            panic!("barrier-ompi: `{wrapper} --showme:{what}` could not run ({e}): is {wrapper} Open MPI's?")
        });
        if !out.status.success() {
            panic!(
                "barrier-ompi: `{wrapper} --showme:{what}` failed: {wrapper} is not Open MPI's wrapper (MPICH has no \
                 component interface; this crate is for Open MPI only)"
            );
        }
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
    }

    pub fn build() {
        let w = wrapper();
        let incdirs = showme(&w, "incdirs");
        let libdirs = showme(&w, "libdirs");
        println!("cargo:rerun-if-changed=c/coll_fastbar.c");
        println!("cargo:rerun-if-changed=c/coll_fastbar_rs.h");
        let mut cc = cc::Build::new();
        cc.file("c/coll_fastbar.c")
            .define("FASTBAR_COMPONENT_BYTES", super::COMPONENT_BYTES.to_string().as_str())
            .flag_if_supported("-std=gnu11")
            .warnings(true)
            .extra_warnings(false)
            .flag_if_supported("-Wno-unused-parameter")
            .flag_if_supported("-Wno-sign-compare")
            .cargo_metadata(false);
        // fastbar_glue.h, from barrier-mpi (its `links` metadata).
        let glue = std::env::var("DEP_FASTBAR_GLUE_INCLUDE").expect("barrier-mpi publishes fastbar_glue.h's directory");
        println!("cargo:rerun-if-changed={glue}/fastbar_glue.h");
        cc.include(&glue);
        for dir in &incdirs {
            cc.include(dir);
        }
        cc.compile("coll_fastbar");
        // Whole: nothing in Rust calls the glue, and the linker must keep all of it.
        println!("cargo:rustc-link-search=native={}", std::env::var("OUT_DIR").expect("OUT_DIR"));
        println!("cargo:rustc-link-lib=static:+whole-archive=coll_fastbar");
        for dir in &libdirs {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,{dir}");
        }
        println!("cargo:rustc-link-lib=dylib=mpi");
        println!("cargo:rustc-link-lib=dylib=open-pal");
        // For the record in `barrier ompi` and the docs: the Open MPI this was built against.
        let version = Command::new(&w).arg("--showme:version").output().map(|o| o.stdout).unwrap_or_default();
        let version = String::from_utf8_lossy(&version).trim().to_string();
        println!("cargo:rustc-env=BARRIER_OMPI_BUILT_AGAINST={version}");
    }
}

//! `barrier bench --shmem`: the OpenSHMEM implementation's barriers against the interposer's,
//! in one run.
//!
//! Builds `crates/barrier-cli/c/shmem_bench.c` (embedded in this binary) with the machine's
//! `oshcc` and runs it under `oshrun` with `libbarrier_shmem.so` preloaded. The program times
//! `pshmem_barrier_all` and `pshmem_sync_all` (the implementation's own, by their profiling
//! names) and `shmem_barrier_all` and `shmem_sync_all` (the interposer's) in alternating chunks
//! in the same processes, and prints the medians and their ratios; between the chunks PE 0 and
//! PE 1 time a ping-pong through `shmem_ptr`, the machine's cache-line round trip (the level a
//! VM runs at, against which launches compare). This command needs no OpenSHMEM itself: only the
//! program it builds does.

use std::path::PathBuf;

use crate::mpibench::{defines_symbol, CProgram};

/// The benchmark program's source.
const SOURCE: &str = include_str!("../c/shmem_bench.c");

/// What `barrier bench --shmem` runs.
#[derive(Debug, Clone)]
pub struct ShmemBenchOptions {
    /// PE counts.
    pub pes: Vec<usize>,
    /// Barriers per variant, split into [`CHUNKS`](crate::mpibench::CHUNKS) chunks.
    pub iters: u64,
    /// The interposer; default: `libbarrier_shmem.so` beside this command.
    pub preload: Option<PathBuf>,
}

/// Where this command looks for the interposer when none is named.
pub fn preload_candidates() -> Vec<PathBuf> {
    barrier_launch::artifact_dirs().into_iter().map(|dir| dir.join("libbarrier_shmem.so")).collect()
}

/// Builds the program and runs it at every PE count; its report goes to stdout.
pub fn run(opts: &ShmemBenchOptions) -> Result<(), String> {
    let how = "build it with `cargo build --release -p barrier-shmem` (it lands in target/release/) and name it with \
               --shmem-preload";
    let preload = match opts.preload.clone() {
        Some(path) if path.is_file() => path,
        Some(path) => return Err(format!("no interposer at {} (--shmem-preload): {how}", path.display())),
        None => preload_candidates().into_iter().find(|p| p.is_file()).ok_or_else(|| {
            let looked: Vec<String> = preload_candidates().iter().map(|p| p.display().to_string()).collect();
            format!("no interposer libbarrier_shmem.so at {}: {how}", looked.join(" or "))
        })?,
    };
    let preload = preload.canonicalize().map_err(|e| format!("{}: {e}", preload.display()))?;
    let bytes = std::fs::read(&preload).map_err(|e| format!("reading {}: {e}", preload.display()))?;
    if defines_symbol(&bytes, "shmem_barrier_all") != Some(true) {
        return Err(format!(
            "{} does not define shmem_barrier_all: it is not the OpenSHMEM interposer",
            preload.display()
        ));
    }
    let program = CProgram {
        name: "shmem_bench",
        source: SOURCE,
        compiler: ("OSHCC", "oshcc", "an OpenSHMEM (openmpi-bin has oshcc)"),
        launcher: ("OSHRUN", "oshrun", "an OpenSHMEM (openmpi-bin has oshrun)"),
        what: "--shmem: PEs",
    };
    program.run(&opts.pes, opts.iters, &preload, &[], |cmd| {
        // Open MPI's launcher as root wants both; OSHMEM 4.1.4 crashes in finalize without the
        // third (open-mpi/ompi#11604). They mean nothing elsewhere.
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_opal_common_ucx_opal_mem_hooks", "0")
            .args(["--oversubscribe", "-x"])
            .arg(format!("LD_PRELOAD={}", preload.display()));
    })
}

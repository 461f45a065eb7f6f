//! `barrier bench --shmem`: the OpenSHMEM implementation's barriers against the interposer's,
//! in one run.
//!
//! Builds `crates/barrier-cli/c/shmem_bench.c` (embedded in this binary) with the machine's
//! `oshcc` and runs it under `oshrun` with `libbarrier_shmem.so` preloaded. The program times
//! `pshmem_barrier_all` and `pshmem_sync_all` (the implementation's own, by their profiling
//! names) and `shmem_barrier_all` and `shmem_sync_all` (the interposer's) in alternating chunks
//! in the same processes, and prints the medians and their ratios. This command needs no
//! OpenSHMEM itself: only the program it builds does.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::mpibench::{defines_symbol, tool, CHUNKS};

/// The benchmark program's source.
const SOURCE: &str = include_str!("../c/shmem_bench.c");

/// What `barrier bench --shmem` runs.
#[derive(Debug, Clone)]
pub struct ShmemBenchOptions {
    /// PE counts.
    pub pes: Vec<usize>,
    /// Barriers per variant, split into [`CHUNKS`] chunks.
    pub iters: u64,
    /// The interposer; default: `libbarrier_shmem.so` beside this command.
    pub preload: Option<PathBuf>,
}

/// Where this command looks for the interposer when none is named.
pub fn preload_candidates() -> Vec<PathBuf> {
    crate::launch::artifact_dirs().into_iter().map(|dir| dir.join("libbarrier_shmem.so")).collect()
}

fn build(dir: &Path) -> Result<PathBuf, String> {
    let oshcc = tool("OSHCC", "oshcc");
    let src = dir.join("shmem_bench.c");
    let prog = dir.join("shmem_bench");
    std::fs::write(&src, SOURCE).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let status =
        Command::new(&oshcc).args(["-O2", "-o"]).arg(&prog).arg(&src).status().map_err(|e| {
            format!("cannot run {oshcc} ({e}); install an OpenSHMEM (openmpi-bin has oshcc) or set OSHCC")
        })?;
    if !status.success() {
        return Err(format!("{oshcc} could not build {} ({status})", src.display()));
    }
    Ok(prog)
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
    let oshrun = tool("OSHRUN", "oshrun");
    let dir = std::env::temp_dir().join(format!("barrier-shmem-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let result = build(&dir).and_then(|prog| {
        let chunk = (opts.iters / CHUNKS).max(1);
        for &n in &opts.pes {
            println!("== barrier bench --shmem: {n} PEs, {oshrun} with {} preloaded", preload.display());
            let status = Command::new(&oshrun)
                // Open MPI's launcher as root wants both; OSHMEM 4.1.4 crashes in finalize
                // without the third (open-mpi/ompi#11604). They mean nothing elsewhere.
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                .env("OMPI_MCA_opal_common_ucx_opal_mem_hooks", "0")
                .args(["--oversubscribe", "-x"])
                .arg(format!("LD_PRELOAD={}", preload.display()))
                .arg("-np")
                .arg(n.to_string())
                .arg(&prog)
                .arg(chunk.to_string())
                .arg(CHUNKS.to_string())
                .status()
                .map_err(|e| format!("cannot run {oshrun} ({e}); install an OpenSHMEM or set OSHRUN"))?;
            if !status.success() {
                return Err(format!("{oshrun} -np {n} failed ({status})"));
            }
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

//! `barrier bench --mpi`: the MPI library's barrier against the interposer's, in one run.
//!
//! Builds `examples/mpi/barrier_bench.c` (embedded in this binary) with the machine's `mpicc`
//! and runs it under `mpirun` with `libbarrier_pmpi.so` preloaded. The program times
//! `PMPI_Barrier` (the MPI library's own) and `MPI_Barrier` (the interposer's) in alternating
//! chunks in the same processes, so both see the same phases of the machine, and prints both
//! medians and their ratio. This command needs no MPI itself: only the program it builds does.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The benchmark program's source.
const SOURCE: &str = include_str!("../../../examples/mpi/barrier_bench.c");

/// Chunks per variant (odd, for a true median).
pub const CHUNKS: u64 = 21;

/// What `barrier bench --mpi` runs.
#[derive(Debug, Clone)]
pub struct MpiBenchOptions {
    /// Rank counts.
    pub ranks: Vec<usize>,
    /// Barriers per variant, split into [`CHUNKS`] chunks.
    pub iters: u64,
    /// The interposer; default: `libbarrier_pmpi.so` beside this executable.
    pub preload: Option<PathBuf>,
}

/// The interposer this command uses when none is named: beside the executable (a cargo build
/// puts both in `target/<profile>/`).
pub fn default_preload() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("libbarrier_pmpi.so"))
}

/// Whether the shared library at `path` names `MPI_Barrier` in its dynamic string table, as the
/// interposer built with MPI does (a build without the `mpi` feature defines no MPI symbol, and
/// the MPI library it links names only `PMPI_Barrier`): NUL on both sides, as symbol names are
/// stored there, where string constants in Rust code are not NUL-terminated.
fn defines_mpi_barrier(path: &Path) -> Result<bool, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let name = b"\0MPI_Barrier\0";
    Ok(bytes.windows(name.len()).any(|w| w == name))
}

fn tool(var: &str, default: &str) -> String {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_string())
}

/// Whether `mpirun` is Open MPI's (it takes `-x`, `--oversubscribe`; MPICH's takes `-genv`).
fn is_open_mpi(mpirun: &str) -> Result<bool, String> {
    let out = Command::new(mpirun)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {mpirun} ({e}); install an MPI (openmpi-bin or mpich) or set MPIRUN"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    Ok(text.contains("Open MPI") || text.contains("OpenRTE"))
}

fn build(dir: &Path) -> Result<PathBuf, String> {
    let mpicc = tool("MPICC", "mpicc");
    let src = dir.join("barrier_bench.c");
    let prog = dir.join("barrier_bench");
    std::fs::write(&src, SOURCE).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let status = Command::new(&mpicc)
        .args(["-O2", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .map_err(|e| format!("cannot run {mpicc} ({e}); install an MPI's compiler wrapper or set MPICC"))?;
    if !status.success() {
        return Err(format!("{mpicc} could not build {} ({status})", src.display()));
    }
    Ok(prog)
}

/// Builds the program and runs it at every rank count; its report goes to stdout.
pub fn run(opts: &MpiBenchOptions) -> Result<(), String> {
    let preload = opts.preload.clone().or_else(default_preload).ok_or("cannot locate libbarrier_pmpi.so")?;
    if !preload.is_file() {
        return Err(format!(
            "no interposer at {}: build it with `cargo build --release -p barrier-pmpi --features mpi` (it lands \
             beside the `barrier` command), or name it with --mpi-preload",
            preload.display()
        ));
    }
    let preload = preload.canonicalize().map_err(|e| format!("{}: {e}", preload.display()))?;
    if !defines_mpi_barrier(&preload)? {
        return Err(format!(
            "{} does not define MPI_Barrier: it was built without MPI; rebuild it with `cargo build --release -p \
             barrier-pmpi --features mpi`",
            preload.display()
        ));
    }
    let mpirun = tool("MPIRUN", "mpirun");
    let open_mpi = is_open_mpi(&mpirun)?;
    let dir = std::env::temp_dir().join(format!("barrier-mpi-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let result = build(&dir).and_then(|prog| {
        let chunk = (opts.iters / CHUNKS).max(1);
        for &n in &opts.ranks {
            println!("== barrier bench --mpi: {n} ranks, {mpirun} with {} preloaded", preload.display());
            let mut cmd = Command::new(&mpirun);
            if open_mpi {
                // As root, Open MPI wants both variables; they mean nothing to other users.
                cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                cmd.args(["--oversubscribe", "-x"]).arg(format!("LD_PRELOAD={}", preload.display()));
            } else {
                cmd.args(["-genv", "LD_PRELOAD"]).arg(&preload);
            }
            let status = cmd
                .arg("-np")
                .arg(n.to_string())
                .arg(&prog)
                .arg(chunk.to_string())
                .arg(CHUNKS.to_string())
                .status()
                .map_err(|e| format!("cannot run {mpirun}: {e}"))?;
            if !status.success() {
                return Err(format!("{mpirun} -np {n} failed ({status})"));
            }
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

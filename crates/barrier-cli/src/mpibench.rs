//! `barrier bench --mpi`: the MPI library's barrier against the interposer's, in one run.
//!
//! Builds `crates/barrier-cli/c/barrier_bench.c` (embedded in this binary) with the machine's `mpicc`
//! and runs it under `mpirun` with `libbarrier_pmpi.so` preloaded. The program times
//! `PMPI_Barrier` (the MPI library's own) and `MPI_Barrier` (the interposer's) in alternating
//! chunks in the same processes, so both see the same phases of the machine, and prints both
//! medians and their ratio. This command needs no MPI itself: only the program it builds does.

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) use crate::elf::defines_symbol;

/// The benchmark program's source.
const SOURCE: &str = include_str!("../c/barrier_bench.c");

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
    /// Open MPI's coll component `fastbar` (barrier-ompi), timed as a third variant; default:
    /// the one beside this executable, if it was built (and the MPI is Open MPI).
    pub component: Option<PathBuf>,
}

/// Where this command looks for the interposer when none is named: `libbarrier_pmpi.so` in
/// each of [`barrier_launch::artifact_dirs`].
pub fn preload_candidates() -> Vec<PathBuf> {
    barrier_launch::artifact_dirs().into_iter().map(|dir| dir.join("libbarrier_pmpi.so")).collect()
}

/// The interposer this command uses when none is named: the first of [`preload_candidates`]
/// that exists.
pub fn default_preload() -> Option<PathBuf> {
    preload_candidates().into_iter().find(|path| path.is_file())
}

/// Whether the shared library at `path` defines `MPI_Barrier` (the interposer built with the
/// `mpi` feature does; one built without it defines no MPI symbol).
fn defines_mpi_barrier(path: &Path) -> Result<bool, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    defines_symbol(&bytes, "MPI_Barrier").ok_or_else(|| {
        format!(
            "{}: no dynamic symbol table (not a 64-bit ELF shared library, or its section headers were stripped)",
            path.display()
        )
    })
}

/// The MPI library a shared object was linked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mpi {
    OpenMpi,
    Mpich,
}

/// Which MPI the ELF file `elf` needs, from the library names in it: Open MPI's `libmpi.so.40`
/// (its soname since 3.0), or the MPICH ABI's `libmpi.so.12` (MPICH, Intel MPI, MVAPICH) or
/// `libmpich.so` (Debian's name for MPICH's); `None` if it names none of them.
fn linked_mpi(elf: &[u8]) -> Option<Mpi> {
    let names = |needle: &[u8]| elf.windows(needle.len()).any(|w| w == needle);
    if names(b"libmpich.so") || names(b"libmpi.so.12\0") {
        Some(Mpi::Mpich)
    } else if names(b"libmpi.so.40\0") {
        Some(Mpi::OpenMpi)
    } else {
        None
    }
}

pub(crate) fn tool(var: &str, default: &str) -> String {
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

/// A benchmark program in C, embedded in this binary: built with a compiler wrapper and run
/// with a launcher once per process count (`barrier bench --mpi` and `--shmem`).
pub(crate) struct CProgram<'a> {
    /// Its file name, without `.c`.
    pub name: &'a str,
    pub source: &'a str,
    /// The compiler wrapper: the variable that names it, its default, and what to install.
    pub compiler: (&'a str, &'a str, &'a str),
    /// The launcher: the variable that names it, its default, and what to install.
    pub launcher: (&'a str, &'a str, &'a str),
    /// What the header line of each run says (`--mpi: 2 ranks`).
    pub what: &'a str,
}

impl CProgram<'_> {
    /// The launcher this program runs under.
    pub(crate) fn launcher(&self) -> String {
        tool(self.launcher.0, self.launcher.1)
    }

    pub(crate) fn build(&self, dir: &Path) -> Result<PathBuf, String> {
        let (var, default, install) = self.compiler;
        let cc = tool(var, default);
        let src = dir.join(format!("{}.c", self.name));
        let prog = dir.join(self.name);
        std::fs::write(&src, self.source).map_err(|e| format!("writing {}: {e}", src.display()))?;
        let status = Command::new(&cc)
            .args(["-O2", "-o"])
            .arg(&prog)
            .arg(&src)
            .status()
            .map_err(|e| format!("cannot run {cc} ({e}); install {install} or set {var}"))?;
        if !status.success() {
            return Err(format!("{cc} could not build {} ({status})", src.display()));
        }
        Ok(prog)
    }

    /// Builds the program in a fresh temporary directory and runs it for every count of
    /// processes with `iters` barriers per variant in [`CHUNKS`] chunks: `options(cmd)` adds
    /// the launcher's options (the preload) before `-np`. The directory goes afterwards.
    pub(crate) fn run(
        &self,
        counts: &[usize],
        iters: u64,
        preload: &Path,
        trailing: &[&str],
        options: impl Fn(&mut Command),
    ) -> Result<(), String> {
        let launcher = self.launcher();
        let dir = std::env::temp_dir().join(format!("barrier-{}-{}", self.name, std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let result = self.build(&dir).and_then(|prog| {
            let chunk = (iters / CHUNKS).max(1);
            for &n in counts {
                println!("== barrier bench {} {n}, {launcher} with {} preloaded", self.what, preload.display());
                let mut cmd = Command::new(&launcher);
                options(&mut cmd);
                let status = cmd
                    .arg("-np")
                    .arg(n.to_string())
                    .arg(&prog)
                    .arg(chunk.to_string())
                    .arg(CHUNKS.to_string())
                    .args(trailing)
                    .status()
                    .map_err(|e| {
                        format!("cannot run {launcher} ({e}); install {} or set {}", self.launcher.2, self.launcher.0)
                    })?;
                if !status.success() {
                    return Err(format!("{launcher} -np {n} failed ({status})"));
                }
            }
            Ok(())
        });
        let _ = std::fs::remove_dir_all(&dir);
        result
    }
}

/// The MPI benchmark program.
pub(crate) fn program() -> CProgram<'static> {
    CProgram {
        name: "barrier_bench",
        source: SOURCE,
        compiler: ("MPICC", "mpicc", "an MPI's compiler wrapper"),
        launcher: ("MPIRUN", "mpirun", "an MPI (openmpi-bin or mpich)"),
        what: "--mpi:",
    }
}

/// Checks that `preload` is an interposer built with MPI, for the MPI that `mpirun` launches;
/// returns whether `mpirun` is Open MPI's.
pub(crate) fn check_interposer(preload: &Path, mpirun: &str) -> Result<bool, String> {
    if !defines_mpi_barrier(preload)? {
        return Err(format!(
            "{} does not define MPI_Barrier: it was built without MPI; rebuild it with `cargo build --release -p \
             barrier-pmpi --features mpi`",
            preload.display()
        ));
    }
    let open_mpi = is_open_mpi(mpirun)?;
    let bytes = std::fs::read(preload).map_err(|e| format!("reading {}: {e}", preload.display()))?;
    match linked_mpi(&bytes) {
        Some(Mpi::Mpich) if open_mpi => Err(format!(
            "{} was built against MPICH, but {mpirun} is Open MPI's: run with MPIRUN=mpiexec.mpich \
             MPICC=mpicc.mpich, or build the interposer for Open MPI (MPI_PKG_CONFIG=ompi)",
            preload.display()
        )),
        Some(Mpi::OpenMpi) if !open_mpi => Err(format!(
            "{} was built against Open MPI, but {mpirun} is not Open MPI's: run with MPIRUN=mpirun.openmpi \
             MPICC=mpicc.openmpi, or build the interposer for this MPI (MPI_PKG_CONFIG=mpich and its own \
             CARGO_TARGET_DIR)",
            preload.display()
        )),
        _ => Ok(open_mpi),
    }
}

/// Builds the program and runs it at every rank count; its report goes to stdout.
pub fn run(opts: &MpiBenchOptions) -> Result<(), String> {
    let how_to_build = "build it in the source tree with `MPI_PKG_CONFIG=ompi cargo build --release -p barrier-pmpi \
                 --features mpi` (it lands in target/release/; for MPICH see docs/mpi.md) and name it with \
                 --mpi-preload";
    let preload = match opts.preload.clone() {
        Some(path) if path.is_file() => path,
        Some(path) => return Err(format!("no interposer at {} (--mpi-preload): {how_to_build}", path.display())),
        None => default_preload().ok_or_else(|| {
            let looked: Vec<String> = preload_candidates().iter().map(|p| p.display().to_string()).collect();
            format!("no interposer libbarrier_pmpi.so at {}: {how_to_build}", looked.join(" or "))
        })?,
    };
    let preload = preload.canonicalize().map_err(|e| format!("{}: {e}", preload.display()))?;
    let program = program();
    let mpirun = program.launcher();
    let open_mpi = check_interposer(&preload, &mpirun)?;
    // The coll component, staged under its MCA name in a directory of its own (Open MPI's own
    // directory stays in the path).
    let component = match (&opts.component, open_mpi) {
        (Some(path), false) => {
            return Err(format!("{} is an Open MPI component, but {mpirun} is not Open MPI's", path.display()))
        }
        (Some(path), true) if !path.is_file() => {
            return Err(format!(
                "no component at {} (--mpi-component): build it with `{}`",
                path.display(),
                crate::ompi::COLL.build
            ))
        }
        (Some(path), true) if !crate::ompi::is_component(path)? => {
            return Err(format!(
                "{} is not the coll component (--mpi-component): build it with `{}`",
                path.display(),
                crate::ompi::COLL.build
            ))
        }
        (Some(path), true) => Some(path.clone()),
        (None, true) => crate::ompi::find(),
        (None, false) => None,
    };
    let stage = std::env::temp_dir().join(format!("barrier-ompi-component-{}", std::process::id()));
    let staged = match &component {
        Some(library) => Some(crate::ompi::install(library, &stage)?),
        None => None,
    };
    if let Some(library) = &component {
        println!("the coll component {} is timed too (from {})", crate::ompi::NAME, library.display());
    }
    let trailing: &[&str] = if staged.is_some() { &["1", "component"] } else { &[] };
    let result = program.run(&opts.ranks, opts.iters, &preload, trailing, |cmd| {
        if open_mpi {
            // As root, Open MPI wants both variables; they mean nothing to other users.
            cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            cmd.args(["--oversubscribe", "-x"]).arg(format!("LD_PRELOAD={}", preload.display()));
            if staged.is_some() {
                let own = crate::ompi::open_mpi_component_dir();
                cmd.env("OMPI_MCA_mca_base_component_path", crate::ompi::component_path(&stage, own.as_deref()));
            }
        } else {
            cmd.args(["-genv", "LD_PRELOAD"]).arg(&preload);
        }
    });
    let _ = std::fs::remove_dir_all(&stage);
    result?;
    hybrid_rows(&opts.ranks, opts.iters, &mpirun, open_mpi)
}

/// Threads per rank in the hybrid rows.
pub const HYBRID_THREADS: usize = 2;

/// Where this command looks for barrier-mpi's `mpi_hybrid` example: `examples/mpi_hybrid` in each of
/// [`barrier_launch::artifact_dirs`].
pub fn hybrid_candidates() -> Vec<PathBuf> {
    barrier_launch::artifact_dirs().into_iter().map(|dir| dir.join("examples").join("mpi_hybrid")).collect()
}

/// The hybrid rows: every thread of every rank in one barrier (barrier-mpi's `hybrid` example:
/// `Member::wait_then` around the rank's barrier) against the three-barrier pattern (team
/// barrier; the rank's barrier on one thread; team barrier), [`HYBRID_THREADS`] threads per
/// rank, timed by the example in alternating chunks in the same threads, after it checked 300
/// barriers. Said and skipped, not failed, when the example was not built for this MPI.
fn hybrid_rows(ranks: &[usize], iters: u64, mpirun: &str, open_mpi: bool) -> Result<(), String> {
    let build = "MPI_PKG_CONFIG=ompi cargo build --release -p barrier-mpi --features mpi --example mpi_hybrid";
    let Some(example) = hybrid_candidates().into_iter().find(|p| p.is_file() && barrier_launch::trusted(p)) else {
        println!("hybrid rows (every thread of every rank): skipped, no examples/mpi_hybrid beside this command; build it with `{build}`");
        return Ok(());
    };
    let bytes = std::fs::read(&example).map_err(|e| format!("reading {}: {e}", example.display()))?;
    let ours = if open_mpi { Mpi::OpenMpi } else { Mpi::Mpich };
    if linked_mpi(&bytes).is_some_and(|m| m != ours) {
        println!(
            "hybrid rows (every thread of every rank): skipped, {} was built for another MPI than {mpirun}'s",
            example.display()
        );
        return Ok(());
    }
    println!(
        "hybrid: every thread of every rank ({HYBRID_THREADS} threads per rank; {}), against team barrier, rank barrier, \
         team barrier",
        example.display()
    );
    for &n in ranks {
        let mut cmd = Command::new(mpirun);
        if open_mpi {
            cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1").arg("--oversubscribe");
        }
        cmd.arg("-np").arg(n.to_string()).arg(&example).arg(HYBRID_THREADS.to_string()).arg(iters.to_string());
        let out = cmd.output().map_err(|e| format!("cannot run {mpirun} ({e})"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.starts_with("hybrid: "));
        match (out.status.success(), line) {
            // (Without the list of backends not chosen.)
            (true, Some(line)) => println!("  {}", line.split("; declined or not needed:").next().unwrap_or(line)),
            _ => {
                return Err(format!(
                    "the hybrid example at {n} ranks failed ({}): {}{}",
                    out.status,
                    text.trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_linked_mpi_is_told_by_its_library_name() {
        use super::{linked_mpi, Mpi};
        assert_eq!(linked_mpi(b"\0libc.so.6\0libmpich.so.12\0"), Some(Mpi::Mpich));
        assert_eq!(linked_mpi(b"\0libmpi.so.12\0libc.so.6\0"), Some(Mpi::Mpich), "upstream MPICH's name");
        assert_eq!(linked_mpi(b"\0libmpi.so.40\0libc.so.6\0"), Some(Mpi::OpenMpi));
        assert_eq!(linked_mpi(b"\0libc.so.6\0"), None);
    }
}

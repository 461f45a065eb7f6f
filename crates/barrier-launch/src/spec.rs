//! What to launch ([`JobSpec`]) and where the launcher finds the artifacts it hands to ranks
//! (the inline emulator library, the interposer).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// How often the launcher looks at an oversubscribed job's placement ([`crate::rebalance`]).
pub const BALANCE_EVERY: Duration = Duration::from_millis(20);
/// How long ranks get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// What to launch.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Ranks.
    pub ranks: usize,
    /// Simulated nodes.
    pub nodes: usize,
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// Pin rank `r` to the `r`-th core of the launcher's affinity mask (when ranks <= cores).
    pub pin: bool,
    /// Capture every rank's standard output instead of passing it through.
    pub capture_stdout: bool,
    /// Capture every rank's standard error instead of passing it through.
    pub capture_stderr: bool,
    /// Bytes of the segment pool for sub-communicators and windows (default: the
    /// environment's `BARRIER_SHM_POOL_BYTES`, as every rank would read it).
    pub pool_bytes: usize,
    /// Prefix each line a rank prints with `[rank] ` (output that is not captured).
    pub tag_output: bool,
    /// Emulated devices to run inside the launcher for this job (their paths are passed to
    /// the ranks as `BARRIER_<KIND>_DEVICE_PATH`).
    pub emulate: Vec<barrier_emu::Config>,
    /// An emulated A64FX node of this shape to run inside the launcher (its device and sysfs
    /// tree are passed to the ranks as `BARRIER_A64FX_DEVICE_PATH` and `BARRIER_A64FX_SYSFS`).
    pub emulate_a64fx: Option<barrier_hw::a64fx::node::Layout>,
}

impl JobSpec {
    /// A job running `program` on `ranks` ranks with default settings.
    pub fn new(ranks: usize, program: impl Into<PathBuf>) -> Self {
        JobSpec {
            ranks,
            nodes: 1,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            pin: false,
            capture_stdout: false,
            capture_stderr: false,
            pool_bytes: barrier::Params::from_env()
                .parse("BARRIER_SHM_POOL_BYTES", barrier::shm::DEFAULT_POOL_BYTES, "")
                .unwrap_or(barrier::shm::DEFAULT_POOL_BYTES),
            tag_output: false,
            emulate: Vec::new(),
            emulate_a64fx: None,
        }
    }
}

/// Where this build's libraries are: beside this executable (a cargo build puts them in
/// `target/<profile>/`), then in the build it came from (`cargo install --path` copies the
/// executable to `~/.cargo/bin`, away from them; the build script records that directory), but
/// only while that directory is the caller's (or root's) and nobody else may write it: a build
/// tree that was under `/tmp`, or is shared, may since hold someone else's library, whose code
/// would run in the ranks.
pub fn artifact_dirs() -> Vec<PathBuf> {
    let exe_dir = std::env::current_exe().ok().and_then(|exe| exe.parent().map(PathBuf::from));
    let build_dir = option_env!("BUILD_PROFILE_DIR").map(PathBuf::from).filter(|dir| trusted(dir));
    let mut dirs: Vec<PathBuf> = [exe_dir, build_dir].into_iter().flatten().collect();
    dirs.dedup();
    dirs
}

/// Whether `path` (not followed if it is a link) belongs to this user or to root and nobody
/// else may write it: a library found there may be loaded into this user's ranks.
pub fn trusted(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| !m.file_type().is_symlink() && (m.uid() == me || m.uid() == 0) && m.mode() & 0o022 == 0)
}

/// The inline emulator library for the ranks of `barrier run --emulate` (see
/// `barrier_emu_inline`): the one `BARRIER_EMU_INLINE_LIB` names, else the one beside this
/// executable, else the one in the build this executable came from (`cargo install --path`
/// copies the executable away from it); loaded here once to check that it was built from the
/// same sources. The error says what was looked at and what to do.
pub fn inline_emulator_library() -> Result<PathBuf, String> {
    use barrier::mmio::{load_inline_library, INLINE_LIBRARY_VAR};
    let path = match std::env::var_os(INLINE_LIBRARY_VAR) {
        // Absolute for the ranks, whatever their working directory.
        Some(path) => PathBuf::from(&path)
            .canonicalize()
            .map_err(|e| format!("{INLINE_LIBRARY_VAR}={}: {e}", PathBuf::from(&path).display()))?,
        None => {
            // deps/ first: a build of the launcher always refreshes the library there, and copies
            // it up beside the executable only when the library's package is built by name.
            let candidates: Vec<PathBuf> = artifact_dirs()
                .into_iter()
                .flat_map(|dir| {
                    [
                        dir.join("deps").join(barrier_emu_inline::LIBRARY_FILE),
                        dir.join(barrier_emu_inline::LIBRARY_FILE),
                    ]
                })
                .collect();
            // A library in the recorded build tree that someone else could have put there is
            // never loaded (its initialisers would run before any check of ours); the one
            // beside this command is as trusted as the command.
            let exe_dir = std::env::current_exe().ok().and_then(|exe| exe.parent().map(PathBuf::from));
            let beside = |path: &PathBuf| exe_dir.as_ref().is_some_and(|d| path.starts_with(d));
            match candidates.iter().find(|path| path.is_file() && (beside(path) || trusted(path))) {
                Some(path) => path.clone(),
                None => {
                    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
                    return Err(format!(
                        "no {} at {}: build it with `cargo build --release -p barrier-emu-inline` and name it in {INLINE_LIBRARY_VAR}",
                        barrier_emu_inline::LIBRARY_FILE,
                        looked.join(", ")
                    ));
                }
            }
        }
    };
    load_inline_library(&path)?;
    Ok(path)
}

//! Open MPI's components `fastbar` (coll: crate barrier-ompi; scoll for OSHMEM: crate
//! barrier-oshmem): where their libraries are, how a user or a site installs them for the Open
//! MPI on this machine (`barrier ompi`), and the directory with a component under its MCA name
//! that `barrier bench --mpi` loads it from.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The components' name in Open MPI (`--mca coll_fastbar_priority 100`, `--mca coll ^fastbar`,
/// `--mca scoll_fastbar_verbose 1`).
pub const NAME: &str = "fastbar";

/// One of the two components: the coll one (crate barrier-ompi) and the scoll one for OSHMEM
/// (crate barrier-oshmem).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Component {
    /// The framework (`coll`, `scoll`).
    pub framework: &'static str,
    /// The library as cargo builds it.
    pub built: &'static str,
    /// The file name Open MPI loads it by.
    pub file: &'static str,
    /// The symbol Open MPI looks up in it.
    pub symbol: &'static str,
    /// How to build it.
    pub build: &'static str,
}

/// The coll component (MPI_Barrier, MPI_Ibarrier).
pub const COLL: Component = Component {
    framework: "coll",
    built: "libbarrier_ompi.so",
    file: "mca_coll_fastbar.so",
    symbol: "mca_coll_fastbar_component",
    build: "MPI_PKG_CONFIG=ompi cargo build --release -p barrier-ompi --features ompi",
};

/// The scoll component (OSHMEM's shmem_barrier_all, shmem_sync_all, active sets).
pub const SCOLL: Component = Component {
    framework: "scoll",
    built: "libbarrier_oshmem.so",
    file: "mca_scoll_fastbar.so",
    symbol: "mca_scoll_fastbar_component",
    build: "MPI_PKG_CONFIG=ompi cargo build --release -p barrier-oshmem --features oshmem",
};

/// Where this command looks for `component` when none is named: its library as cargo builds it
/// and under its MCA name, in each of [`barrier_launch::artifact_dirs`].
pub fn candidates(component: Component) -> Vec<PathBuf> {
    barrier_launch::artifact_dirs()
        .into_iter()
        .flat_map(|dir| [dir.join(component.built), dir.join(component.file)])
        .collect()
}

/// Which component the library at `path` is, if it is one (built with its feature).
pub fn which(path: &Path) -> Result<Option<Component>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok([COLL, SCOLL].into_iter().find(|c| crate::elf::defines_symbol(&bytes, c.symbol) == Some(true)))
}

/// Whether the library at `path` is the coll component.
pub fn is_component(path: &Path) -> Result<bool, String> {
    Ok(which(path)? == Some(COLL))
}

/// The first of [`candidates`] of `component` that is it.
pub fn find_component(component: Component) -> Option<PathBuf> {
    candidates(component).into_iter().find(|p| p.is_file() && which(p).ok().flatten() == Some(component))
}

/// The coll component beside this command, if it was built.
pub fn find() -> Option<PathBuf> {
    find_component(COLL)
}

/// Open MPI's own component directory (`ompi_info --path pkglibdir`), if `ompi_info` runs.
pub fn open_mpi_component_dir() -> Option<PathBuf> {
    let ompi_info = std::env::var("OMPI_INFO").unwrap_or_else(|_| "ompi_info".into());
    let out = Command::new(ompi_info).args(["--path", "pkglibdir", "--parsable"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "path:pkglibdir:/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"
    let dir = text.lines().find_map(|l| l.strip_prefix("path:pkglibdir:"))?.trim();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// The value of `mca_base_component_path` that adds `dir` and keeps Open MPI's own directory
/// (without it Open MPI finds none of its own components, and mpirun itself fails).
pub fn component_path(dir: &Path, own: Option<&Path>) -> String {
    match own {
        Some(own) => format!("{}:{}", dir.display(), own.display()),
        None => dir.display().to_string(),
    }
}

/// Copies a component into `dir` under the name Open MPI loads it by.
pub fn install(library: &Path, dir: &Path) -> Result<PathBuf, String> {
    let Some(component) = which(library)? else {
        return Err(format!(
            "{} is neither component (no {} or {}): build them with `{}` and `{}`",
            library.display(),
            COLL.symbol,
            SCOLL.symbol,
            COLL.build,
            SCOLL.build
        ));
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let target = dir.join(component.file);
    std::fs::copy(library, &target).map_err(|e| format!("copying to {}: {e}", target.display()))?;
    Ok(target)
}

/// `barrier ompi`: says where the components are and how to install them, for the Open MPI
/// found here; with `into`, copies them there.
pub fn run(library: Option<PathBuf>, into: Option<PathBuf>) -> Result<(), String> {
    let libraries: Vec<PathBuf> = match library {
        Some(path) if path.is_file() => vec![path],
        Some(path) => return Err(format!("no component library at {}", path.display())),
        None => [COLL, SCOLL].into_iter().filter_map(find_component).collect(),
    };
    if libraries.is_empty() {
        return Err(format!(
            "no component library beside this command: build them with `{}` (MPI_Barrier, MPI_Ibarrier) and `{}` \
             (OSHMEM)",
            COLL.build, SCOLL.build
        ));
    }
    let mut found = Vec::new();
    for library in libraries {
        let library = library.canonicalize().map_err(|e| format!("{}: {e}", library.display()))?;
        match which(&library)? {
            Some(component) => found.push((component, library)),
            None => {
                return Err(format!(
                    "{} was built without its feature (`{}`, `{}`)",
                    library.display(),
                    COLL.build,
                    SCOLL.build
                ))
            }
        }
    }
    if let Some(dir) = into {
        for (_, library) in &found {
            println!("installed {}", install(library, &dir)?.display());
        }
        return Ok(());
    }
    let own = open_mpi_component_dir();
    for (component, library) in &found {
        println!("the Open MPI {} component `{NAME}`: {}", component.framework, library.display());
    }
    match &own {
        Some(dir) => println!("Open MPI's component directory here: {}", dir.display()),
        None => println!("ompi_info did not run: is Open MPI (openmpi-bin) installed?"),
    }
    let user_dir = std::env::var_os("HOME")
        .map_or_else(|| PathBuf::from(".ompi-components"), |h| PathBuf::from(h).join(".openmpi").join("components"));
    println!();
    println!("For yourself (no root): copy them under their MCA names and name the directory in the environment");
    println!("  barrier ompi --install {}", user_dir.display());
    println!("  export OMPI_MCA_mca_base_component_path={}", component_path(&user_dir, own.as_deref()));
    println!("  mpirun --mca coll_{NAME}_verbose 1 -np 4 ./your_program");
    println!();
    println!("For every job on this machine (a site): copy them into Open MPI's component directory");
    for (component, library) in &found {
        match &own {
            Some(dir) => println!("  sudo cp {} {}", library.display(), dir.join(component.file).display()),
            None => println!(
                "  sudo cp {} \"$(ompi_info --path pkglibdir --parsable | cut -d: -f3)/{}\"",
                library.display(),
                component.file
            ),
        }
    }
    println!();
    println!("Their parameters: ompi_info --param coll {NAME} --level 9, oshmem_info --param scoll {NAME} --level 9");
    println!("  (with the path above in the environment)");
    println!("Turn one off for a job: --mca coll ^{NAME} (or scoll ^{NAME}), or --mca coll_{NAME}_priority 0");
    Ok(())
}

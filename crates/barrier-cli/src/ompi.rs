//! Open MPI's coll component `fastbar` (crate barrier-ompi): where its library is, how a user
//! or a site installs it for the Open MPI on this machine (`barrier ompi`), and the directory
//! with the component under its MCA name that `barrier bench --mpi` loads it from.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The component's name in Open MPI (`--mca coll_fastbar_priority 100`, `--mca coll ^fastbar`).
pub const NAME: &str = "fastbar";
/// The file name Open MPI loads it by.
pub const FILE: &str = "mca_coll_fastbar.so";
/// The symbol Open MPI looks up in it.
pub const SYMBOL: &str = "mca_coll_fastbar_component";

/// Where this command looks for the component when none is named: `libbarrier_ompi.so` (as
/// cargo builds it) and `mca_coll_fastbar.so` in each of [`crate::launch::artifact_dirs`].
pub fn candidates() -> Vec<PathBuf> {
    crate::launch::artifact_dirs()
        .into_iter()
        .flat_map(|dir| [dir.join("libbarrier_ompi.so"), dir.join(FILE)])
        .collect()
}

/// Whether the library at `path` is the component (built with the `ompi` feature).
pub fn is_component(path: &Path) -> Result<bool, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(crate::elf::defines_symbol(&bytes, SYMBOL).unwrap_or(false))
}

/// The first of [`candidates`] that is the component.
pub fn find() -> Option<PathBuf> {
    candidates().into_iter().find(|p| p.is_file() && is_component(p).unwrap_or(false))
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

/// Copies the component into `dir` under the name Open MPI loads it by.
pub fn install(library: &Path, dir: &Path) -> Result<PathBuf, String> {
    if !is_component(library)? {
        return Err(format!(
            "{} is not the component (no {SYMBOL}): build it with `MPI_PKG_CONFIG=ompi cargo build --release -p \
             barrier-ompi --features ompi`",
            library.display()
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let target = dir.join(FILE);
    std::fs::copy(library, &target).map_err(|e| format!("copying to {}: {e}", target.display()))?;
    Ok(target)
}

/// `barrier ompi`: says where the component is and how to install it, for the Open MPI found
/// here; with `into`, copies it there.
pub fn run(library: Option<PathBuf>, into: Option<PathBuf>) -> Result<(), String> {
    let how_to_build = "MPI_PKG_CONFIG=ompi cargo build --release -p barrier-ompi --features ompi";
    let library = match library {
        Some(path) if path.is_file() => path,
        Some(path) => {
            return Err(format!("no component library at {}: build it with `{how_to_build}`", path.display()))
        }
        None => find().ok_or_else(|| {
            let looked: Vec<String> = candidates().iter().map(|p| p.display().to_string()).collect();
            format!("no component library (with {SYMBOL}) at {}: build it with `{how_to_build}`", looked.join(" or "))
        })?,
    };
    let library = library.canonicalize().map_err(|e| format!("{}: {e}", library.display()))?;
    if !is_component(&library)? {
        return Err(format!("{} was built without the `ompi` feature: `{how_to_build}`", library.display()));
    }
    if let Some(dir) = into {
        let target = install(&library, &dir)?;
        println!("installed {}", target.display());
        return Ok(());
    }
    let own = open_mpi_component_dir();
    println!("the Open MPI coll component `{NAME}`: {}", library.display());
    match &own {
        Some(dir) => println!("Open MPI's component directory here: {}", dir.display()),
        None => println!("ompi_info did not run: is Open MPI (openmpi-bin) installed?"),
    }
    let user_dir = std::env::var_os("HOME")
        .map_or_else(|| PathBuf::from(".ompi-components"), |h| PathBuf::from(h).join(".openmpi").join("components"));
    println!();
    println!("For yourself (no root): copy it under its MCA name and name the directory in the environment");
    println!("  barrier ompi --install {}", user_dir.display());
    println!("  export OMPI_MCA_mca_base_component_path={}", component_path(&user_dir, own.as_deref()));
    println!("  mpirun --mca coll_{NAME}_verbose 1 -np 4 ./your_program");
    println!();
    println!("For every job on this machine (a site): copy it into Open MPI's component directory");
    match &own {
        Some(dir) => println!("  sudo cp {} {}", library.display(), dir.join(FILE).display()),
        None => println!(
            "  sudo cp {} \"$(ompi_info --path pkglibdir --parsable | cut -d: -f3)/{FILE}\"",
            library.display()
        ),
    }
    println!();
    println!("Its parameters: ompi_info --param coll {NAME} --level 9   (with the path above in the environment)");
    println!("Turn it off for a job: mpirun --mca coll ^{NAME} ...   or   --mca coll_{NAME}_priority 0");
    Ok(())
}

//! `barrier ompi`: where Open MPI's components are, and how to install them (docs/ompi.md).

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct OmpiArgs {
    /// One component library (default: libbarrier_ompi.so and libbarrier_oshmem.so beside
    /// this command, whichever were built).
    #[arg(long, value_name = "PATH")]
    pub component: Option<PathBuf>,
    /// Copy them into DIR under their MCA names (mca_coll_fastbar.so, mca_scoll_fastbar.so;
    /// then name DIR in OMPI_MCA_mca_base_component_path, with Open MPI's own directory).
    #[arg(long, value_name = "DIR")]
    pub install: Option<PathBuf>,
}

impl OmpiArgs {
    /// Runs the command: the exit code says what happened.
    pub fn run(self) -> ExitCode {
        let OmpiArgs { component, install } = self;
        super::finish("barrier ompi", barrier_cli::ompi::run(component, install))
    }
}

//! What every wait of the interposer shares, beneath the job barrier (`serve`) and the active
//! sets (`sets`): the job's agreed wait settings, the failure a served barrier returns (a
//! sentence in PEs), the stall report, and ending the job after a failure.

/// How every wait of the job behaves (the roots' phase and the active sets alike): agreed at
/// set-up (PE 0's values), so one PE's own `BARRIER_TIMEOUT` cannot end the job alone.
pub use barrier::hierarchy::RootsWaits as Waits;

/// Why a served barrier cannot complete: a sentence in PEs, for the line that ends the job.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<barrier::Error> for Failure {
    /// The core's error in PEs where the roots' phase failed: its timeout and a departure name
    /// PEs (the core's world ranks are the PEs here); the others (the node's waits, which name
    /// the missing PEs as world ranks) read as the core says them.
    fn from(e: barrier::Error) -> Failure {
        Failure(match e {
            // The roots' phase: its sentence names the node root waited for.
            barrier::Error::Timeout { world_rank, epoch, during, waited, .. }
                if during.starts_with("the internode") =>
            {
                format!(
                    "barrier {epoch} timed out after {waited:.1?} on PE {world_rank}, in {during}; check that every PE \
                     makes the same barrier calls, or raise BARRIER_TIMEOUT (PE 0's value is the job's)"
                )
            }
            barrier::Error::RankLeft { world_rank, during, how, .. } if how.contains("shmem_finalize") => format!(
                "PE {world_rank} {how}, so {during} can never complete; every PE must make the same barrier calls \
                 before shmem_finalize"
            ),
            e => e.to_string(),
        })
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a served barrier returns.
pub type Result<T> = std::result::Result<T, Failure>;

/// A list of PEs as a person reads it: `[0, 1, 2]`, or its first few and how many more.
pub fn pe_list(pes: &[usize]) -> String {
    const SHOWN: usize = 16;
    if pes.len() <= SHOWN {
        format!("{pes:?}")
    } else {
        format!("{:?} and {} more", &pes[..SHOWN], pes.len() - SHOWN)
    }
}

/// Says a stall report (the core's wording, in PEs).
#[cold]
pub fn report_stall(what: String) {
    let msg =
        format!("{what}; still waiting (this report: BARRIER_STALL_REPORT; to give up instead, set BARRIER_TIMEOUT)");
    barrier::text::say(&msg);
}

/// Ends the job after `what` failed on this PE (a barrier of ours, which the program cannot go
/// on past, and for which the other PEs must not wait): a line naming the PE and the reason,
/// then `shmem_global_exit(70)` (or this process's exit where the implementation has none).
pub fn end_job(real: &crate::real::Real, what: &str, e: &Failure) -> ! {
    // SAFETY: the implementation is initialized.
    let me = unsafe { (real.my_pe)() };
    barrier::text::say(&format!("barrier-shmem: {what} failed on PE {me}: {e}; ending the job"));
    if let Some(exit) = real.global_exit {
        // SAFETY: ends every PE of the job.
        unsafe { exit(70) };
    }
    std::process::exit(70)
}

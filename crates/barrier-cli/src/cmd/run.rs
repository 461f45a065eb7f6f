//! `barrier run`: start N ranks of a program as one job (the launcher, `barrier-launch`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use barrier_launch::{launch, JobSpec};

use super::settings::{check_settings, emulated_devices, warn_unknown_settings};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", default_value_t = 1)]
    pub ranks: usize,
    /// Spread the ranks over M simulated nodes (contiguous blocks).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub nodes: u64,
    /// Give up on any barrier after this long and name the missing ranks (sets BARRIER_TIMEOUT).
    #[arg(long)]
    pub timeout: Option<String>,
    /// Pin rank r to the r-th core when the ranks fit on the cores.
    #[arg(long)]
    pub pin: bool,
    /// Run emulated devices inside the launcher: switch, gba, a64fx (an A64FX node shaped by
    /// BARRIER_A64FX_EMU_CMGS and _PES), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub emulate: Vec<String>,
    /// Print the emulated devices' counters at the end.
    #[arg(long)]
    pub counters: bool,
    /// Emulated switch and GBA with an engine thread of their own in the launcher, instead of
    /// inline (their work done by the ranks that ring them, through libbarrier_emu_inline.so,
    /// as in `barrier bench`). The thread competes with the ranks for the cores.
    #[arg(long)]
    pub threaded_emulator: bool,
    /// Prefix every line a rank prints with its rank ("[3] ..."), whole lines only; standard
    /// output and standard error stay apart (like mpirun --tag-output).
    #[arg(long)]
    pub tag_output: bool,
    /// The program and its arguments (after --).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub program: Vec<OsString>,
}

impl RunArgs {
    /// Runs the command: the exit code says what happened.
    pub fn run(self) -> ExitCode {
        let RunArgs { ranks, nodes, timeout, pin, emulate, counters, threaded_emulator, tag_output, program } = self;
        if let Err(e) = check_settings(timeout.as_deref(), true) {
            eprintln!("barrier run: {e}");
            return ExitCode::from(2);
        }
        warn_unknown_settings("barrier run");
        if ranks == 0 {
            eprintln!("barrier run: -n 0: a job needs at least 1 rank");
            return ExitCode::from(2);
        }
        if emulate.is_empty() && counters {
            eprintln!("barrier run: --counters prints an emulated device's counters: add --emulate switch,gba");
            return ExitCode::from(2);
        }
        let mut spec = JobSpec::new(ranks, PathBuf::from(&program[0]));
        spec.args = program[1..].to_vec();
        spec.nodes = (nodes as usize).min(ranks.max(1));
        if nodes as usize > ranks {
            eprintln!(
                "barrier run: --nodes {nodes} is more than the {ranks} ranks: using {ranks} nodes of one rank each"
            );
        }
        spec.pin = pin;
        spec.tag_output = tag_output;
        match emulated_devices("run", &emulate) {
            Ok((maps, a64fx)) => {
                spec.emulate = maps.into_iter().map(barrier_emu::Config::new).collect();
                spec.emulate_a64fx = a64fx;
            }
            Err(code) => return code,
        }
        if !spec.emulate.is_empty() && !threaded_emulator {
            let kinds: Vec<&str> = spec.emulate.iter().map(|c| c.map.kind).collect();
            match barrier_launch::inline_emulator_library() {
                Ok(library) => {
                    spec.emulate = spec.emulate.into_iter().map(barrier_emu::Config::inline).collect();
                    if barrier::Params::from_env().flag("BARRIER_VERBOSE").unwrap_or(false) {
                        eprintln!(
                            "barrier run: emulated {} inline, the ranks doing the device's work through {}",
                            kinds.join(","),
                            library.display()
                        );
                    }
                    spec.env.push((barrier::mmio::INLINE_LIBRARY_VAR.into(), library.to_string_lossy().into_owned()));
                }
                Err(why) => eprintln!(
                    "barrier run: the emulated {} runs on an engine thread of its own, which competes with \
                         the ranks for the cores (tens of µs a barrier on a small machine) because the inline \
                         emulator cannot be used: {why}; --threaded-emulator asks for the thread and silences this",
                    kinds.join(",")
                ),
            }
        }
        let cores = barrier::sys::affinity_cores().len();
        let busy = ranks + usize::from(spec.emulate.iter().any(|c| !c.inline));
        if pin && busy > cores {
            eprintln!(
                "barrier run: --pin ignored: {ranks} ranks{} do not fit on the {cores} cores this launcher may use",
                if busy == ranks { "" } else { " and an emulated device's engine" }
            );
        }
        if let Some(t) = timeout {
            spec.env.push(("BARRIER_TIMEOUT".into(), t));
        }
        match launch(&spec) {
            Ok(report) => {
                if let Some(msg) = report.describe(ranks) {
                    eprintln!("{msg}");
                }
                if counters {
                    for (kind, c) in &report.devices {
                        eprintln!("barrier run: emulated {kind}: {c:?}");
                    }
                }
                ExitCode::from(report.exit_code() as u8)
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        }
    }
}

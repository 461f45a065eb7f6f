//! The correctness suite on the hardware backends, driven against the emulated devices.

use barrier::{threads::Job, Params};
use barrier_emu::{Config, Emulator};
use barrier_suite::{stress, StressOptions};

fn params(kind: &str, emu: &Emulator) -> Params {
    Params::defaults_only()
        .set("BARRIER_BACKEND", kind)
        .set(format!("BARRIER_{}_DEVICE_PATH", kind.to_ascii_uppercase()), emu.path().display().to_string())
        .set("BARRIER_TIMEOUT", "60s")
}

#[test]
fn smoke() {
    for (kind, map) in [("switch", &barrier_hw::SWITCH), ("gba", &barrier_hw::GBA)] {
        let emu = Emulator::start(Config::new(map)).unwrap();
        for n in [1, 2, 3, 5] {
            let opts = StressOptions { iterations: 300, ..Default::default() };
            let out = Job::new(n)
                .params(params(kind, &emu))
                .run(|w| (w.backend().to_string(), w.algorithm(), stress(&w, &opts).map_err(|e| e.to_string())))
                .unwrap();
            for (b, a, r) in out {
                assert_eq!(b, kind);
                assert_eq!(r, Ok(300), "{kind} {a} n={n}");
            }
        }
        println!("{kind}: {:?}", emu.counters());
    }
}

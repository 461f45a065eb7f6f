//! Fuzzing, as proptests of raw bytes, of every parser of bytes another process controls (issue
//! 40 item 10): the job segment's header (a rank, or anyone who can write the segment, can
//! scribble over it), a device file's registers, the A64FX driver's sysfs files and every
//! `BARRIER_*` value. Each must answer with an error or a value, never panic, hang or read out
//! of bounds. (The shmem interposer's active-set arguments are fuzzed in its own crate:
//! `barrier-shmem`'s `sets` tests.) `cargo test` runs a bounded number of cases each;
//! `PROPTEST_CASES=100000 cargo test --release --test fuzz` runs longer.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;

use barrier::shm::{JobShape, Segment};
use barrier::Params;
use proptest::prelude::*;

/// Cases per property: `PROPTEST_CASES`, else 256.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

/// A real job segment's first bytes (header included), to corrupt.
fn segment_bytes() -> Vec<u8> {
    let seg = Segment::create_for_job(JobShape { world_size: 3, nodes: 1, ranks_on_machine: 3, cores: 2 }, 1 << 16)
        .expect("a segment");
    let fd = seg.raw_fd().expect("a memfd segment");
    let mut file = std::fs::File::open(format!("/proc/self/fd/{fd}")).expect("the segment's file");
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).expect("reading the segment");
    bytes
}

/// Opens `bytes` as a job segment, the way a rank of another process does.
fn open_segment(bytes: &[u8]) -> Result<(), String> {
    let fd = barrier::sys::memfd_sized("fuzz", bytes.len()).map_err(|e| e.to_string())?;
    let mut file = std::fs::File::from(fd);
    file.seek(SeekFrom::Start(0)).unwrap();
    file.write_all(bytes).unwrap();
    let identity = barrier::sys::fd_identity(file.as_raw_fd()).unwrap();
    let seg = Segment::open_from_process(std::process::id(), file.as_raw_fd(), identity).map_err(|e| e.to_string())?;
    // A segment that passed its checks is usable as far as its own layout says.
    let _ = seg.rank_names();
    let _ = seg.exited(0);
    Ok(())
}

fn device_bytes(map: &barrier_hw::DeviceMap, good_header: bool, words: &[(usize, u64)]) -> Vec<u8> {
    let mut bytes = vec![0u8; map.size as usize];
    if good_header {
        bytes[..8].copy_from_slice(&map.magic.to_le_bytes());
        bytes[8..16].copy_from_slice(&map.version.to_le_bytes());
    }
    let n_words = bytes.len() / 8;
    for &(at, value) in words {
        // Mostly the global registers (the first page), where the driver looks first.
        let w = if at % 4 == 0 { at % n_words } else { at % 512.min(n_words) };
        bytes[w * 8..w * 8 + 8].copy_from_slice(&value.to_le_bytes());
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The header of a real segment with bytes overwritten: refused with a sentence, or
    /// accepted only when its layout still fits the mapping.
    #[test]
    fn a_corrupt_segment_header_is_refused_not_trusted(
        edits in prop::collection::vec((0usize..4096, any::<u8>()), 1..24),
        cut in prop::option::of(0usize..8192),
    ) {
        let mut bytes = segment_bytes();
        for (at, b) in edits {
            bytes[at] = b;
        }
        if let Some(len) = cut {
            bytes.truncate(len.max(1));
        }
        if let Err(e) = open_segment(&bytes) {
            prop_assert!(!e.is_empty());
        }
    }

    /// Arbitrary bytes as a segment.
    #[test]
    fn arbitrary_bytes_are_not_a_segment(bytes in prop::collection::vec(any::<u8>(), 1..9000)) {
        let _ = open_segment(&bytes);
    }

    /// A device file with the right identification and arbitrary registers, or arbitrary
    /// bytes: the driver refuses it (nobody serves it) or names what is wrong, and never panics.
    #[test]
    fn a_device_file_with_arbitrary_registers_is_refused_with_a_reason(
        gba in any::<bool>(),
        good_header in any::<bool>(),
        words in prop::collection::vec((any::<usize>(), any::<u64>()), 0..32),
    ) {
        let backend = if gba { &barrier::backends::offload::GBA } else { &barrier::backends::offload::SWITCH };
        let map = if gba { &barrier_hw::GBA } else { &barrier_hw::SWITCH };
        let dir = std::env::temp_dir().join(format!("barrier-fuzz-device-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(if gba { "gba0" } else { "switch0" });
        std::fs::write(&path, device_bytes(map, good_header, &words)).unwrap();
        let name = if gba { "BARRIER_GBA_DEVICE_PATH" } else { "BARRIER_SWITCH_DEVICE_PATH" };
        let params = Params::defaults_only().set(name, path.display().to_string());
        let opened = backend.open(&params);
        std::fs::remove_dir_all(&dir).ok();
        match opened {
            Err(e) => prop_assert!(e.contains(&path.display().to_string()) || e.contains("inline"), "{e}"),
            Ok(dev) => prop_assert!(false, "an unserved file of arbitrary registers was taken for a device: {:?}", dev.counters()),
        }
    }

    /// The A64FX driver's sysfs files, arbitrary text: a value or a sentence.
    #[test]
    fn sysfs_files_parse_or_refuse(text in "\\PC{0,200}", bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        use barrier_hw::a64fx::sysfs;
        for t in [text.as_str(), &String::from_utf8_lossy(&bytes)] {
            let _ = sysfs::parse_hwinfo(t);
            let _ = sysfs::parse_core_map(t);
            let _ = sysfs::parse_bmap(t);
            let _ = sysfs::parse_used_bw(t);
        }
    }

    /// sysfs-shaped text with numbers anywhere in range: parsed values stay within what they say.
    #[test]
    fn sysfs_shaped_text_parses_or_refuses(
        numbers in prop::collection::vec(any::<u64>(), 0..12),
        seps in prop::collection::vec(prop::sample::select(vec![" ", ",", "\n", "0x", "-", ":"]), 0..12),
    ) {
        use barrier_hw::a64fx::sysfs;
        let mut text = String::new();
        for (i, n) in numbers.iter().enumerate() {
            text.push_str(&n.to_string());
            text.push_str(seps.get(i).copied().unwrap_or(" "));
        }
        let _ = sysfs::parse_hwinfo(&text);
        let _ = sysfs::parse_core_map(&text);
        let _ = sysfs::parse_bmap(&text);
        let _ = sysfs::parse_used_bw(&text);
    }

    /// Every BARRIER_* setting, with arbitrary text: checked into a value or an error that names
    /// the setting; the durations stay within a year.
    #[test]
    fn every_setting_takes_any_text(value in "\\PC{0,40}", which in any::<prop::sample::Index>()) {
        let all = barrier::registry::all_params();
        let info = &all[which.index(all.len())];
        let params = Params::defaults_only().set(info.name.clone(), value.clone());
        if let Err(e) = params.check(info) {
            prop_assert!(e.to_string().contains(&info.name), "{e}");
        }
        if let Ok(Some(d)) = params.duration(&info.name) {
            prop_assert!(d <= std::time::Duration::from_secs(366 * 24 * 3600), "{value:?} -> {d:?}");
        }
        let _ = barrier::registry::check_all(&params);
        let _ = params.stall_report();
    }
}

/// The segment fuzzing above starts from a segment this build accepts (else it would only ever
/// test the first check).
#[test]
fn an_intact_segment_opens() {
    open_segment(&segment_bytes()).expect("an intact segment");
    // And a corrupt length field is caught (the layout check runs).
    let mut bytes = segment_bytes();
    let len_at = 16;
    let v = u64::from_le_bytes(bytes[len_at..len_at + 8].try_into().unwrap());
    bytes[len_at..len_at + 8].copy_from_slice(&(v ^ 0x40).to_le_bytes());
    assert!(open_segment(&bytes).is_err());
}

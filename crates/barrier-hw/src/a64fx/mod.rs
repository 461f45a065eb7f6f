//! The Fujitsu A64FX hardware barrier as data: shape, system registers and their fields, the
//! driver's ioctl interface and sysfs text, and the emulated node's shared-memory layout.
//!
//! Sources: Fujitsu's user library (`fujitsu/hardware_barrier`: `include/fujitsu_hwb.h`,
//! `src/fujitsu_hpc_ioctl.h`, `sysfs_interface.md`) and the A64FX HPC extension specification,
//! as summarised in `seeds/004`. The driver (`barrier::backends::a64fx`) and the emulated node
//! (`barrier_emu::a64fx`) both use these definitions.
//!
//! # The hardware
//!
//! A chip has 4 CMGs (core-memory groups) of 12 compute PEs (13 with the assistant core). Each
//! CMG has 6 *barrier blades* (BB); each PE has 4 *window registers* (WR).
//!
//! * `IMP_BARRIER_INIT_SYNC_BB<b>_EL1` (EL1): `MASK` (bits 44:32, one bit per physical PE of the
//!   CMG taking part) and `BST` (bits 12:0, each PE's barrier-state bit). The OS writes MASK and
//!   clears BST when it hands the blade out.
//! * `IMP_BARRIER_ASSIGN_SYNC_W<w>_EL1` (EL1, per PE): `VALID` (bit 63) and the blade (bits 2:0)
//!   this PE's window `w` is connected to.
//! * `IMP_BARRIER_BST_SYNC_W<w>` / `LBSY_SYNC_W<w>` (EL0, per PE, bit 0): a write sets this PE's
//!   BST bit in the window's blade; a read returns the blade's `LBSY`.
//! * **LBSY flips** when every BST bit named by MASK equals the inverse of LBSY. A barrier is:
//!   read LBSY, write its inverse as BST, wait until LBSY equals what was written
//!   ([`write_bst`] is that rule as a function).

/// CMGs per chip.
pub const CMGS: usize = 4;
/// Barrier blades per CMG.
pub const BBS_PER_CMG: usize = 6;
/// Barrier windows per PE.
pub const WINDOWS_PER_PE: usize = 4;
/// Compute PEs per CMG.
pub const PES_PER_CMG: usize = 12;
/// Physical PE numbers per CMG (the 12 compute PEs and the assistant core): the width of MASK
/// and BST.
pub const MAX_PES_PER_CMG: usize = 13;

/// System register encodings (`S<op0>_<op1>_C<n>_C<m>_<op2>`), for `mrs`/`msr` and reports.
pub mod sysreg {
    /// `IMP_BARRIER_CTRL_EL1`: EL1AE (bit 63) and EL0AE (bit 62) enable access from EL1 / EL0.
    pub const CTRL_EL1: &str = "S3_0_C11_C12_0";
    /// `IMP_BARRIER_CTRL_EL1.EL1AE`.
    pub const CTRL_EL1AE: u64 = 1 << 63;
    /// `IMP_BARRIER_CTRL_EL1.EL0AE`.
    pub const CTRL_EL0AE: u64 = 1 << 62;
    /// `IMP_BARRIER_BST_BIT_EL1`.
    pub const BST_BIT_EL1: &str = "S3_0_C11_C12_4";
    /// `IMP_BARRIER_INIT_SYNC_BB0..5_EL1`.
    pub const INIT_SYNC_BB_EL1: [&str; 6] =
        ["S3_0_C15_C13_0", "S3_0_C15_C13_1", "S3_0_C15_C13_2", "S3_0_C15_C13_3", "S3_0_C15_C13_4", "S3_0_C15_C13_5"];
    /// `IMP_BARRIER_ASSIGN_SYNC_W0..3_EL1`.
    pub const ASSIGN_SYNC_W_EL1: [&str; 4] = ["S3_0_C15_C15_0", "S3_0_C15_C15_1", "S3_0_C15_C15_2", "S3_0_C15_C15_3"];
    /// `IMP_BARRIER_BST_SYNC_W0..3_EL0` / `LBSY_SYNC_W0..3_EL0`: write BST, read LBSY (bit 0).
    pub const SYNC_W_EL0: [&str; 4] = ["S3_3_C15_C15_0", "S3_3_C15_C15_1", "S3_3_C15_C15_2", "S3_3_C15_C15_3"];
}

/// Fields of `IMP_BARRIER_INIT_SYNC_BB<b>_EL1`.
pub mod init_sync_bb {
    /// One bit per physical PE (13 bits).
    pub const PE_BITS: u64 = (1 << super::MAX_PES_PER_CMG) - 1;
    /// MASK: bits 44:32.
    pub const MASK_SHIFT: u32 = 32;
    /// BST: bits 12:0.
    pub const BST_SHIFT: u32 = 0;
    /// Where the **emulated** node keeps the blade's LBSY in this word. The specification
    /// summary we work from does not place LBSY in INIT_SYNC_BB, and no driver needs it there:
    /// software reads LBSY only through a window register. Bit 16 lies in the RES0 gap between
    /// BST and MASK.
    pub const EMULATED_LBSY_BIT: u32 = 16;

    /// The register value for a blade handed out with `mask`: BST all zero, LBSY zero.
    pub const fn initial(mask: u64) -> u64 {
        (mask & PE_BITS) << MASK_SHIFT
    }

    /// MASK of a register value.
    pub const fn mask(reg: u64) -> u64 {
        (reg >> MASK_SHIFT) & PE_BITS
    }

    /// BST of a register value.
    pub const fn bst(reg: u64) -> u64 {
        (reg >> BST_SHIFT) & PE_BITS
    }

    /// LBSY of an emulated register value.
    pub const fn lbsy(reg: u64) -> bool {
        (reg >> EMULATED_LBSY_BIT) & 1 == 1
    }
}

/// Fields of `IMP_BARRIER_ASSIGN_SYNC_W<w>_EL1`.
pub mod assign_sync_w {
    /// The window is connected.
    pub const VALID: u64 = 1 << 63;
    /// The blade number: bits 2:0.
    pub const BB_MASK: u64 = 0x7;

    /// The register value connecting a window to blade `bb`.
    pub const fn connect(bb: u8) -> u64 {
        VALID | (bb as u64 & BB_MASK)
    }

    /// The blade a register value connects to, if VALID.
    pub const fn blade(reg: u64) -> Option<u8> {
        if reg & VALID != 0 {
            Some((reg & BB_MASK) as u8)
        } else {
            None
        }
    }
}

/// The blade register after PE `ppe` writes `bit` into its BST through a window: the BST bit
/// changes, and LBSY flips if every BST bit in MASK now equals the inverse of LBSY (the
/// hardware's rule; LBSY at [`init_sync_bb::EMULATED_LBSY_BIT`]). Returns the new value and
/// whether LBSY flipped.
pub const fn write_bst(reg: u64, ppe: usize, bit: bool) -> (u64, bool) {
    let me = 1u64 << ppe;
    let mut next = (reg & !me) | if bit { me } else { 0 };
    let mask = init_sync_bb::mask(next);
    let lbsy = init_sync_bb::lbsy(next);
    let want = if lbsy { 0 } else { mask };
    let flips = mask != 0 && init_sync_bb::bst(next) & mask == want;
    if flips {
        next ^= 1 << init_sync_bb::EMULATED_LBSY_BIT;
    }
    (next, flips)
}

/// Barrier descriptor: `cmg << 8 | bb`, as `fhwb_init` returns it.
pub const fn descriptor(cmg: u8, bb: u8) -> i32 {
    (cmg as i32) << 8 | bb as i32
}

/// The CMG and blade of a descriptor.
pub const fn split_descriptor(bd: i32) -> (u8, u8) {
    ((bd >> 8) as u8, bd as u8)
}

/// Linux error numbers the driver returns (negated), by name.
pub mod errno {
    /// Operation not permitted: blade being freed, caller not bound to one PE, not the owner.
    pub const EPERM: i32 = 1;
    /// Bad address.
    pub const EFAULT: i32 = 14;
    /// Busy: every blade of the CMG, or every window of the PE, is in use.
    pub const EBUSY: i32 = 16;
    /// Invalid argument: mask across CMGs or with fewer than 2 PEs, bad descriptor or window.
    pub const EINVAL: i32 = 22;
    /// Timed out: the driver did not answer (an emulated node's agent that stopped or is
    /// starved of CPU; the real driver never returns it).
    pub const ETIMEDOUT: i32 = 110;

    /// The symbolic name of an error number, for messages.
    pub fn name(e: i32) -> &'static str {
        match e {
            EPERM => "EPERM",
            EFAULT => "EFAULT",
            EBUSY => "EBUSY",
            EINVAL => "EINVAL",
            ETIMEDOUT => "ETIMEDOUT",
            _ => "errno",
        }
    }
}

/// The driver's ioctl interface (`fujitsu_hpc_ioctl.h`, magic `'F'`).
pub mod ioctl {
    /// `struct fujitsu_hwb_ioc_bb_ctl`: BB_ALLOC and BB_FREE.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct BbCtl {
        /// CMG (out of ALLOC, in to FREE).
        pub cmg: u8,
        /// Blade (out of ALLOC, in to FREE).
        pub bb: u8,
        /// Unused.
        pub unused: [u8; 2],
        /// Bytes of the cpumask `pemask` points to.
        pub size: u32,
        /// `unsigned long *pemask`: the cpumask of the PEs taking part (by cpuid).
        pub pemask: u64,
    }

    /// `struct fujitsu_hwb_ioc_bw_ctl`: BW_ASSIGN and BW_UNASSIGN.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct BwCtl {
        /// Blade.
        pub bb: u8,
        /// Window (-1 on ASSIGN: any free one; the chosen one comes back).
        pub window: i8,
    }

    /// `struct fujitsu_hwb_ioc_pe_info`: GET_PE_INFO.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct PeInfo {
        /// CMG of the calling PE.
        pub cmg: u8,
        /// Physical PE number inside its CMG.
        pub ppe: u8,
    }

    const MAGIC: u64 = b'F' as u64;
    const WRITE: u64 = 1;
    const READ: u64 = 2;

    /// Linux's `_IOC(dir, type, nr, size)` on arm64 and x86_64.
    pub const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
        dir << 30 | (size as u64) << 16 | MAGIC << 8 | nr
    }

    /// `_IOWR('F', 0x00, struct fujitsu_hwb_ioc_bb_ctl)`.
    pub const BB_ALLOC: u64 = ioc(READ | WRITE, 0x00, std::mem::size_of::<BbCtl>());
    /// `_IOWR('F', 0x01, struct fujitsu_hwb_ioc_bw_ctl)`.
    pub const BW_ASSIGN: u64 = ioc(READ | WRITE, 0x01, std::mem::size_of::<BwCtl>());
    /// `_IOW('F', 0x02, struct fujitsu_hwb_ioc_bw_ctl)`.
    pub const BW_UNASSIGN: u64 = ioc(WRITE, 0x02, std::mem::size_of::<BwCtl>());
    /// `_IOW('F', 0x03, struct fujitsu_hwb_ioc_bb_ctl)`.
    pub const BB_FREE: u64 = ioc(WRITE, 0x03, std::mem::size_of::<BbCtl>());
    /// `_IOR('F', 0x04, struct fujitsu_hwb_ioc_pe_info)`.
    pub const GET_PE_INFO: u64 = ioc(READ, 0x04, std::mem::size_of::<PeInfo>());
}

/// The device file the real driver creates.
pub const DEVICE_PATH: &str = "/dev/fujitsu_hwb";
/// Where the real driver's sysfs tree lives.
pub const SYSFS_PATH: &str = "/sys/class/misc/fujitsu_hwb";

/// The sysfs tree's text formats (`sysfs_interface.md`), written by the emulated node and read
/// by the driver, so both use these functions.
pub mod sysfs {
    /// `hwinfo`: "#CMG #BB/CMG #BW/PE #maxPE".
    pub fn format_hwinfo(cmgs: usize, bbs: usize, windows: usize, max_pe: usize) -> String {
        format!("{cmgs} {bbs} {windows} {max_pe}\n")
    }

    /// Parses `hwinfo` into (CMGs, BBs per CMG, windows per PE, max physical PEs per CMG).
    pub fn parse_hwinfo(text: &str) -> Result<(usize, usize, usize, usize), String> {
        let v: Vec<usize> = text
            .split_whitespace()
            .map(|w| w.parse::<usize>().map_err(|_| format!("hwinfo field {w:?} is not a number")))
            .collect::<Result<_, _>>()?;
        match v[..] {
            [c, b, w, p] => Ok((c, b, w, p)),
            _ => Err(format!("hwinfo has {} fields, expected 4 (\"#CMG #BB #BW #maxPE\")", v.len())),
        }
    }

    /// A CMG's `core_map`: one "cpuid physPE" line per PE.
    pub fn format_core_map(pes: &[(usize, usize)]) -> String {
        pes.iter().map(|(cpu, ppe)| format!("{cpu} {ppe}\n")).collect()
    }

    /// Parses `core_map` into (cpuid, physical PE) pairs.
    pub fn parse_core_map(text: &str) -> Result<Vec<(usize, usize)>, String> {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let mut it = l.split_whitespace().map(str::parse::<usize>);
                match (it.next(), it.next(), it.next()) {
                    (Some(Ok(cpu)), Some(Ok(ppe)), None) => Ok((cpu, ppe)),
                    _ => Err(format!("core_map line {l:?} is not \"cpuid physPE\"")),
                }
            })
            .collect()
    }

    /// A bitmap as the driver prints it: 4 hex digits.
    pub fn format_bmap(bits: u64) -> String {
        format!("{bits:04x}")
    }

    /// Parses a hex bitmap.
    pub fn parse_bmap(text: &str) -> Result<u64, String> {
        let t = text.trim();
        u64::from_str_radix(t, 16).map_err(|_| format!("bitmap {t:?} is not hex"))
    }

    /// `used_bb_bmap`: the used blades of a CMG.
    pub fn format_used_bb(bits: u64) -> String {
        format!("{}\n", format_bmap(bits))
    }

    /// `used_bw_bmap`: "cpuid bitmap" per PE, the used windows of each.
    pub fn format_used_bw(pes: &[(usize, u64)]) -> String {
        pes.iter().map(|(cpu, bits)| format!("{cpu} {}\n", format_bmap(*bits))).collect()
    }

    /// Parses `used_bw_bmap` into (cpuid, used windows).
    pub fn parse_used_bw(text: &str) -> Result<Vec<(usize, u64)>, String> {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [cpu, bits] => Ok((cpu.parse().map_err(|_| format!("bad cpuid in {l:?}"))?, parse_bmap(bits)?)),
                _ => Err(format!("used_bw_bmap line {l:?} is not \"cpuid bitmap\"")),
            })
            .collect()
    }

    /// `init_sync_bb<b>`: MASK on the first line, BST on the second.
    pub fn format_init_sync_bb(mask: u64, bst: u64) -> String {
        format!("{}\n{}\n", format_bmap(mask), format_bmap(bst))
    }
}

pub mod node;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::FLAG_BYTES;

    #[test]
    fn ioctl_numbers_match_the_c_header() {
        // sizeof(bb_ctl) = 16 on LP64 (u8, u8, u8[2], u32, pointer).
        assert_eq!(std::mem::size_of::<ioctl::BbCtl>(), 16);
        assert_eq!(ioctl::BB_ALLOC, 0xC010_4600);
        assert_eq!(ioctl::BW_ASSIGN, 0xC002_4601);
        assert_eq!(ioctl::BW_UNASSIGN, 0x4002_4602);
        assert_eq!(ioctl::BB_FREE, 0x4010_4603);
        assert_eq!(ioctl::GET_PE_INFO, 0x8002_4604);
    }

    #[test]
    fn lbsy_flips_only_when_every_masked_bst_equals_its_inverse() {
        let mut reg = init_sync_bb::initial(0b1011);
        // Round 1: LBSY 0, everyone writes 1.
        for (i, ppe) in [0, 1, 3].into_iter().enumerate() {
            let (next, flipped) = write_bst(reg, ppe, true);
            reg = next;
            assert_eq!(flipped, i == 2, "ppe {ppe}");
        }
        assert!(init_sync_bb::lbsy(reg));
        // A PE outside the mask changes nothing.
        assert!(!write_bst(reg, 2, false).1);
        // Round 2: LBSY 1, everyone writes 0.
        for (i, ppe) in [3, 0, 1].into_iter().enumerate() {
            let (next, flipped) = write_bst(reg, ppe, false);
            reg = next;
            assert_eq!(flipped, i == 2);
        }
        assert!(!init_sync_bb::lbsy(reg));
        assert_eq!(init_sync_bb::mask(reg), 0b1011);
    }

    #[test]
    fn descriptors_and_assign_words_round_trip() {
        assert_eq!(descriptor(3, 5), 0x305);
        assert_eq!(split_descriptor(0x305), (3, 5));
        assert_eq!(assign_sync_w::blade(assign_sync_w::connect(5)), Some(5));
        assert_eq!(assign_sync_w::blade(5), None);
    }

    #[test]
    fn sysfs_text_round_trips_in_the_documented_format() {
        assert_eq!(sysfs::format_hwinfo(4, 6, 4, 13), "4 6 4 13\n");
        assert_eq!(sysfs::parse_hwinfo("4 6 4 13\n"), Ok((4, 6, 4, 13)));
        assert!(sysfs::parse_hwinfo("4 6 4").is_err());
        let map = [(12, 0), (13, 1)];
        assert_eq!(sysfs::parse_core_map(&sysfs::format_core_map(&map)), Ok(map.to_vec()));
        assert_eq!(sysfs::format_used_bb(0b100), "0004\n");
        assert_eq!(sysfs::parse_used_bw("12 0000\n13 0003\n"), Ok(vec![(12, 0), (13, 3)]));
        assert_eq!(sysfs::format_init_sync_bb(0xfff, 0), "0fff\n0000\n");
    }

    #[test]
    fn node_layout_places_every_line_apart() {
        let l = node::Layout::A64FX;
        l.validate().unwrap();
        assert!(l.blade(0, 0) >= 2 * FLAG_BYTES);
        assert_eq!(l.flips(0, 0) + FLAG_BYTES, l.blade(0, 1));
        let last_blade = l.flips(l.cmgs - 1, l.bbs - 1);
        assert!(last_blade < l.assign(0, 0, 0));
        assert!(l.assign(l.cmgs - 1, l.pes - 1, 3) < l.file(0));
        assert!(l.file(node::OPEN_SLOTS - 1) < l.slot_state(0));
        assert!(l.slot_args(node::MAILBOX_SLOTS - 1) + node::arg::PID + 8 <= l.size());
        assert!(l.slot_args(0) + node::arg::PID < l.slot_state(1));
        assert_eq!(l.pe_of(13), Some((1, 1)));
        assert!(node::Layout { pes: 14, ..l }.validate().is_err());
    }
}

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

/// The emulated node's shared memory: registers, the open-file table and the request mailbox,
/// in lines of [`crate::FLAG_BYTES`] (one writer per line where one is possible).
///
/// ```text
/// line 0                 header: MAGIC, VERSION, CMGS, PES_PER_CMG, BBS, WINDOWS
/// line 1                 doorbell (a flag the node's agent sleeps on)
/// blades                 per (cmg, bb): a register line [INIT_SYNC_BB, OWNER] and a flips flag
/// PEs                    per (cmg, ppe): a line of ASSIGN_SYNC_W0..3
/// open files             OPEN_SLOTS lines: [pid of the opener, 0 when free]
/// mailbox                MAILBOX_SLOTS × (a state flag line, an argument line of 9 words)
/// ```
///
/// The flips flag counts LBSY flips (its low bit is LBSY): waiters can sleep on it, which real
/// hardware does not need (every thread owns its PE) but an oversubscribed emulation does.
pub mod node {
    use crate::FLAG_BYTES;

    /// MAGIC of an emulated node ("A64FXHWB").
    pub const MAGIC: u64 = u64::from_le_bytes(*b"A64FXHWB");
    /// Layout version (2: the caller's pid in every request, the SERVING and ABANDONED states).
    pub const VERSION: u64 = 2;
    /// Header words.
    pub const H_MAGIC: u64 = 0;
    /// Layout version word.
    pub const H_VERSION: u64 = 8;
    /// CMGs.
    pub const H_CMGS: u64 = 16;
    /// Compute PEs per CMG.
    pub const H_PES: u64 = 24;
    /// Blades per CMG.
    pub const H_BBS: u64 = 32;
    /// Windows per PE.
    pub const H_WINDOWS: u64 = 40;
    /// Open-file table entries (one per process with the device open).
    pub const OPEN_SLOTS: usize = 64;
    /// Mailbox slots (concurrent driver calls).
    pub const MAILBOX_SLOTS: usize = 64;

    /// Mailbox slot states (the value of the slot's state flag).
    pub mod state {
        /// Free.
        pub const FREE: u64 = 0;
        /// Claimed by a caller writing its request.
        pub const CLAIMED: u64 = 1;
        /// Request posted; the agent may take it (→ SERVING) or the caller withdraw it after
        /// its timeout (→ FREE), whichever compare-and-swap wins.
        pub const POSTED: u64 = 2;
        /// The agent has taken the request: it will answer, and the caller waits for that.
        pub const SERVING: u64 = 3;
        /// Answered; the caller reads the answer and frees the slot.
        pub const DONE: u64 = 4;
        /// The caller stopped waiting for a request the agent had taken (SERVING →
        /// ABANDONED); the agent frees the slot when it finishes instead of answering.
        pub const ABANDONED: u64 = 5;
    }

    /// Driver calls (the ioctls, plus open).
    pub mod op {
        /// BB_ALLOC: arg0 = cpumask; out0 = cmg, out1 = bb.
        pub const BB_ALLOC: u64 = 1;
        /// BB_FREE: arg0 = cmg, arg1 = bb.
        pub const BB_FREE: u64 = 2;
        /// BW_ASSIGN: arg0 = bb, arg1 = window (as i8); out0 = window.
        pub const BW_ASSIGN: u64 = 3;
        /// BW_UNASSIGN: arg0 = bb.
        pub const BW_UNASSIGN: u64 = 4;
        /// GET_PE_INFO: out0 = cmg, out1 = ppe.
        pub const GET_PE_INFO: u64 = 5;
    }

    /// Words of a mailbox slot's argument line.
    pub mod arg {
        /// Operation.
        pub const OP: u64 = 0;
        /// Open-file slot of the caller.
        pub const FILE: u64 = 8;
        /// The caller's CPU, or `NOT_BOUND` when its thread is not bound to exactly one.
        pub const CPU: u64 = 16;
        /// First argument.
        pub const ARG0: u64 = 24;
        /// Second argument.
        pub const ARG1: u64 = 32;
        /// Result: 0 or a negative errno (as i64).
        pub const RESULT: u64 = 40;
        /// First output.
        pub const OUT0: u64 = 48;
        /// Second output.
        pub const OUT1: u64 = 56;
        /// The caller's pid: the agent serves a request only while the open-file entry it names
        /// still belongs to this pid (a dead caller's request must not act for a new opener of
        /// the same entry), and frees the slots of callers that are gone.
        pub const PID: u64 = 64;
    }

    /// Bytes of a slot's argument words (`arg::*`), in whole lines.
    const ARG_BYTES: u64 = (arg::PID + 8).div_ceil(FLAG_BYTES) * FLAG_BYTES;
    /// Bytes of one mailbox slot: the state flag's line and the argument lines.
    const SLOT_BYTES: u64 = FLAG_BYTES + ARG_BYTES;

    /// The CPU word of a caller whose thread is not bound to exactly one CPU.
    pub const NOT_BOUND: u64 = u64::MAX;

    /// The node's shape and where everything lives.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Layout {
        /// CMGs.
        pub cmgs: usize,
        /// Compute PEs per CMG.
        pub pes: usize,
        /// Blades per CMG.
        pub bbs: usize,
        /// Windows per PE.
        pub windows: usize,
    }

    impl Layout {
        /// The A64FX: 4 CMGs × 12 PEs, 6 blades per CMG, 4 windows per PE.
        pub const A64FX: Layout = Layout {
            cmgs: super::CMGS,
            pes: super::PES_PER_CMG,
            bbs: super::BBS_PER_CMG,
            windows: super::WINDOWS_PER_PE,
        };

        /// Checks the shape against the hardware's field widths.
        pub fn validate(&self) -> Result<(), String> {
            if self.cmgs == 0 || self.cmgs > 8 {
                return Err(format!("{} CMGs: a node has 1 to 8", self.cmgs));
            }
            if self.pes < 2 || self.pes > super::MAX_PES_PER_CMG {
                return Err(format!("{} PEs per CMG: MASK has room for 2 to {}", self.pes, super::MAX_PES_PER_CMG));
            }
            if self.bbs == 0 || self.bbs > 8 {
                return Err(format!("{} blades per CMG: ASSIGN_SYNC_W names blades 0 to 7", self.bbs));
            }
            if self.windows == 0 || self.windows > 4 {
                return Err(format!("{} windows per PE: a PE has 1 to 4", self.windows));
            }
            if self.cmgs * self.pes > 64 {
                return Err(format!(
                    "{} CPUs, more than 64: the emulated cpumask is one word (lower the CMGs or the PEs per CMG)",
                    self.cmgs * self.pes
                ));
            }
            Ok(())
        }

        /// CPUs of the node (cpuid = cmg * pes + ppe).
        pub fn cpus(&self) -> usize {
            self.cmgs * self.pes
        }

        /// (CMG, physical PE) of a cpuid.
        pub fn pe_of(&self, cpu: usize) -> Option<(usize, usize)> {
            (cpu < self.cpus()).then(|| (cpu / self.pes, cpu % self.pes))
        }

        /// The doorbell flag line.
        pub fn doorbell(&self) -> u64 {
            FLAG_BYTES
        }

        fn blades_base(&self) -> u64 {
            2 * FLAG_BYTES
        }

        /// The register line of blade `bb` of CMG `cmg`: [INIT_SYNC_BB, OWNER].
        pub fn blade(&self, cmg: usize, bb: usize) -> u64 {
            self.blades_base() + ((cmg * self.bbs + bb) * 2) as u64 * FLAG_BYTES
        }

        /// The flips flag of a blade (counts LBSY flips).
        pub fn flips(&self, cmg: usize, bb: usize) -> u64 {
            self.blade(cmg, bb) + FLAG_BYTES
        }

        fn pes_base(&self) -> u64 {
            self.blades_base() + (self.cmgs * self.bbs * 2) as u64 * FLAG_BYTES
        }

        /// ASSIGN_SYNC_W<window> of PE `ppe` of CMG `cmg`.
        pub fn assign(&self, cmg: usize, ppe: usize, window: usize) -> u64 {
            self.pes_base() + (cmg * self.pes + ppe) as u64 * FLAG_BYTES + 8 * window as u64
        }

        fn files_base(&self) -> u64 {
            self.pes_base() + (self.cmgs * self.pes) as u64 * FLAG_BYTES
        }

        /// Open-file table entry `i` (the opener's pid, 0 when free).
        pub fn file(&self, i: usize) -> u64 {
            self.files_base() + i as u64 * FLAG_BYTES
        }

        fn mailbox_base(&self) -> u64 {
            self.files_base() + OPEN_SLOTS as u64 * FLAG_BYTES
        }

        /// Mailbox slot `i`'s state flag.
        pub fn slot_state(&self, i: usize) -> u64 {
            self.mailbox_base() + i as u64 * SLOT_BYTES
        }

        /// Mailbox slot `i`'s argument line.
        pub fn slot_args(&self, i: usize) -> u64 {
            self.slot_state(i) + FLAG_BYTES
        }

        /// Bytes of the node file.
        pub fn size(&self) -> u64 {
            self.mailbox_base() + MAILBOX_SLOTS as u64 * SLOT_BYTES
        }

        /// The byte of the node file an opener holds an OFD lock on while open-file entry `i` is
        /// its: the node frees a dead opener's blades and windows when the lock is gone.
        pub fn file_lock(&self, i: usize) -> u64 {
            self.file(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FLAG_BYTES;

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

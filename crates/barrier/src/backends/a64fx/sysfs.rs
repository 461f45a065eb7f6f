//! The driver's sysfs tree (`/sys/class/misc/fujitsu_hwb`, `sysfs_interface.md`): the node's
//! shape, each CMG's CPUs and physical PEs, and which blades and windows are in use. Read the
//! same way from the real tree and from the emulated node's fake one.

use std::path::Path;

use barrier_hw::a64fx::sysfs;

/// One CMG as the driver shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmgInfo {
    /// (cpuid, physical PE) of each PE, from `core_map`.
    pub pes: Vec<(usize, usize)>,
    /// Blades in use (bit per blade), from `used_bb_bmap`.
    pub used_blades: u64,
    /// Windows in use per cpuid (bit per window), from `used_bw_bmap`.
    pub used_windows: Vec<(usize, u64)>,
}

/// The node as the driver's sysfs tree shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Blades per CMG.
    pub blades_per_cmg: usize,
    /// Windows per PE.
    pub windows_per_pe: usize,
    /// Highest physical PE count per CMG (`hwinfo`'s fourth field).
    pub max_pe: usize,
    /// The CMGs, by number.
    pub cmgs: Vec<CmgInfo>,
}

impl NodeInfo {
    /// Reads the tree at `dir`.
    pub fn read(dir: &Path) -> Result<NodeInfo, String> {
        let read = |rel: &str| {
            let p = dir.join(rel);
            // The tree says which PEs and blades exist: only a trustworthy file may say it.
            let mut text = String::new();
            crate::sys::open_trusted(&p, false)
                .and_then(|mut f| std::io::Read::read_to_string(&mut f, &mut text))
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            Ok::<_, String>(text)
        };
        let (cmgs, blades_per_cmg, windows_per_pe, max_pe) =
            sysfs::parse_hwinfo(&read("hwinfo")?).map_err(|e| format!("{}/hwinfo: {e}", dir.display()))?;
        let cmgs = (0..cmgs)
            .map(|c| {
                let at = |e: String| format!("{}/CMG{c}: {e}", dir.display());
                Ok(CmgInfo {
                    pes: sysfs::parse_core_map(&read(&format!("CMG{c}/core_map"))?).map_err(at)?,
                    used_blades: sysfs::parse_bmap(&read(&format!("CMG{c}/used_bb_bmap"))?).map_err(at)?,
                    used_windows: sysfs::parse_used_bw(&read(&format!("CMG{c}/used_bw_bmap"))?).map_err(at)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(NodeInfo { blades_per_cmg, windows_per_pe, max_pe, cmgs })
    }

    /// The first `n` CPUs of the node, CMG by CMG in `core_map` order: where to pin `n` thread
    /// ranks so that each CMG's are contiguous (`threads::Job::pin_cpus`). `None` if the node
    /// has fewer.
    pub fn compact_cpus(&self, n: usize) -> Option<Vec<usize>> {
        let all: Vec<usize> = self.cmgs.iter().flat_map(|c| c.pes.iter().map(|&(cpu, _)| cpu)).collect();
        (all.len() >= n).then(|| all[..n].to_vec())
    }

    /// Free blades of CMG `cmg`.
    pub fn free_blades(&self, cmg: usize) -> usize {
        self.cmgs.get(cmg).map_or(0, |c| self.blades_per_cmg.saturating_sub(c.used_blades.count_ones() as usize))
    }

    /// Free windows of CMG `cmg`, summed over its PEs.
    pub fn free_windows(&self, cmg: usize) -> usize {
        self.cmgs.get(cmg).map_or(0, |c| {
            c.used_windows.iter().map(|&(_, used)| self.windows_per_pe.saturating_sub(used.count_ones() as usize)).sum()
        })
    }

    /// One line per CMG: its CPUs, free blades and free windows (for `barrier info`).
    pub fn summary(&self) -> Vec<String> {
        self.cmgs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let cpus = match (c.pes.first(), c.pes.last()) {
                    (Some(a), Some(b)) => format!("CPUs {}-{}", a.0, b.0),
                    _ => "no CPUs".into(),
                };
                format!(
                    "CMG{i}: {} PEs ({cpus}), {}/{} blades free, {}/{} windows free",
                    c.pes.len(),
                    self.free_blades(i),
                    self.blades_per_cmg,
                    self.free_windows(i),
                    c.pes.len() * self.windows_per_pe
                )
            })
            .collect()
    }
}

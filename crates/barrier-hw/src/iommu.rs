//! The IOMMU table in device memory: where it is, its entries' words and states, and where the
//! IOVA space drivers hand out starts.

/// Offset of the IOMMU table.
pub const IOMMU_BASE: u64 = 0x1000;
/// Entries in the IOMMU table.
pub const IOMMU_ENTRIES: u64 = 8192;
/// Bytes per IOMMU entry: `[iova, len, host_offset, state]` as four u64 words.
pub const IOMMU_ENTRY_BYTES: u64 = 32;
/// Offset of an IOMMU entry's IOVA word (the window's start).
pub const IOMMU_IOVA: u64 = 0;
/// Offset of an IOMMU entry's window length.
pub const IOMMU_LEN: u64 = 8;
/// Offset of an IOMMU entry's host offset (where in DMA memory the window lands).
pub const IOMMU_HOST: u64 = 16;
/// Offset of an IOMMU entry's state word: the state ([`IOMMU_FREE`], [`IOMMU_CLAIMED`],
/// [`IOMMU_VALID`]) in the low byte ([`IOMMU_STATE_CODE`]); in a VALID entry a tag of the claim
/// above it (bits 8-31, drawn at random for every claim, never zero) and the claiming process's
/// pid (bits 32-63). A driver changes an entry only through FREE, so a state word that reads
/// the same twice means the words between were one mapping's (unless the same process claimed
/// the entry again and drew the same tag: one claim in 2^24).
pub const IOMMU_STATE: u64 = 24;
/// The state code's bits in an IOMMU state word.
pub const IOMMU_STATE_CODE: u64 = 0xff;
/// Where a claim's tag sits in an IOMMU state word, and its bits.
pub const IOMMU_TAG_SHIFT: u32 = 8;
/// The bits of a claim's tag (before the shift).
pub const IOMMU_TAG_BITS: u64 = 0xff_ffff;
/// IOMMU entry state: free.
pub const IOMMU_FREE: u64 = 0;
/// IOMMU entry state: being written by a driver (claimed, not valid yet).
pub const IOMMU_CLAIMED: u64 = 1;
/// IOMMU entry state: valid translation, device may write.
pub const IOMMU_VALID: u64 = 2;
/// Where the IOVA space handed out by drivers starts (so that an IOVA is never a small number).
pub const IOVA_BASE: u64 = 0x1_0000_0000;

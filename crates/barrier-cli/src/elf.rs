//! What a shared library defines, read from its ELF dynamic symbol table (no tool needed): the
//! MPI, OpenSHMEM and Open MPI component commands check a library before they time or install it.

/// Whether the little-endian 64-bit ELF file `elf` defines the dynamic symbol `name`: an
/// entry of its `.dynsym` with that name and a section (an import has none). `None` if the
/// bytes are not such a file, it has no `.dynsym` section, or its tables lie outside it.
pub fn defines_symbol(elf: &[u8], name: &str) -> Option<bool> {
    const SHT_DYNSYM: u32 = 11;
    const SHN_UNDEF: u16 = 0;
    let bytes = |at: usize, n: usize| elf.get(at..at.checked_add(n)?);
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes(at, 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes(at, 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes(at, 8)?.try_into().ok()?) as usize);
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB.
    if bytes(0, 6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (shoff, shentsize, shnum) = (u64_at(0x28)?, u16_at(0x3A)? as usize, u16_at(0x3C)? as usize);
    // Offsets inside the file from here on, so that no sum below can overflow.
    if shoff > elf.len() {
        return None;
    }
    let section = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    for i in 0..shnum {
        let sh = section(i)?;
        if u32_at(sh + 4)? != SHT_DYNSYM {
            continue;
        }
        let (symoff, symsize, link, entsize) =
            (u64_at(sh + 0x18)?, u64_at(sh + 0x20)?, u32_at(sh + 0x28)?, u64_at(sh + 0x38)?);
        if symoff.checked_add(symsize)? > elf.len() {
            return None;
        }
        let strtab = section(link as usize)?;
        let (stroff, strsize) = (u64_at(strtab + 0x18)?, u64_at(strtab + 0x20)?);
        let strings = bytes(stroff, strsize)?;
        for sym in (0..symsize / entsize.max(1)).map(|k| symoff + k * entsize) {
            let name_at = u32_at(sym)? as usize;
            let shndx = u16_at(sym + 6)?;
            // (A name outside the string table names nothing: skipped.)
            let Some(sym_name) = strings.get(name_at..).and_then(|s| s.split(|&b| b == 0).next()) else { continue };
            if sym_name == name.as_bytes() && shndx != SHN_UNDEF {
                return Some(true);
            }
        }
        return Some(false);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::defines_symbol;

    #[test]
    fn only_a_defined_dynamic_symbol_counts() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(defines_symbol(&exe, "MPI_Barrier"), Some(false));
        // Imported from the C library: named in .dynsym, but not defined here.
        assert_eq!(defines_symbol(&exe, "malloc"), Some(false));
        assert_eq!(defines_symbol(b"#!/bin/sh", "MPI_Barrier"), None);
        assert_eq!(defines_symbol(&exe[..100], "MPI_Barrier"), None, "a truncated file");
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file());
        if let Some(libc) = libc {
            assert_eq!(defines_symbol(&std::fs::read(libc).unwrap(), "malloc"), Some(true));
        }
    }
}

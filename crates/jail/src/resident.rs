//! Giving back the pages of warden's own code while a process idles.
//!
//! A long-lived supervisor executes little once its sandbox runs: it waits
//! for requests on its control socket and for notices from the init. Yet
//! the pages of the binary it touched while starting stay in its resident
//! set: most of an idle supervisor's resident memory is the static binary's
//! text and read-only data, read in 64 KiB fault-around blocks.
//! [`release_code`] unmaps those pages from this process (`MADV_DONTNEED`);
//! they stay in the page cache, shared with every other warden process, and
//! come back as minor faults when the code runs again.
//!
//! Only pages that hold nothing of this process's own are released: those
//! of the executable's loaded segments that are not writable (`PF_W`), not
//! part of the region made read-only after relocation (`PT_GNU_RELRO`,
//! whose pages are private copies holding relocated pointers), in an
//! executable without text relocations (`DT_TEXTREL`, `DF_TEXTREL`), and
//! whole pages only. Such a page is never written after `execve`, so it is
//! identical to the file's page it maps, and dropping it loses nothing.

use std::ops::Range;

/// Why the executable's code could not be released.
#[derive(Debug, thiserror::Error)]
pub enum ResidentError {
    #[error("cannot find the executable's program headers")]
    NoHeaders,
    #[error("the executable has text relocations: its code pages are private copies, kept")]
    TextRelocations,
    #[error("cannot release the executable's pages {start:#x}..{end:#x} from memory")]
    Advise {
        start: usize,
        end: usize,
        #[source]
        source: nix::errno::Errno,
    },
}

/// What the kernel tells of the running executable: its load address and
/// its program headers.
struct Image {
    base: usize,
    headers: Vec<libc::Elf64_Phdr>,
}

/// The main executable's image: the first object `dl_iterate_phdr` reports
/// is always the program itself (in a static binary, the only one).
fn image() -> Option<Image> {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `&mut Option<Image>` passed below, alive and
        // not otherwise borrowed during the call; `info` is valid for the
        // call (the libc contract), and its `dlpi_phdr` points at
        // `dlpi_phnum` headers mapped for the life of the process.
        unsafe {
            let out = &mut *data.cast::<Option<Image>>();
            let info = &*info;
            let headers = if info.dlpi_phdr.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)).to_vec()
            };
            *out = Some(Image {
                base: info.dlpi_addr as usize,
                headers,
            });
        }
        // Non-zero: stop after the first object.
        1
    }
    let mut out: Option<Image> = None;
    // SAFETY: the callback only writes through `data`, which points at `out`
    // for the duration of the call.
    unsafe {
        libc::dl_iterate_phdr(Some(first), (&mut out as *mut Option<Image>).cast());
    }
    out.filter(|i| !i.headers.is_empty())
}

const DT_NULL: u64 = 0;
const DT_TEXTREL: u64 = 22;
const DT_FLAGS: u64 = 30;
const DF_TEXTREL: u64 = 4;

/// Whether the executable's dynamic section asks for text relocations
/// (its read-only segments were then written by the loader).
fn has_text_relocations(image: &Image) -> bool {
    let Some(dynamic) = image.headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC) else {
        return false;
    };
    let entries = dynamic.p_memsz as usize / std::mem::size_of::<[u64; 2]>();
    let first = image.base.wrapping_add(dynamic.p_vaddr as usize) as *const [u64; 2];
    for i in 0..entries {
        // SAFETY: PT_DYNAMIC lies within a loaded segment, mapped readable
        // for the life of the process, and holds `entries` (tag, value)
        // pairs of 8-byte words, 8-byte aligned (the ELF64 layout).
        let [tag, value] = unsafe { first.add(i).read() };
        match tag {
            DT_NULL => break,
            DT_TEXTREL => return true,
            DT_FLAGS if value & DF_TEXTREL != 0 => return true,
            _ => {}
        }
    }
    false
}

/// The whole pages of the executable that are safe to drop: those of its
/// non-writable loaded segments, outside its RELRO region.
fn code_ranges(image: &Image, page: usize) -> Vec<Range<usize>> {
    let down = |a: usize| a & !(page - 1);
    let up = |a: usize| a.saturating_add(page - 1) & !(page - 1);
    let relro: Vec<Range<usize>> = image
        .headers
        .iter()
        .filter(|h| h.p_type == libc::PT_GNU_RELRO)
        .map(|h| {
            let start = image.base.wrapping_add(h.p_vaddr as usize);
            // Widened to whole pages: any page it touches is kept.
            down(start)..up(start.saturating_add(h.p_memsz as usize))
        })
        .collect();
    let mut out = Vec::new();
    for h in &image.headers {
        if h.p_type != libc::PT_LOAD || h.p_flags & libc::PF_W != 0 {
            continue;
        }
        let start = image.base.wrapping_add(h.p_vaddr as usize);
        // Narrowed to whole pages: a page shared with a neighbour is kept.
        let whole = up(start)..down(start.saturating_add(h.p_filesz as usize));
        let mut ranges = Vec::from([whole]);
        for r in &relro {
            ranges = ranges.into_iter().flat_map(|x| subtract(x, r)).collect();
        }
        out.extend(ranges.into_iter().filter(|r| r.start < r.end));
    }
    out
}

/// `a` without `b`: up to two ranges.
fn subtract(a: Range<usize>, b: &Range<usize>) -> Vec<Range<usize>> {
    if b.end <= a.start || a.end <= b.start {
        return vec![a];
    }
    let mut out = Vec::new();
    if a.start < b.start {
        out.push(a.start..b.start);
    }
    if b.end < a.end {
        out.push(b.end..a.end);
    }
    out
}

/// Drop this process's mappings of the executable's code and read-only data
/// pages (see the module's documentation); returns how many bytes of
/// address space were released. The pages come back from the page cache
/// when used.
pub fn release_code() -> Result<usize, ResidentError> {
    let image = image().ok_or(ResidentError::NoHeaders)?;
    if has_text_relocations(&image) {
        return Err(ResidentError::TextRelocations);
    }
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| usize::try_from(p).ok())
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let mut released = 0;
    for r in code_ranges(&image, page) {
        let len = r.end - r.start;
        // SAFETY: `r` is a whole-page range of a non-writable segment of the
        // executable, outside RELRO, in an image without text relocations:
        // its pages were never written in this process, so they equal the
        // file's, and MADV_DONTNEED only makes the next access fault them
        // back from the page cache. No Rust object lives in a segment's
        // bytes as owned memory; they are code and constants.
        let advised =
            unsafe { libc::madvise(r.start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if advised != 0 {
            return Err(ResidentError::Advise {
                start: r.start,
                end: r.end,
                source: nix::errno::Errno::last(),
            });
        }
        released += len;
    }
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many pages of `r` this process has mapped (the "present" bit of
    /// `/proc/self/pagemap`: in its resident set, not merely in the page
    /// cache).
    fn mapped_pages(r: &Range<usize>, page: usize) -> usize {
        use std::os::unix::fs::FileExt;
        let n = (r.end - r.start) / page;
        let mut buf = vec![0u8; n * 8];
        let f = std::fs::File::open("/proc/self/pagemap").unwrap();
        f.read_exact_at(&mut buf, (r.start / page * 8) as u64)
            .unwrap();
        buf.chunks_exact(8)
            .filter(|e| u64::from_le_bytes((*e).try_into().unwrap()) & (1 << 63) != 0)
            .count()
    }

    /// The smaps fields of the mapping that contains `addr`.
    fn smaps_of(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut out = String::new();
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-').filter(|_| !line.ends_with(" kB")) {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                }
            }
            if inside {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    fn rss_kib(field: &str) -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    #[test]
    fn released_code_leaves_the_resident_set_and_still_runs() {
        let image = image().expect("the test binary's program headers");
        let page = 4096;
        let ranges = code_ranges(&image, page);
        assert!(!ranges.is_empty(), "no read-only segment found");
        let here = released_code_leaves_the_resident_set_and_still_runs as *const () as usize;
        assert!(
            ranges.iter().any(|r| r.contains(&here)),
            "this test's own code is not in the ranges released: {ranges:x?}"
        );
        let before = rss_kib("RssFile:");
        let resident_before: usize = ranges.iter().map(|r| mapped_pages(r, page)).sum();
        let released = release_code().expect("release");
        assert_eq!(
            released,
            ranges.iter().map(|r| r.end - r.start).sum::<usize>()
        );
        let resident_after: usize = ranges.iter().map(|r| mapped_pages(r, page)).sum();
        let after = rss_kib("RssFile:");
        println!(
            "released {} KiB; pages of the ranges mapped {resident_before} -> {resident_after}; RssFile {before} -> {after} KiB",
            released / 1024
        );
        assert!(resident_before > 0);
        // Only the pages run or read since the release are back (the
        // test's own code and what it called, each fault mapping its
        // neighbours too).
        assert!(
            resident_after < resident_before,
            "the pages stayed mapped: {resident_before} -> {resident_after}"
        );
        assert!(
            after < before,
            "the file-backed resident set did not shrink: {before} -> {after} KiB"
        );
        // The code runs again (faulted back from the page cache), and the
        // constants read back are the same.
        let text = format!("{:?}", (1..5).map(|x| x * 3).collect::<Vec<_>>());
        assert_eq!(text, "[3, 6, 9, 12]");
        assert_eq!(crate::SECCOMP_PROGRAM.len() % 8, 0);
    }

    #[test]
    fn relocated_data_is_never_released() {
        // A table of pointers: relocated at start, so its page is a private
        // copy in the RELRO region (or in a writable segment).
        static NAMES: [&str; 3] = ["one", "two", "three"];
        let image = image().expect("the test binary's program headers");
        let page = 4096;
        let ranges = code_ranges(&image, page);
        let at = NAMES.as_ptr() as usize;
        assert!(
            !ranges.iter().any(|r| r.contains(&at)),
            "a relocated table {at:#x} would be released: {ranges:x?}\n{}",
            smaps_of(at)
        );
        release_code().expect("release");
        assert_eq!(NAMES.join(","), "one,two,three");
        // Every range released maps the file without a private copy: no
        // anonymous page in its mapping.
        for r in &ranges {
            let smaps = smaps_of(r.start);
            let anon = smaps
                .lines()
                .find_map(|l| l.strip_prefix("Anonymous:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok());
            assert_eq!(anon, Some(0), "range {r:x?} maps private copies:\n{smaps}");
        }
    }

    #[test]
    fn ranges_are_whole_pages_inside_read_only_segments_minus_relro() {
        let image = Image {
            base: 0x10000,
            headers: vec![
                phdr(libc::PT_LOAD, libc::PF_R, 0x0, 0x2800),
                phdr(libc::PT_LOAD, libc::PF_R | libc::PF_X, 0x2800, 0x5000),
                phdr(libc::PT_LOAD, libc::PF_R | libc::PF_W, 0x8000, 0x3000),
                phdr(libc::PT_GNU_RELRO, libc::PF_R, 0x4100, 0x100),
            ],
        };
        let r = code_ranges(&image, 0x1000);
        assert_eq!(
            r,
            vec![0x10000..0x12000, 0x13000..0x14000, 0x15000..0x17000],
            "{r:x?}"
        );
    }

    fn phdr(p_type: u32, p_flags: u32, p_vaddr: u64, size: u64) -> libc::Elf64_Phdr {
        libc::Elf64_Phdr {
            p_type,
            p_flags,
            p_offset: p_vaddr,
            p_vaddr,
            p_paddr: p_vaddr,
            p_filesz: size,
            p_memsz: size,
            p_align: 0x1000,
        }
    }
}

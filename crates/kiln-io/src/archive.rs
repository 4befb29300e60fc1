//! Zip archives, the container of `.npz` files and of PyTorch checkpoints, through the `zip`
//! crate (deflate via `flate2`, zip64, CRC-32 checked on every member).
//!
//! What this module adds is a bound on every read: a member's declared size is checked
//! against what its compressed bytes — at most the whole archive, whatever the header
//! claims — can produce (deflate expands at most 1032:1, a stored member not at all) before
//! anything is allocated, the buffer is reserved fallibly, and
//! reading stops one byte past the declared size, so a deflate bomb or a lying header is an
//! [`crate::Error`] naming the member, not an exhausted memory.
//!
//! The central directory is checked as a whole when the archive is parsed: two entries whose
//! data overlap (one member listed again under other names, as in a "overlapping" zip bomb,
//! which would make each name read, inflate and be kept as one more copy of it) are an error
//! naming both members, and so is a name listed twice. Neither `numpy.savez` nor `torch.save`
//! writes either; Python's `zipfile` (and so numpy) would read the last member of a repeated
//! name, but a file that holds two different members under one name is refused here rather
//! than read one way or the other.
//!
//! Depends on the crate root (`crate::Ctx`) and the `zip` crate.

use crate::{Ctx, Result};
use std::io::{Cursor, Read, Seek, Write};
use zip::CompressionMethod;

/// The most bytes deflate produces from one compressed byte (258-byte matches coded in two
/// bits, rounded up).
const DEFLATE_RATIO: u64 = 1032;

/// A zip archive held in memory (a file's bytes, or a memory map of it).
pub(crate) struct Archive<'a> {
    zip: zip::ZipArchive<Cursor<&'a [u8]>>,
    /// The archive's length: no member's compressed bytes can be more.
    len: u64,
    /// The members' names, in the archive's order.
    names: Vec<String>,
}

impl<'a> Archive<'a> {
    /// Reads the central directory of `bytes`, and refuses it where two entries' data
    /// overlap or a name is listed twice.
    pub fn parse(cx: &Ctx<'_>, bytes: &'a [u8]) -> Result<Archive<'a>> {
        let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| cx.format(format!("not a readable zip archive ({e})")))?;
        if zip.has_duplicate_names() {
            return Err(cx.format(
                "the central directory lists a member name twice (no numpy or torch archive \
                 does; which of the two to read is ambiguous)",
            ));
        }
        // each member's name and the byte range of its data (empty members hold none)
        let mut names = Vec::with_capacity(zip.len());
        let mut ranges = Vec::with_capacity(zip.len());
        for i in 0..zip.len() {
            let f = zip
                .by_index_raw(i)
                .map_err(|e| cx.format(format!("member {i} of the central directory: {e}")))?;
            let name = f
                .name()
                .map_err(|e| cx.format(format!("member {i}: {e}")))?
                .to_string();
            if let Some(start) = f.data_start() {
                if f.compressed_size() > 0 {
                    let end = start.saturating_add(f.compressed_size());
                    ranges.push((start, end, i));
                }
            }
            names.push(name);
        }
        ranges.sort_unstable();
        if let Some(w) = ranges.windows(2).find(|w| w[0].1 > w[1].0) {
            let (a, b) = (&names[w[0].2], &names[w[1].2]);
            return Err(cx.at(b).format(format!(
                "its data overlaps that of member {a} (bytes {}..{} and {}..{} of the archive): \
                 an archive whose members share bytes is malformed or a zip bomb, and is not read",
                w[1].0, w[1].1, w[0].0, w[0].1
            )));
        }
        Ok(Archive {
            zip,
            len: bytes.len() as u64,
            names,
        })
    }

    /// The members' names, in the archive's order.
    pub fn names(&mut self, _cx: &Ctx<'_>) -> Result<Vec<String>> {
        Ok(self.names.clone())
    }

    /// Whether a member of this name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.zip.index_for_name(name).is_some()
    }

    /// The uncompressed bytes of member `name`, bounded by its declared size.
    pub fn read(&mut self, cx: &Ctx<'_>, name: &str) -> Result<Vec<u8>> {
        let cx = cx.at(name);
        let mut f = self
            .zip
            .by_name(name)
            .map_err(|e| cx.format(format!("cannot open the member ({e})")))?;
        if f.encrypted() {
            return Err(cx.unsupported("an encrypted member", "decrypt the archive first"));
        }
        let size = f.size();
        // The compressed size as declared, but never more than the archive holds.
        let packed = f.compressed_size().min(self.len);
        let most = match f.compression() {
            CompressionMethod::Stored => packed,
            CompressionMethod::Deflated => packed.saturating_mul(DEFLATE_RATIO),
            other => {
                return Err(cx.unsupported(
                    format!("compression method {other:?}"),
                    "re-save it stored or deflated (numpy.savez / savez_compressed)",
                ))
            }
        };
        if size > most {
            return Err(cx.format(format!(
                "declares {size} bytes, more than its {} compressed bytes can hold",
                f.compressed_size()
            )));
        }
        let size = usize::try_from(size)
            .map_err(|_| cx.format(format!("declares {size} bytes, past the address space")))?;
        let mut out = Vec::new();
        out.try_reserve_exact(size)
            .map_err(|_| cx.format(format!("declares {size} bytes, more than can be allocated")))?;
        (&mut f)
            .take(size as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| cx.format(format!("cannot inflate ({e})")))?;
        if out.len() != size {
            return Err(cx.format(format!(
                "holds {}{} bytes where its header declares {size}",
                out.len(),
                if out.len() > size { " or more" } else { "" }
            )));
        }
        Ok(out)
    }
}

/// Writes members into a zip archive (zip64 where a member or the archive needs it).
pub(crate) struct ArchiveWriter<W: Write + Seek> {
    zip: zip::ZipWriter<W>,
    method: CompressionMethod,
}

impl<W: Write + Seek> ArchiveWriter<W> {
    /// A writer storing members as they are (`compress = false`, what `numpy.savez`
    /// writes) or deflated (`numpy.savez_compressed`).
    pub fn new(w: W, compress: bool) -> ArchiveWriter<W> {
        ArchiveWriter {
            zip: zip::ZipWriter::new(w),
            method: if compress {
                CompressionMethod::Deflated
            } else {
                CompressionMethod::Stored
            },
        }
    }

    /// Adds member `name` holding `bytes`.
    pub fn add(&mut self, cx: &Ctx<'_>, name: &str, bytes: &[u8]) -> Result<()> {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(self.method)
            .large_file(bytes.len() as u64 >= u32::MAX as u64);
        self.zip
            .start_file(name, options)
            .map_err(|e| cx.at(name).format(format!("cannot add the member ({e})")))?;
        self.zip.write_all(bytes).map_err(|e| cx.io(e))
    }

    /// Writes the central directory.
    pub fn finish(self, cx: &Ctx<'_>) -> Result<W> {
        self.zip
            .finish()
            .map_err(|e| cx.format(format!("cannot finish the archive ({e})")))
    }
}

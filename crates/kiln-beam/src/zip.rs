//! A small reader for zip archives, shared by the numpy `.npz` reader ([`crate::read_npz`])
//! and the PyTorch checkpoint reader ([`crate::read_pth`]); both formats are zip files.
//!
//! It reads the central directory (with zip64 end records and zip64 extra fields, so members
//! and archives past 4 GiB work), returns members stored (method 0) without copying and
//! inflates deflated ones (method 8, through `flate2`), and checks every member's CRC-32.
//! Encrypted members, multi-disk archives and other compression methods are errors naming
//! the member. Depends only on `flate2` and this crate's [`Error`]; nothing here knows about
//! arrays.
//!
//! Inflating is bounded by the member's declared size: a declared size larger than deflate can produce from the compressed bytes is refused before anything is inflated, and inflating stops one byte past the declared size, so a deflate bomb is an error naming the member, not an exhausted memory.

use crate::{Error, Result};
use std::borrow::Cow;
use std::io::Read;

/// One member of an archive, as its central-directory entry describes it.
#[derive(Debug, Clone)]
pub(crate) struct Member<'a> {
    /// The member's name (a path inside the archive).
    pub name: String,
    method: u16,
    crc: u32,
    size: u64,
    raw: &'a [u8],
}

/// The members of a zip archive held in memory, in central-directory order.
#[derive(Debug, Clone)]
pub(crate) struct ZipArchive<'a> {
    op: &'static str,
    path: String,
    pub members: Vec<Member<'a>>,
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(i..i.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(i..i.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(i..i.checked_add(8)?)?.try_into().ok()?,
    ))
}

const EOCD: u32 = 0x0605_4b50;
const ZIP64_LOCATOR: u32 = 0x0706_4b50;
const ZIP64_EOCD: u32 = 0x0606_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

/// The most bytes deflate produces from one compressed byte (258-byte matches coded in two bits).
const DEFLATE_MAX_RATIO: u64 = 1032;
/// What a member may declare beyond [`DEFLATE_MAX_RATIO`] times its compressed size (block headers of tiny streams).
const DEFLATE_SLACK: u64 = 1024;
/// The most bytes reserved before inflating; a larger member grows its buffer as it inflates.
const PREALLOCATE: u64 = 64 << 20;

impl<'a> ZipArchive<'a> {
    /// Parses the central directory of `bytes`; `op` and `path` name the caller and the file
    /// in error messages.
    pub fn parse(op: &'static str, path: &str, b: &'a [u8]) -> Result<ZipArchive<'a>> {
        let bad = |m: String| Error::Invalid {
            op,
            message: format!("{path}: {m}"),
        };
        let trunc = |what: &str| bad(format!("truncated zip archive ({what})"));
        // End of central directory: the last "PK\x05\x06" (it is followed by at most a
        // 65,535-byte comment).
        let lowest = b.len().saturating_sub(22 + 65_535);
        let eocd = (lowest..b.len().saturating_sub(21))
            .rev()
            .find(|&i| u32_at(b, i) == Some(EOCD))
            .ok_or_else(|| bad("not a zip archive (no end-of-central-directory record)".into()))?;
        let disk = u16_at(b, eocd + 4).ok_or_else(|| trunc("end record"))?;
        let mut count = u64::from(u16_at(b, eocd + 10).ok_or_else(|| trunc("end record"))?);
        let mut cd_size = u64::from(u32_at(b, eocd + 12).ok_or_else(|| trunc("end record"))?);
        let mut cd_at = u64::from(u32_at(b, eocd + 16).ok_or_else(|| trunc("end record"))?);
        if disk != 0 && disk != 0xFFFF {
            return Err(bad("multi-disk zip archives are not supported".into()));
        }
        // zip64: a locator just before the end record points at the zip64 end record.
        if eocd >= 20 && u32_at(b, eocd - 20) == Some(ZIP64_LOCATOR) {
            let at = u64_at(b, eocd - 12).ok_or_else(|| trunc("zip64 locator"))?;
            let at = usize::try_from(at).map_err(|_| trunc("zip64 locator"))?;
            if u32_at(b, at) != Some(ZIP64_EOCD) {
                return Err(bad("corrupt zip64 end-of-central-directory record".into()));
            }
            count = u64_at(b, at + 32).ok_or_else(|| trunc("zip64 end record"))?;
            cd_size = u64_at(b, at + 40).ok_or_else(|| trunc("zip64 end record"))?;
            cd_at = u64_at(b, at + 48).ok_or_else(|| trunc("zip64 end record"))?;
        }
        let cd_end = cd_at
            .checked_add(cd_size)
            .filter(|&e| e <= b.len() as u64)
            .ok_or_else(|| trunc("central directory"))?;
        let mut at = cd_at as usize;
        let mut members = Vec::with_capacity(count.min(1 << 16) as usize);
        for _ in 0..count {
            if at as u64 >= cd_end || u32_at(b, at) != Some(CENTRAL) {
                return Err(bad("corrupt central directory".into()));
            }
            let f16 = |off: usize| u16_at(b, at + off).ok_or_else(|| trunc("central directory"));
            let f32_ = |off: usize| u32_at(b, at + off).ok_or_else(|| trunc("central directory"));
            let flags = f16(8)?;
            let method = f16(10)?;
            let crc = f32_(16)?;
            let mut csize = u64::from(f32_(20)?);
            let mut size = u64::from(f32_(24)?);
            let name_len = usize::from(f16(28)?);
            let extra_len = usize::from(f16(30)?);
            let comment_len = usize::from(f16(32)?);
            let mut local = u64::from(f32_(42)?);
            let name_bytes = b
                .get(at + 46..at + 46 + name_len)
                .ok_or_else(|| trunc("member name"))?;
            let name = String::from_utf8_lossy(name_bytes).into_owned();
            let extra = b
                .get(at + 46 + name_len..at + 46 + name_len + extra_len)
                .ok_or_else(|| trunc("extra field"))?;
            // zip64 extended information: the 0xFFFFFFFF fields, in this order
            let mut e = 0;
            while e + 4 <= extra.len() {
                let id = u16_at(extra, e).unwrap_or(0);
                let len = usize::from(u16_at(extra, e + 2).unwrap_or(0));
                if id == 0x0001 {
                    let mut p = e + 4;
                    let mut next = |field: &mut u64| -> Result<()> {
                        if *field == 0xFFFF_FFFF {
                            *field = u64_at(extra, p)
                                .filter(|_| p + 8 <= e + 4 + len)
                                .ok_or_else(|| bad(format!("member {name}: bad zip64 field")))?;
                            p += 8;
                        }
                        Ok(())
                    };
                    next(&mut size)?;
                    next(&mut csize)?;
                    next(&mut local)?;
                }
                e += 4 + len;
            }
            if flags & 1 != 0 {
                return Err(bad(format!("member {name} is encrypted")));
            }
            let local = usize::try_from(local).map_err(|_| trunc("local header"))?;
            if u32_at(b, local) != Some(LOCAL) {
                return Err(bad(format!("member {name}: corrupt local header")));
            }
            let lname = usize::from(u16_at(b, local + 26).ok_or_else(|| trunc("local header"))?);
            let lextra = usize::from(u16_at(b, local + 28).ok_or_else(|| trunc("local header"))?);
            let start = local + 30 + lname + lextra;
            let raw = usize::try_from(csize)
                .ok()
                .and_then(|c| b.get(start..start.checked_add(c)?))
                .ok_or_else(|| bad(format!("member {name} runs past the end of the file")))?;
            members.push(Member {
                name,
                method,
                crc,
                size,
                raw,
            });
            at += 46 + name_len + extra_len + comment_len;
        }
        Ok(ZipArchive {
            op,
            path: path.to_string(),
            members,
        })
    }

    /// The member named `name`, if there is one.
    pub fn find(&self, name: &str) -> Option<&Member<'a>> {
        self.members.iter().find(|m| m.name == name)
    }

    /// The contents of a member: borrowed when stored, inflated when deflated; the CRC-32 is
    /// checked either way.
    pub fn read(&self, m: &Member<'a>) -> Result<Cow<'a, [u8]>> {
        let bad = |msg: String| Error::Invalid {
            op: self.op,
            message: format!("{}: member {}: {msg}", self.path, m.name),
        };
        let data: Cow<'a, [u8]> = match m.method {
            0 => Cow::Borrowed(m.raw),
            8 => {
                let most = (m.raw.len() as u64)
                    .saturating_mul(DEFLATE_MAX_RATIO)
                    .saturating_add(DEFLATE_SLACK);
                if m.size > most {
                    return Err(bad(format!(
                        "its header says {} bytes, more than deflate can make of its {} compressed bytes: the file is corrupt",
                        m.size,
                        m.raw.len()
                    )));
                }
                let mut out = Vec::with_capacity(m.size.min(PREALLOCATE) as usize);
                flate2::read::DeflateDecoder::new(m.raw)
                    .take(m.size.saturating_add(1))
                    .read_to_end(&mut out)
                    .map_err(|e| bad(format!("cannot inflate: {e}")))?;
                if out.len() as u64 > m.size {
                    return Err(bad(format!(
                        "inflates to more than the {} bytes its header says: the file is corrupt (or a deflate bomb)",
                        m.size
                    )));
                }
                Cow::Owned(out)
            }
            other => {
                return Err(bad(format!(
                    "compression method {other} is not supported (stored and deflate are)"
                )))
            }
        };
        if data.len() as u64 != m.size {
            return Err(bad(format!(
                "has {} bytes but its header says {}",
                data.len(),
                m.size
            )));
        }
        let mut crc = flate2::Crc::new();
        crc.update(&data);
        if crc.sum() != m.crc {
            return Err(bad(format!(
                "CRC-32 mismatch (file says {:08x}, contents give {:08x}): the file is corrupt",
                m.crc,
                crc.sum()
            )));
        }
        Ok(data)
    }
}

/// A zip archive of `members` (name, compression method, declared size, bytes as stored), with the CRC-32 of `contents` in every header, for tests.
#[cfg(test)]
pub(crate) fn build_zip(members: &[(&str, u16, u32, &[u8])], contents: &[u8]) -> Vec<u8> {
    let mut crc = flate2::Crc::new();
    crc.update(contents);
    let crc = crc.sum();
    let (mut b, mut central) = (Vec::new(), Vec::new());
    for &(name, method, size, raw) in members {
        let local = b.len() as u32;
        let common = |h: &mut Vec<u8>| {
            for v in [20u16, 0, method, 0, 0] {
                h.extend(v.to_le_bytes());
            }
            for v in [crc, raw.len() as u32, size] {
                h.extend(v.to_le_bytes());
            }
            h.extend((name.len() as u16).to_le_bytes());
            h.extend(0u16.to_le_bytes());
        };
        b.extend(LOCAL.to_le_bytes());
        common(&mut b);
        b.extend(name.as_bytes());
        b.extend(raw);
        central.extend(CENTRAL.to_le_bytes());
        central.extend(20u16.to_le_bytes());
        common(&mut central);
        central.extend([0u8; 10]); // comment length, disk, internal and external attributes
        central.extend(local.to_le_bytes());
        central.extend(name.as_bytes());
    }
    let cd_at = b.len() as u32;
    b.extend(&central);
    b.extend(EOCD.to_le_bytes());
    b.extend([0u8; 4]);
    b.extend((members.len() as u16).to_le_bytes());
    b.extend((members.len() as u16).to_le_bytes());
    b.extend((central.len() as u32).to_le_bytes());
    b.extend(cd_at.to_le_bytes());
    b.extend(0u16.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_built_archive_reads_back() {
        let b = build_zip(&[("x.txt", 8, 5, &deflate(b"hello"))], b"hello");
        let z = ZipArchive::parse("test", "built.zip", &b).unwrap();
        assert_eq!(&*z.read(&z.members[0]).unwrap(), b"hello");
    }

    #[test]
    fn a_deflate_bomb_is_an_error_naming_the_member() {
        // 100 MB of zeros in about 100 kB, declared as 10 bytes
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..100 {
            e.write_all(&zeros).unwrap();
        }
        let bomb = e.finish().unwrap();
        let inflated = std::io::copy(
            &mut flate2::read::DeflateDecoder::new(&bomb[..]),
            &mut std::io::sink(),
        );
        assert_eq!(inflated.unwrap(), 100 << 20);
        assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
        let b = build_zip(&[("bomb.bin", 8, 10, &bomb)], &[0; 10]);
        let z = ZipArchive::parse("test", "bomb.zip", &b).unwrap();
        let e = z.read(&z.members[0]).unwrap_err().to_string();
        assert!(
            e.contains("bomb.zip")
                && e.contains("bomb.bin")
                && e.contains("more than the 10 bytes"),
            "{e}"
        );
    }

    #[test]
    fn a_declared_size_past_what_deflate_can_make_is_refused_before_inflating() {
        let raw = deflate(&[0; 100]);
        let b = build_zip(&[("big.bin", 8, u32::MAX - 1, &raw)], &[0; 100]);
        let z = ZipArchive::parse("test", "big.zip", &b).unwrap();
        let e = z.read(&z.members[0]).unwrap_err().to_string();
        assert!(
            e.contains("big.bin") && e.contains("more than deflate can make"),
            "{e}"
        );
        // declared shorter than the contents, or longer: errors either way
        let b = build_zip(&[("short.bin", 8, 99, &raw)], &[0; 100]);
        let z = ZipArchive::parse("test", "short.zip", &b).unwrap();
        assert!(z.read(&z.members[0]).is_err());
        let b = build_zip(&[("long.bin", 8, 101, &raw)], &[0; 100]);
        let z = ZipArchive::parse("test", "long.zip", &b).unwrap();
        let e = z.read(&z.members[0]).unwrap_err().to_string();
        assert!(e.contains("long.bin") && e.contains("has 100 bytes"), "{e}");
    }

    /// A zip built by Python's `zipfile` (`a.txt` stored, `b.txt` deflated;
    /// `tests/fixtures/gen_pickle_fixtures.py`).
    fn sample() -> Vec<u8> {
        include_bytes!("../tests/fixtures/zip/stored_and_deflated.zip").to_vec()
    }

    #[test]
    fn reads_stored_and_deflated_members() {
        let b = sample();
        let z = ZipArchive::parse("test", "sample.zip", &b).unwrap();
        let names: Vec<&str> = z.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a.txt", "b.txt"]);
        assert_eq!(&*z.read(z.find("a.txt").unwrap()).unwrap(), b"hello");
        assert_eq!(
            &*z.read(z.find("b.txt").unwrap()).unwrap(),
            b"hello hello hello"
        );
    }

    #[test]
    fn reads_zip64_records_and_extra_fields() {
        let b = include_bytes!("../tests/fixtures/zip/zip64.zip");
        let z = ZipArchive::parse("test", "zip64.zip", b).unwrap();
        assert_eq!(z.members.len(), 2);
        assert_eq!(&*z.read(z.find("a.txt").unwrap()).unwrap(), b"hello");
        assert_eq!(
            &*z.read(z.find("b.txt").unwrap()).unwrap(),
            b"hello hello hello"
        );
    }

    #[test]
    fn corrupt_contents_fail_the_crc_check() {
        let mut b = sample();
        let at = b.windows(5).position(|w| w == b"hello").unwrap();
        b[at] = b'j';
        let z = ZipArchive::parse("test", "sample.zip", &b).unwrap();
        let e = z.read(z.find("a.txt").unwrap()).unwrap_err().to_string();
        assert!(e.contains("a.txt") && e.contains("CRC"), "{e}");
    }

    #[test]
    fn truncated_archives_are_errors_not_panics() {
        let b = sample();
        for n in 0..b.len() {
            if let Ok(z) = ZipArchive::parse("test", "cut.zip", &b[..n]) {
                for m in &z.members {
                    let _ = z.read(m);
                }
            }
        }
    }
}

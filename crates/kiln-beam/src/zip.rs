//! A small reader for zip archives, shared by the numpy `.npz` reader ([`crate::read_npz`])
//! and the PyTorch checkpoint reader ([`crate::read_pth`]); both formats are zip files.
//!
//! It reads the central directory (with zip64 end records and zip64 extra fields, so members
//! and archives past 4 GiB work), returns members stored (method 0) without copying and
//! inflates deflated ones (method 8, through `flate2`), and checks every member's CRC-32.
//! Encrypted members, multi-disk archives and other compression methods are errors naming
//! the member. Depends only on `flate2` and this crate's [`Error`]; nothing here knows about
//! arrays.

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
                let mut out = Vec::with_capacity(m.size.min(1 << 30) as usize);
                flate2::read::DeflateDecoder::new(m.raw)
                    .read_to_end(&mut out)
                    .map_err(|e| bad(format!("cannot inflate: {e}")))?;
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

#[cfg(test)]
mod tests {
    use super::*;

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

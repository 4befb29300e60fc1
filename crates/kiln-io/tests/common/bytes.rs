//! Hand-built files, for inputs kiln's writers never make: `.npy` files with any header,
//! safetensors files with any JSON header, and zip archives of members whose headers may
//! declare what their bytes are not (sizes, methods, checksums), with zip64 fields where a
//! declared size needs them.
//!
//! Depends on nothing but std.

/// A `.npy` file of format `major.0` with `header` (newline added, no padding) and `data`.
pub fn npy_file(major: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    h.push(b'\n');
    let mut out = vec![0x93, b'N', b'U', b'M', b'P', b'Y', major, 0];
    if major == 1 {
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

/// A safetensors file of the JSON `header` (padded with spaces to 8 bytes) and `data`.
pub fn st_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

/// CRC-32 (IEEE), as zip stores it.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One member of a hand-built zip: its bytes as stored, and what the headers declare.
pub struct Member<'a> {
    pub name: &'a str,
    pub stored: Vec<u8>,
    pub method: u16,
    pub crc: u32,
    pub compressed: u64,
    pub size: u64,
}

impl<'a> Member<'a> {
    /// A truthful stored member (what `numpy.savez` writes).
    pub fn stored(name: &'a str, data: &[u8]) -> Member<'a> {
        let n = data.len() as u64;
        Member {
            name,
            stored: data.to_vec(),
            method: 0,
            crc: crc32(data),
            compressed: n,
            size: n,
        }
    }

    /// A deflated member made of one stored deflate block (valid deflate, no compressor
    /// needed), declaring `size` uncompressed bytes.
    pub fn deflated(name: &'a str, data: &[u8], size: u64) -> Member<'a> {
        let mut block = vec![1u8]; // final block, stored
        block.extend_from_slice(&(data.len() as u16).to_le_bytes());
        block.extend_from_slice(&(!(data.len() as u16)).to_le_bytes());
        block.extend_from_slice(data);
        let c = block.len() as u64;
        Member {
            name,
            stored: block,
            method: 8,
            crc: crc32(data),
            compressed: c,
            size,
        }
    }
}

/// A zip archive of `members`, using zip64 extra fields where a declared size needs them.
pub fn zip_raw(members: &[Member<'_>]) -> Vec<u8> {
    let (mut out, mut central) = (Vec::new(), Vec::new());
    for m in members {
        let offset = out.len() as u32;
        let zip64 = m.size >= u32::MAX as u64 || m.compressed >= u32::MAX as u64;
        let mut extra = Vec::new();
        if zip64 {
            extra.extend_from_slice(&1u16.to_le_bytes());
            extra.extend_from_slice(&16u16.to_le_bytes());
            extra.extend_from_slice(&m.size.to_le_bytes());
            extra.extend_from_slice(&m.compressed.to_le_bytes());
        }
        let small = |x: u64| if zip64 { u32::MAX } else { x as u32 };
        let common = |v: &mut Vec<u8>| {
            v.extend_from_slice(&(if zip64 { 45u16 } else { 20 }).to_le_bytes()); // version needed
            v.extend_from_slice(&0u16.to_le_bytes()); // flags
            v.extend_from_slice(&m.method.to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes()); // time, date
            v.extend_from_slice(&m.crc.to_le_bytes());
            v.extend_from_slice(&small(m.compressed).to_le_bytes());
            v.extend_from_slice(&small(m.size).to_le_bytes());
            v.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
            v.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        };
        out.extend_from_slice(b"PK\x03\x04");
        common(&mut out);
        out.extend_from_slice(m.name.as_bytes());
        out.extend_from_slice(&extra);
        out.extend_from_slice(&m.stored);
        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&45u16.to_le_bytes()); // made by
        common(&mut central);
        central.extend_from_slice(&[0; 10]); // comment length, disk, attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(m.name.as_bytes());
        central.extend_from_slice(&extra);
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06\0\0\0\0");
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

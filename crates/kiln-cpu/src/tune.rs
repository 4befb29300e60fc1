//! What the backend knows of the machine it runs on, read once at start-up, and the tuning
//! chosen from it.
//!
//! [`machine`] reads the CPU vendor and model (`/proc/cpuinfo`), the cache sizes
//! (`/sys/devices/system/cpu/cpu0/cache`) and the cores available; off Linux, or where those
//! files are missing (and under Miri), the fields are unknown (`None`, [`Vendor::Other`]).
//! [`tuning`] picks the software-prefetch policy of the streaming kernels from one table per
//! vendor ([`Tuning::for_vendor`], each entry with the measurement behind it), and whether
//! the small GEMM's broadcast form takes every product at AVX-512, which
//! `KILN_PREFETCH=l1|l2|off`, `KILN_PREFETCH_AHEAD=N`, `KILN_STREAM_BLOCK=N`,
//! `KILN_STREAM_AVX2=0|1` and `KILN_GEMM_BROADCAST=0|1` override,
//! and bounds the cache blocks of the GEMM and the row groups by the level-1 data and
//! level-2 cache sizes ([`CacheBlocks::derive`]), which `KILN_L1D_BYTES` and `KILN_L2_BYTES`
//! override (`48K`, `2M`).
//!
//! Constants that stay fixed, and why: the prefetch and streaming-store thresholds
//! (`source::PREFETCH_MIN_BYTES`, [`crate::DEFAULT_STREAM_MIN_BYTES`]) are not derived from
//! the last-level cache size, because a virtual machine reports the whole socket's L3 (480 MiB
//! on the Sapphire Rapids machine where they were measured), most of which other tenants use.
//!
//! Depends on nothing else in the crate.

use std::sync::OnceLock;

/// Who designed the CPU (prefetch behaviour differs by vendor, not by ISA level).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// `GenuineIntel`.
    Intel,
    /// `AuthenticAMD`.
    Amd,
    /// Anything else, or unknown (aarch64, non-Linux systems).
    Other,
}

/// The machine facts read at start-up ([`machine`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// The CPU's vendor.
    pub vendor: Vendor,
    /// The model name as the OS reports it (empty when unknown).
    pub model: String,
    /// Level-1 data cache per core, in bytes.
    pub l1d_bytes: Option<usize>,
    /// Level-2 cache per core (or per cluster), in bytes.
    pub l2_bytes: Option<usize>,
    /// Level-3 cache as the OS reports it (shared, and on a VM the whole socket's), in bytes.
    pub l3_bytes: Option<usize>,
    /// Cores available to this process.
    pub cores: usize,
}

impl Machine {
    /// Reads the machine this process runs on (see the module doc for the sources).
    ///
    /// ```
    /// let m = kiln_cpu::Machine::read();
    /// assert!(m.cores >= 1);
    /// ```
    pub fn read() -> Machine {
        if cfg!(miri) {
            // Miri's isolation refuses file access: nothing is known.
            return Machine {
                vendor: Vendor::Other,
                model: String::new(),
                l1d_bytes: None,
                l2_bytes: None,
                l3_bytes: None,
                cores: 1,
            };
        }
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        let mut l1d = None;
        let mut l2 = None;
        let mut l3 = None;
        for i in 0..8 {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
            let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
            else {
                continue;
            };
            let size = parse_size(&size);
            match (level.trim(), kind.trim()) {
                ("1", "Data") => l1d = size,
                ("2", "Unified" | "Data") => l2 = size,
                ("3", "Unified" | "Data") => l3 = size,
                _ => {}
            }
        }
        Machine {
            vendor: parse_vendor(&field("vendor_id")),
            model: field("model name"),
            l1d_bytes: l1d,
            l2_bytes: l2,
            l3_bytes: l3,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// The vendor named by `/proc/cpuinfo`'s `vendor_id`.
///
/// ```
/// use kiln_cpu::{parse_vendor, Vendor};
/// assert_eq!(parse_vendor("AuthenticAMD"), Vendor::Amd);
/// assert_eq!(parse_vendor(""), Vendor::Other);
/// ```
pub fn parse_vendor(id: &str) -> Vendor {
    match id.trim() {
        "GenuineIntel" => Vendor::Intel,
        "AuthenticAMD" => Vendor::Amd,
        _ => Vendor::Other,
    }
}

/// A cache size as sysfs writes it (`32K`, `1024K`, `32768K`, `2M`, or bytes), in bytes.
///
/// ```
/// assert_eq!(kiln_cpu::parse_size("1024K"), Some(1 << 20));
/// assert_eq!(kiln_cpu::parse_size("2M\n"), Some(2 << 20));
/// assert_eq!(kiln_cpu::parse_size("K"), None);
/// ```
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, scale) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1usize << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

/// The machine this process runs on, read on first use.
///
/// ```
/// assert!(kiln_cpu::machine().cores >= 1);
/// ```
pub fn machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(Machine::read)
}

/// Where the streaming kernels' software prefetches put the next blocks of their large inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prefetch {
    /// Into the level-1 data cache (`prefetcht0`).
    L1,
    /// Into the level-2 cache (`prefetcht2`; AMD fills L2 for both `t1` and `t2`).
    L2,
    /// No software prefetch.
    Off,
}

impl Prefetch {
    /// The name `KILN_PREFETCH` uses.
    ///
    /// ```
    /// assert_eq!(kiln_cpu::Prefetch::L2.name(), "l2");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Prefetch::L1 => "l1",
            Prefetch::L2 => "l2",
            Prefetch::Off => "off",
        }
    }

    /// Parses `l1`, `l2` or `off` (any case).
    ///
    /// ```
    /// assert_eq!(kiln_cpu::Prefetch::parse("OFF"), Some(kiln_cpu::Prefetch::Off));
    /// assert_eq!(kiln_cpu::Prefetch::parse("l3"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Prefetch> {
        [Prefetch::L1, Prefetch::L2, Prefetch::Off]
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// The tuning of the CPU kernels that depends on the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// Where the elementwise and reduction kernels prefetch their large contiguous inputs
    /// (sources of at least 32 MiB), one block of positions at a time.
    pub prefetch: Prefetch,
    /// How many blocks ahead of the block being evaluated the hinted block lies (1 to 16), in
    /// blocks of 1024 positions whatever the kernel's block length.
    pub prefetch_ahead: usize,
    /// Positions per block of an elementwise kernel with two or more hinted sources (64 to
    /// 1024, a power of two; other kernels use 1024): shorter blocks keep the input streams
    /// advancing together.
    pub stream_block: usize,
    /// Whether large unread outputs are written with 32-byte non-temporal stores at the AVX2
    /// level (AVX-512 always streams them, see [`crate::set_stream_min_bytes`]).
    pub stream_avx2: bool,
    /// Whether, at the AVX-512 level, every product whose left operand has contiguous rows
    /// takes the small GEMM's broadcast form (four rows by four vectors, the right operand
    /// read in place) rather than the blocked form or `matrixmultiply`.
    pub gemm_broadcast_avx512: bool,
    /// The cache blocks derived from the machine's cache sizes.
    pub blocks: CacheBlocks,
}

/// Block sizes bounded by the caches: each is the size measured best where the cache is
/// large enough, capped at a share of the level-1 data or level-2 cache (per core) below
/// that.
///
/// The sizes were measured on Sapphire Rapids (48 KiB L1d, 2 MiB L2) and Zen 4 (32 KiB,
/// 1 MiB), where no cap applies. Sizes proportional to the caches instead (half the Zen 4
/// blocks) were no faster there: five alternating runs of `kiln-bench --only W4,W5,W7`,
/// proportional ÷ capped time, sgemm 2048³ 1.02 [1.00–1.03] at AVX-512, everything else
/// within 0.95–1.03 at AVX-512 and AVX2 (`docs/performance-log.md`, 2026-11-27).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheBlocks {
    /// The level-1 data cache the blocks were derived from, in bytes.
    pub l1d_bytes: usize,
    /// The level-2 cache the blocks were derived from, in bytes.
    pub l2_bytes: usize,
    /// The blocked GEMM's packed left panel (12 rows × `kc` steps), read once per register
    /// block from L1: 20 KiB, at most 5/8 of L1d (measured on Sapphire Rapids; see the
    /// blocked form's figures in docs/performance.md, "Figures behind the CPU kernels' choices").
    pub gemm_a_panel_bytes: usize,
    /// One row of the small GEMM's left panel per block of steps (the panel is four such
    /// rows, in L1): 4 KiB, at most 1/8 of L1d.
    pub gemm_kc_bytes: usize,
    /// The block of the right operand both GEMM forms keep in L2 while every block of rows
    /// passes over it: 1 MiB, at most all of L2 (on Zen 4 a whole-L2 block ran 2048³ 2%
    /// faster than a half-L2 one).
    pub gemm_b_block_bytes: usize,
    /// The rows of one row-group block, summed over every buffer its kernels touch, kept in
    /// L2 between the group's kernels: 768 KiB, at most 3/4 of L2 (row softmax of
    /// 4096×1024 f32 on Sapphire Rapids: 4.2 ms at 512–768 KiB, 4.3–4.6 at 1 MiB, 4.6–4.9
    /// at 256 KiB).
    pub group_block_bytes: usize,
}

impl CacheBlocks {
    /// The blocks for caches of `l1d` and `l2` bytes per core; an unknown size is taken as
    /// the Sapphire Rapids one, and sizes are clamped to 16 KiB–1 MiB (L1d) and 128 KiB–16 MiB
    /// (L2), so a misreported cache cannot produce a degenerate block.
    ///
    /// ```
    /// use kiln_cpu::CacheBlocks;
    /// let spr = CacheBlocks::derive(Some(48 << 10), Some(2 << 20));
    /// assert_eq!((spr.gemm_a_panel_bytes, spr.gemm_b_block_bytes), (20 << 10, 1 << 20));
    /// assert_eq!(CacheBlocks::derive(Some(32 << 10), Some(1 << 20)), CacheBlocks { l1d_bytes: 32 << 10, l2_bytes: 1 << 20, ..spr });
    /// let small = CacheBlocks::derive(Some(16 << 10), Some(256 << 10));
    /// assert_eq!((small.gemm_a_panel_bytes, small.gemm_b_block_bytes), (10 << 10, 256 << 10));
    /// assert_eq!(CacheBlocks::derive(None, Some(0)).l2_bytes, 128 << 10);
    /// ```
    pub fn derive(l1d: Option<usize>, l2: Option<usize>) -> CacheBlocks {
        let l1d = l1d.unwrap_or(48 << 10).clamp(16 << 10, 1 << 20);
        let l2 = l2.unwrap_or(2 << 20).clamp(128 << 10, 16 << 20);
        CacheBlocks {
            l1d_bytes: l1d,
            l2_bytes: l2,
            gemm_a_panel_bytes: (20 << 10).min(l1d / 8 * 5),
            gemm_kc_bytes: (4 << 10).min(l1d / 8),
            gemm_b_block_bytes: (1 << 20).min(l2),
            group_block_bytes: (768 << 10).min(l2 / 4 * 3),
        }
    }
}

impl Tuning {
    /// The table: one entry per vendor, each with the measurement it rests on (W1 is
    /// `(a*b + c)*d - a` over f32, `kiln-bench --only W1`, 2 threads); the cache blocks are
    /// those of unknown caches ([`Tuning::for_machine`] derives them from the machine's).
    ///
    /// ```
    /// use kiln_cpu::{Prefetch, Tuning, Vendor};
    /// assert_eq!(Tuning::for_vendor(Vendor::Amd).0.prefetch, Prefetch::L2);
    /// ```
    pub fn for_vendor(vendor: Vendor) -> (Tuning, &'static str) {
        match vendor {
            Vendor::Intel => (
                Tuning {
                    prefetch: Prefetch::L1,
                    prefetch_ahead: 1,
                    stream_block: 1024,
                    stream_avx2: false,
                    gemm_broadcast_avx512: false,
                    blocks: CacheBlocks::derive(None, None),
                },
                "Sapphire Rapids: W1 16M 18.2-19.4 -> 16.1-16.3 ms with an L1 hint one block ahead; \
                 32-byte streaming stores measured no faster there; the blocked GEMM form beat \
                 matrixmultiply at 2048^3 (246-260 against 239-242 GFLOP/s; the broadcast form was \
                 not compared there, so products keep the size rules)",
            ),
            Vendor::Amd => (
                Tuning {
                    prefetch: Prefetch::L2,
                    prefetch_ahead: 2,
                    stream_block: 512,
                    stream_avx2: true,
                    gemm_broadcast_avx512: true,
                    blocks: CacheBlocks::derive(None, None),
                },
                "Zen 4: W1 64M 17.8 GB/s with L1 hints, 22 without, 27 with L2 hints two blocks ahead \
                 (L1 hints for four input streams fill the miss buffers); at the AVX2 level, 32-byte \
                 streaming stores ran W1 64M 1.25x and W3 1.78x faster than plain ones; blocks of 512 \
                 positions over four streams: W1 64M 41.4-41.9 ms at 1024, 32.9-34.9 at 512, \
                 35.6-39.9 at 256, 56.7-58.0 at 128; at AVX-512 the broadcast GEMM form (4x64 blocks, \
                 the right operand read in place) beat the blocked 12x32 form and matrixmultiply on \
                 every product measured, one thread: 32x1404x256 f32 110 GFLOP/s against 72 and 85, \
                 1024^3 104 against 96 and 98, f64 1024^3 97 against 84",
            ),
            Vendor::Other => (
                Tuning {
                    prefetch: Prefetch::Off,
                    prefetch_ahead: 1,
                    stream_block: 1024,
                    stream_avx2: false,
                    gemm_broadcast_avx512: false,
                    blocks: CacheBlocks::derive(None, None),
                },
                "not measured (aarch64 has no stable prefetch intrinsic)",
            ),
        }
    }

    /// The table's entry for `m`'s vendor, with the cache blocks derived from `m`'s caches,
    /// and overrides looked up by `var` (the environment in [`tuning`]):
    /// `KILN_PREFETCH=l1|l2|off`, `KILN_PREFETCH_AHEAD=1..16`, `KILN_STREAM_BLOCK=64..1024`
    /// (a power of two), `KILN_STREAM_AVX2=0|1`, `KILN_GEMM_BROADCAST=0|1`, and
    /// `KILN_L1D_BYTES`, `KILN_L2_BYTES` (sizes as sysfs writes them: `48K`, `2M`) in place of
    /// the caches read; other values are ignored.
    ///
    /// ```
    /// use kiln_cpu::{Machine, Prefetch, Tuning, Vendor};
    /// let env = |pairs: &'static [(&'static str, &'static str)]| {
    ///     move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
    /// };
    /// let intel = Machine { vendor: Vendor::Intel, model: String::new(), l1d_bytes: Some(48 << 10),
    ///                       l2_bytes: Some(2 << 20), l3_bytes: None, cores: 2 };
    /// let t = Tuning::for_machine(&intel, env(&[("KILN_PREFETCH", "off"), ("KILN_PREFETCH_AHEAD", "3")]));
    /// assert_eq!((t.prefetch, t.prefetch_ahead), (Prefetch::Off, 3));
    /// let amd = Machine { vendor: Vendor::Amd, l1d_bytes: None, l2_bytes: None, ..intel.clone() };
    /// let t = Tuning::for_machine(&amd, env(&[("KILN_PREFETCH", "l9"), ("KILN_PREFETCH_AHEAD", "0")]));
    /// assert_eq!(t, Tuning::for_vendor(Vendor::Amd).0);
    /// let t = Tuning::for_machine(&intel, env(&[("KILN_STREAM_AVX2", "1"), ("KILN_L2_BYTES", "1M")]));
    /// assert!(t.stream_avx2);
    /// assert_eq!(t.blocks.gemm_b_block_bytes, 1 << 20);
    /// let t = Tuning::for_machine(&intel, env(&[("KILN_L2_BYTES", "512K")]));
    /// assert_eq!(t.blocks.gemm_b_block_bytes, 512 << 10);
    /// let t = Tuning::for_machine(&amd, env(&[("KILN_STREAM_BLOCK", "256")]));
    /// assert_eq!(t.stream_block, 256);
    /// let t = Tuning::for_machine(&amd, env(&[("KILN_STREAM_BLOCK", "300")])); // not a power of two
    /// assert_eq!(t.stream_block, Tuning::for_vendor(Vendor::Amd).0.stream_block);
    /// assert!(t.gemm_broadcast_avx512 && !Tuning::for_machine(&intel, env(&[])).gemm_broadcast_avx512);
    /// let t = Tuning::for_machine(&amd, env(&[("KILN_GEMM_BROADCAST", "0")]));
    /// assert!(!t.gemm_broadcast_avx512);
    /// ```
    pub fn for_machine(m: &Machine, var: impl Fn(&str) -> Option<String>) -> Tuning {
        let mut t = Tuning::for_vendor(m.vendor).0;
        let size = |k: &str, read: Option<usize>| var(k).and_then(|v| parse_size(&v)).or(read);
        t.blocks = CacheBlocks::derive(
            size("KILN_L1D_BYTES", m.l1d_bytes),
            size("KILN_L2_BYTES", m.l2_bytes),
        );
        if let Some(p) = var("KILN_PREFETCH").as_deref().and_then(Prefetch::parse) {
            t.prefetch = p;
        }
        if let Some(n) = var("KILN_PREFETCH_AHEAD")
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|n| (1..=16).contains(n))
        {
            t.prefetch_ahead = n;
        }
        if let Some(n) = var("KILN_STREAM_BLOCK")
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|n| n.is_power_of_two() && (64..=1024).contains(n))
        {
            t.stream_block = n;
        }
        match var("KILN_STREAM_AVX2").as_deref().map(str::trim) {
            Some("1") => t.stream_avx2 = true,
            Some("0") => t.stream_avx2 = false,
            _ => {}
        }
        match var("KILN_GEMM_BROADCAST").as_deref().map(str::trim) {
            Some("1") => t.gemm_broadcast_avx512 = true,
            Some("0") => t.gemm_broadcast_avx512 = false,
            _ => {}
        }
        t
    }
}

/// The tuning in force: [`Tuning::for_machine`] for this [`machine`] and the environment,
/// read on first use.
///
/// ```
/// let t = kiln_cpu::tuning();
/// assert!((1..=16).contains(&t.prefetch_ahead));
/// ```
pub fn tuning() -> Tuning {
    static TUNING: OnceLock<Tuning> = OnceLock::new();
    *TUNING.get_or_init(|| Tuning::for_machine(machine(), |k| std::env::var(k).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_blocks_fit_their_caches_whatever_sizes_are_reported() {
        let sizes = [
            0,
            1,
            4095,
            16 << 10,
            32 << 10,
            48 << 10,
            1 << 20,
            3 << 20,
            usize::MAX,
        ];
        for &l1 in &sizes {
            for &l2 in &sizes {
                for (a, b) in [(Some(l1), Some(l2)), (None, Some(l2)), (Some(l1), None)] {
                    let c = CacheBlocks::derive(a, b);
                    assert!((16 << 10..=1 << 20).contains(&c.l1d_bytes), "{c:?}");
                    assert!((128 << 10..=16 << 20).contains(&c.l2_bytes), "{c:?}");
                    assert!(c.gemm_a_panel_bytes > 0 && c.gemm_a_panel_bytes <= c.l1d_bytes);
                    assert!(c.gemm_kc_bytes > 0 && 4 * c.gemm_kc_bytes <= c.l1d_bytes);
                    assert!(c.gemm_b_block_bytes > 0 && c.gemm_b_block_bytes <= c.l2_bytes);
                    assert!(c.group_block_bytes > 0 && c.group_block_bytes < c.l2_bytes);
                }
            }
        }
        // Unknown caches give the sizes the constants had before they were bounded.
        let unknown = CacheBlocks::derive(None, None);
        assert_eq!(
            (
                unknown.gemm_a_panel_bytes,
                unknown.gemm_kc_bytes,
                unknown.gemm_b_block_bytes,
                unknown.group_block_bytes
            ),
            (20 << 10, 4 << 10, 1 << 20, 768 << 10)
        );
    }

    #[test]
    fn sizes_parse_and_overflow_is_refused() {
        assert_eq!(parse_size("32K"), Some(32 << 10));
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("-1K"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
        assert_eq!(parse_size(&format!("{}G", usize::MAX / 2)), None);
    }

    #[test]
    fn this_machine_reads_consistently_with_the_os() {
        let m = Machine::read();
        if cfg!(miri) {
            return;
        }
        assert_eq!(m.cores, std::thread::available_parallelism().unwrap().get());
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let want = if info.contains("GenuineIntel") {
                Vendor::Intel
            } else if info.contains("AuthenticAMD") {
                Vendor::Amd
            } else {
                Vendor::Other
            };
            assert_eq!(m.vendor, want);
        }
        // A level-1 data cache is no larger than the level-2 cache.
        if let (Some(a), Some(b)) = (m.l1d_bytes, m.l2_bytes) {
            assert!(a <= b, "{m:?}");
        }
    }
}

//! Deterministic phase generators for tests, benchmarks and figures.
//!
//! The seed log gives the shapes of real phases (1472 tiles, 10^3 to
//! 6·10^5 transfers, endpoint bounds from about 100 to 16 000 words);
//! [`seed_families`] reproduces those sizes with random sources,
//! destinations and lengths, so the scheduler meets both "few huge
//! transfers" and "many small ones". Addresses are laid out per tile so that
//! every generated phase is valid.

use ipu_layout::TileId;
use smallvec::SmallVec;

use crate::model::{Phase, Transfer, Width};

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenConfig {
    /// Tiles.
    pub tile_count: u32,
    /// Transfers.
    pub transfers: u32,
    /// The words the busiest tile should roughly send or receive.
    pub target_bound: u32,
    /// Largest number of destinations per transfer (1 = unicast).
    pub max_fanout: u32,
    /// Share of transfers marked Paired64, in percent.
    pub paired_percent: u32,
    /// Whether sources are spread round-robin (balanced) or at random.
    pub balanced_sources: bool,
    /// Random seed.
    pub seed: u64,
}

/// A small, fast deterministic generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator from a seed.
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

/// First byte of the region sources are laid out in.
const SOURCE_BASE: u32 = 0x4c000;
/// First byte of the region destinations are laid out in.
const DEST_BASE: u32 = 0x90000;
/// End of usable memory (the loader limit).
const LIMIT: u32 = 0xe7bb0;

/// Generates one phase. Transfers whose memory would not fit are shortened,
/// so the result is always valid.
pub fn generate_phase(config: &GenConfig) -> Phase {
    let n = config.tile_count.max(2);
    let mut rng = SplitMix::new(config.seed ^ 0x5eed);
    let transfers = config.transfers.max(1);
    // Mean words per transfer so that an average tile carries about the
    // target; the busiest ends a little above it.
    let mean = (u64::from(config.target_bound) * u64::from(n) / u64::from(transfers)).max(1);
    let mut send_cursor = vec![SOURCE_BASE; n as usize];
    let mut recv_cursor = vec![DEST_BASE; n as usize];
    let mut out = Vec::with_capacity(transfers as usize);
    for i in 0..transfers {
        let source = if config.balanced_sources {
            i % n
        } else {
            rng.below(u64::from(n)) as u32
        };
        let paired = rng.below(100) < u64::from(config.paired_percent);
        let mut words = (mean / 2 + rng.below(mean + 1)).max(1) as u32;
        if paired {
            words = (words + 1) & !1;
        }
        let fanout = 1 + rng.below(u64::from(config.max_fanout.max(1))) as u32;
        let mut dests: SmallVec<[u32; 2]> = SmallVec::new();
        let mut tries = 0;
        while dests.len() < fanout.min(n - 1) as usize && tries < 64 {
            tries += 1;
            let d = rng.below(u64::from(n)) as u32;
            if d != source && !dests.contains(&d) {
                dests.push(d);
            }
        }
        if dests.is_empty() {
            continue;
        }
        let align = if paired { 8 } else { 4 };
        let src = send_cursor[source as usize].next_multiple_of(align);
        let mut room = DEST_BASE.saturating_sub(src) / 4;
        for &d in &dests {
            let at = recv_cursor[d as usize].next_multiple_of(align);
            room = room.min(LIMIT.saturating_sub(at) / 4);
        }
        let words = words.min(room) & if paired { !1 } else { !0 };
        if words == 0 {
            continue;
        }
        send_cursor[source as usize] = src + 4 * words;
        let destinations = dests
            .iter()
            .map(|&d| {
                let at = recv_cursor[d as usize].next_multiple_of(align);
                recv_cursor[d as usize] = at + 4 * words;
                (TileId::from_u32(d), at)
            })
            .collect();
        out.push(Transfer {
            source: TileId::from_u32(source),
            source_addresses: smallvec::smallvec![src],
            destinations,
            words,
            width: if paired {
                Width::Paired64
            } else {
                Width::Word32
            },
        });
    }
    Phase {
        tile_count: n,
        transfers: out,
    }
}

/// Phase families shaped like the seed log's large phases: `(name, config)`
/// with the seed's transfer counts and endpoint bounds on 1472 tiles,
/// unicast and 32-bit.
pub fn seed_families() -> Vec<(String, GenConfig)> {
    // (transfers, endpoint bound) of a spread of the seed's large phases.
    const SHAPES: &[(u32, u32)] = &[
        (1224, 256),
        (1440, 7296),
        (2193, 576),
        (2207, 112),
        (2303, 9984),
        (3456, 7104),
        (7290, 15872),
        (9216, 4032),
        (17496, 7104),
        (33534, 17664),
        (104868, 1152),
        (163088, 3456),
        (301599, 896),
        (391866, 4304),
        (586368, 13248),
    ];
    SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(transfers, bound))| {
            (
                format!("seed-{transfers}x{bound}"),
                GenConfig {
                    tile_count: 1472,
                    transfers,
                    target_bound: bound,
                    max_fanout: 1,
                    paired_percent: 0,
                    balanced_sources: i % 2 == 0,
                    seed: 0x1000 + i as u64,
                },
            )
        })
        .collect()
}

/// Multicast-heavy and paired families on 1472 tiles, for the figures that
/// are judged against the stronger bound.
pub fn other_families() -> Vec<(String, GenConfig)> {
    let base = |name: &str, transfers, bound, fanout, paired, seed| {
        (
            name.to_owned(),
            GenConfig {
                tile_count: 1472,
                transfers,
                target_bound: bound,
                max_fanout: fanout,
                paired_percent: paired,
                balanced_sources: true,
                seed,
            },
        )
    };
    vec![
        base("multicast-4-9216", 9216, 4032, 4, 0, 0x2001),
        base("multicast-8-33534", 33534, 8000, 8, 0, 0x2002),
        base("paired-50-7290", 7290, 15872, 1, 50, 0x2003),
        base("paired-100-17496", 17496, 7104, 1, 100, 0x2004),
    ]
}

//! Deterministic phase generators for tests, benchmarks and figures.
//!
//! The seed log gives the shapes of real phases (1472 tiles, 10^3 to
//! 6·10^5 transfers, endpoint bounds from about 100 to 16 000 words);
//! [`seed_families`] reproduces those sizes with random sources,
//! destinations and lengths, so the scheduler meets both "few huge
//! transfers" and "many small ones". Addresses are laid out per tile so that
//! every generated phase is valid.
//!
//! [`multicast_families`] adds fanouts up to 400, and [`reduce_phase`]
//! builds the phases a split-K GEMM's partial-sum gather makes in the
//! SigLIP builds (about 200 000 transfers, fanouts from 1 to every tile),
//! so that multicast quality is measured on realistic shapes.
//! [`grid_phase`] builds a GEMM's operand distribution: every tile in one
//! row group and one column group, each group fed by its own senders, as
//! SigLIP's GEMM and attention phases are.

use ipu_layout::TileId;
use ipu_layout::rng::SplitMix64;
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

/// The IPU21 target the generated phases are shaped for (the seed log's
/// device): its tile count, and addresses from its SRAM base up to its
/// loader limit.
fn ipu21() -> (u32, u32, u32) {
    let t = ipu_target::Target::ipu21();
    (
        t.tile_count(),
        t.memory().sram_start,
        t.memory().loader_limit,
    )
}

/// Destinations are laid out from this many bytes above the SRAM base,
/// sources below it: a generator's layout choice, not a device fact.
const DEST_OFFSET: u32 = 0x44000;

/// Where destinations start.
fn dest_base() -> u32 {
    ipu21().1 + DEST_OFFSET
}

/// Generates one phase. Transfers whose memory would not fit are shortened,
/// so the result is always valid.
pub fn generate_phase(config: &GenConfig) -> Phase {
    let n = config.tile_count.max(2);
    let mut rng = SplitMix64::new(config.seed ^ 0x5eed);
    let transfers = config.transfers.max(1);
    // Mean words per transfer so that an average tile carries about the
    // target; the busiest ends a little above it.
    let mean = (u64::from(config.target_bound) * u64::from(n) / u64::from(transfers)).max(1);
    let mut send_cursor = vec![ipu21().1; n as usize];
    let mut recv_cursor = vec![dest_base(); n as usize];
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
        // Collisions are rare below a few dozen destinations; large fanouts
        // need more draws to find distinct tiles.
        let max_tries = 64 + 4 * fanout;
        while dests.len() < fanout.min(n - 1) as usize && tries < max_tries {
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
        let mut room = dest_base().saturating_sub(src) / 4;
        for &d in &dests {
            let at = recv_cursor[d as usize].next_multiple_of(align);
            room = room.min(ipu21().2.saturating_sub(at) / 4);
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
                    tile_count: ipu21().0,
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
                tile_count: ipu21().0,
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

/// Multicast families on 1472 tiles with fanouts up to 400 (uniform
/// between 1 and the maximum), and one mostly-unicast family with a few
/// wide multicasts, as the reduce phases have.
pub fn multicast_families() -> Vec<(String, GenConfig)> {
    let base = |transfers, bound, fanout, seed| {
        (
            format!("multicast-{fanout}-{transfers}"),
            GenConfig {
                tile_count: ipu21().0,
                transfers,
                target_bound: bound,
                max_fanout: fanout,
                paired_percent: 0,
                balanced_sources: seed % 2 == 0,
                seed,
            },
        )
    };
    vec![
        base(40_000, 600, 16, 0x3001),
        base(12_000, 100, 100, 0x3002),
        base(4_000, 40, 400, 0x3003),
        base(2_000, 200, 400, 0x3004),
    ]
}

/// A split-K GEMM's partial-sum gather, shaped like the SigLIP reduce
/// phases: the output (`rows × columns` F16) is computed as `partials`
/// partial sums, each spread over tiles in blocks of `row_block` rows and
/// `column_block` columns; every block row goes to the tile that owns the
/// output row (rows spread evenly over `used_tiles`). Beside the gather,
/// every column block's slice of a weight vector is multicast to the tiles
/// that computed that column block, and `broadcast_vectors` vectors of
/// `columns` F16 are broadcast to every used tile, each tile sending its
/// slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReduceConfig {
    /// Tiles of the device.
    pub tile_count: u32,
    /// Tiles that hold output rows and partial blocks (at most
    /// `tile_count`).
    pub used_tiles: u32,
    /// Output rows.
    pub rows: u32,
    /// Output columns (F16 elements).
    pub columns: u32,
    /// Partial sums to gather (the K split).
    pub partials: u32,
    /// Rows of a partial block.
    pub row_block: u32,
    /// Columns of a partial block (even: whole words).
    pub column_block: u32,
    /// Vectors of `columns` F16 broadcast to every used tile.
    pub broadcast_vectors: u32,
    /// Random seed (spreads partial blocks over tiles).
    pub seed: u64,
}

impl ReduceConfig {
    /// A SigLIP so400m batch-2 MLP reduce on 1472 tiles: 1458 tokens, 4304
    /// columns, four partial sums in blocks of 137 rows × 134 columns (one
    /// block per tile), and one broadcast vector: about 194 000 transfers.
    pub fn siglip_mlp(seed: u64) -> ReduceConfig {
        ReduceConfig {
            tile_count: ipu21().0,
            used_tiles: 1458,
            rows: 1458,
            columns: 4304,
            partials: 4,
            row_block: 137,
            column_block: 134,
            broadcast_vectors: 1,
            seed,
        }
    }

    /// A SigLIP so400m batch-2 attention-output reduce (1152 columns, four
    /// partial sums in blocks of 122 rows × 40 columns, two broadcast
    /// vectors): about 170 000 transfers.
    pub fn siglip_attention(seed: u64) -> ReduceConfig {
        ReduceConfig {
            tile_count: ipu21().0,
            used_tiles: 1458,
            rows: 1458,
            columns: 1152,
            partials: 4,
            row_block: 122,
            column_block: 40,
            broadcast_vectors: 2,
            seed,
        }
    }
}

/// The reduce families measured by the benchmarks and
/// `cargo xtask exchange --families`.
pub fn reduce_families() -> Vec<(String, ReduceConfig)> {
    vec![
        ("reduce-mlp".to_owned(), ReduceConfig::siglip_mlp(0x4001)),
        (
            "reduce-attention".to_owned(),
            ReduceConfig::siglip_attention(0x4002),
        ),
    ]
}

/// Generates a reduce phase (see [`ReduceConfig`]). Pieces whose source
/// tile is their destination (on-tile copies in a real build) and pieces
/// that would not fit in memory are left out, so the result is always
/// valid.
pub fn reduce_phase(config: &ReduceConfig) -> Phase {
    let n = config.tile_count.max(2);
    let used = config.used_tiles.clamp(2, n);
    let rows = config.rows.max(1);
    let columns = config.columns.max(2);
    let row_block = config.row_block.clamp(1, rows);
    let column_block = (config.column_block.max(2) + 1) & !1;
    let row_blocks = rows.div_ceil(row_block);
    let column_blocks = columns.div_ceil(column_block);
    let mut rng = SplitMix64::new(config.seed ^ 0x7ed0);
    let mut layout = Layout::new(n);
    let mut out = Vec::new();
    let owner = |row: u32| (u64::from(row) * u64::from(used) / u64::from(rows)) as u32;
    // Partial blocks go to tiles in a random order, as a placer spreading
    // the split-K GEMM would put them.
    let blocks = partials_blocks(config.partials.max(1), row_blocks, column_blocks);
    let mut tiles: Vec<u32> = (0..used).collect();
    for i in (1..tiles.len()).rev() {
        tiles.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let block_tile = |b: usize| tiles[b % tiles.len()];
    // Weight-vector slices to the tiles of each column block.
    for c in 0..column_blocks {
        let mut dests: Vec<u32> = (0..blocks.len())
            .filter(|&b| blocks[b].2 == c)
            .map(block_tile)
            .collect();
        dests.sort_unstable();
        dests.dedup();
        let source = (c * 7 + 3) % used;
        dests.retain(|&d| d != source);
        let cols = column_block.min(columns - c * column_block);
        layout.push(source, &dests, cols.div_ceil(2), &mut out);
    }
    // The gather: each block row to its owner.
    for (b, &(_, rb, c)) in blocks.iter().enumerate() {
        let tile = block_tile(b);
        let cols = column_block.min(columns - c * column_block);
        for row in rb * row_block..(rb * row_block + row_block).min(rows) {
            let to = owner(row);
            if to != tile {
                layout.push(tile, &[to], cols.div_ceil(2), &mut out);
            }
        }
    }
    // Broadcast vectors: every used tile sends its slice to all others.
    let vector_words = columns.div_ceil(2);
    let all: Vec<u32> = (0..used).collect();
    for _ in 0..config.broadcast_vectors {
        for t in 0..used {
            let from = u64::from(t) * u64::from(vector_words) / u64::from(used);
            let to = u64::from(t + 1) * u64::from(vector_words) / u64::from(used);
            let dests: Vec<u32> = all.iter().copied().filter(|&d| d != t).collect();
            layout.push(t, &dests, (to - from) as u32, &mut out);
        }
    }
    Phase {
        tile_count: n,
        transfers: out,
    }
}

/// Every partial block as (partial, row block, column block).
fn partials_blocks(partials: u32, row_blocks: u32, column_blocks: u32) -> Vec<(u32, u32, u32)> {
    let mut out = Vec::new();
    for k in 0..partials {
        for r in 0..row_blocks {
            for c in 0..column_blocks {
                out.push((k, r, c));
            }
        }
    }
    out
}

/// Addresses of generated transfers: each tile's sources packed from the
/// SRAM base, its destinations from [`dest_base`], so that no two ranges
/// meet and the phase is valid.
struct Layout {
    send: Vec<u32>,
    recv: Vec<u32>,
    /// Where destinations start (sources end there).
    dest_base: u32,
    /// The loader limit: destinations end there.
    limit: u32,
}

impl Layout {
    fn new(tiles: u32) -> Layout {
        let (_, sram_start, limit) = ipu21();
        let dest_base = dest_base();
        Layout {
            send: vec![sram_start; tiles as usize],
            recv: vec![dest_base; tiles as usize],
            dest_base,
            limit,
        }
    }

    /// Appends a transfer of `words` words from `source` to `dests`, unless
    /// it is empty or its memory would not fit.
    fn push(&mut self, source: u32, dests: &[u32], words: u32, out: &mut Vec<Transfer>) {
        let src = self.send[source as usize];
        let fits = src + 4 * words <= self.dest_base
            && dests
                .iter()
                .all(|&d| self.recv[d as usize] + 4 * words <= self.limit);
        if words == 0 || dests.is_empty() || !fits {
            return;
        }
        self.send[source as usize] = src + 4 * words;
        let destinations = dests
            .iter()
            .map(|&d| {
                let at = self.recv[d as usize];
                self.recv[d as usize] = at + 4 * words;
                (TileId::from_u32(d), at)
            })
            .collect();
        out.push(Transfer {
            source: TileId::from_u32(source),
            source_addresses: smallvec::smallvec![src],
            destinations,
            words,
            width: Width::Word32,
        });
    }
}

/// A GEMM's operand distribution, shaped like SigLIP's GEMM and attention
/// phases: the used tiles form blocks of `across × down` tiles; each run of
/// `across` consecutive tiles (a row group) receives one operand block and
/// each set of `down` tiles at one position of a block (a column group)
/// the other, so every tile sits in one row group and one column group and
/// the two meet in one tile. Each group's words come from `senders` tiles
/// outside it, in transfers of `row_words` (rows of the block: not
/// contiguous, so one transfer per row), with the group's total varied a
/// little. `stragglers` small groups (a column group less one tile) get a
/// few transfers too, as the uneven edges of a real tiling do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GridConfig {
    /// Tiles of the device.
    pub tile_count: u32,
    /// Tiles of a row group.
    pub across: u32,
    /// Tiles of a column group.
    pub down: u32,
    /// Blocks of `across × down` tiles.
    pub blocks: u32,
    /// Words each row group receives, about.
    pub row_group_words: u32,
    /// Words each column group receives, about.
    pub column_group_words: u32,
    /// Words per transfer to a row group and to a column group.
    pub row_words: (u32, u32),
    /// Senders per group.
    pub senders: u32,
    /// Small extra groups.
    pub stragglers: u32,
    /// Random seed.
    pub seed: u64,
}

/// The grid families measured by the benchmarks and
/// `cargo xtask exchange --families`: SigLIP b2's `fc2` GEMM (row groups of
/// 12 and column groups of 8 on 1440 tiles) and its attention (9 and 5 on
/// 1440 tiles), at about their sizes.
pub fn grid_families() -> Vec<(String, GridConfig)> {
    let tile_count = ipu21().0;
    vec![
        (
            "grid-gemm-12x8".to_owned(),
            GridConfig {
                tile_count,
                across: 12,
                down: 8,
                blocks: 15,
                row_group_words: 13_104,
                column_group_words: 6_912,
                row_words: (24, 256),
                senders: 15,
                stragglers: 13,
                seed: 0x5001,
            },
        ),
        (
            "grid-attention-9x5".to_owned(),
            GridConfig {
                tile_count,
                across: 9,
                down: 5,
                blocks: 32,
                row_group_words: 10_512,
                column_group_words: 2_916,
                row_words: (24, 12),
                senders: 18,
                stragglers: 20,
                seed: 0x5002,
            },
        ),
    ]
}

/// Generates a grid phase (see [`GridConfig`]). Transfers that would not
/// fit in memory are left out, so the result is always valid.
pub fn grid_phase(config: &GridConfig) -> Phase {
    let n = config.tile_count.max(2);
    let across = config.across.max(1);
    let down = config.down.max(1);
    let per_block = across * down;
    let blocks = config.blocks.clamp(1, (n / per_block).max(1));
    let used = (blocks * per_block).min(n);
    let mut rng = SplitMix64::new(config.seed ^ 0x941d);
    let mut layout = Layout::new(n);
    let mut out = Vec::new();
    let mut groups: Vec<(Vec<u32>, u32, u32)> = Vec::new();
    for g in 0..used / across {
        let tiles = (g * across..(g + 1) * across).collect();
        groups.push((tiles, config.row_group_words, config.row_words.0));
    }
    for b in 0..blocks {
        for p in 0..across {
            let tiles = (0..down).map(|d| b * per_block + d * across + p).collect();
            groups.push((tiles, config.column_group_words, config.row_words.1));
        }
    }
    let column_groups = groups.len() - (used / across) as usize;
    for _ in 0..config.stragglers {
        // A column group less one tile, as a tiling's uneven edge leaves.
        let pick = (used / across) as usize + rng.below(column_groups as u64) as usize;
        let mut tiles = groups[pick].0.clone();
        if tiles.len() > 1 {
            tiles.remove(rng.below(tiles.len() as u64) as usize);
        }
        let words = config.row_words.1.max(1) * (1 + rng.below(4) as u32);
        groups.push((tiles, words, config.row_words.1));
    }
    for (tiles, words, row) in groups {
        let row = row.max(1);
        // A group's total varies by a few rows, as uneven tilings do.
        let rows = (words / row).saturating_sub(rng.below(3) as u32).max(1);
        let senders = config.senders.clamp(1, rows);
        let mut from: Vec<u32> = Vec::new();
        while (from.len() as u32) < senders {
            let t = rng.below(u64::from(n)) as u32;
            if !tiles.contains(&t) && !from.contains(&t) {
                from.push(t);
            }
        }
        for k in 0..rows {
            layout.push(from[(k % senders) as usize], &tiles, row, &mut out);
        }
    }
    Phase {
        tile_count: n,
        transfers: out,
    }
}

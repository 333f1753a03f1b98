//! Layouts of row-wise operations and of attention.
//!
//! Row-wise operations (layer norm, adds, casts) keep whole rows on a tile:
//! the token axis, then the batch axis, are spread over the tiles, and every
//! row's last axis stays together so a codelet sees contiguous rows.
//! Attention is spread per (batch, head) pair, with the query rows split
//! `gq` ways and the key/value rows `s` ways; with `s > 1` the blocks'
//! partial results are combined on a finer row split.

use ipu_layout::{
    Axis, AxisTiling, ElementOrder, Layout, LayoutError, MemoryClass, Precision, TensorFormat,
    TensorShape, TensorTiling, TensorType,
};

use crate::plan::CostModel;

/// Builds a type from its parts.
pub fn tensor_type(
    extents: &[u64],
    precision: Precision,
    order: ElementOrder,
    memory_class: MemoryClass,
    tiling: TensorTiling,
) -> Result<TensorType, LayoutError> {
    let format = TensorFormat {
        precision,
        layout: Layout {
            order,
            tiling,
            memory_class,
        },
    };
    TensorType::new(TensorShape::from(extents), format)
}

/// A row-major tensor in standard memory on `tiling`: the layout
/// element-wise work, and every row and element layout, use.
pub fn row_major(
    extents: &[u64],
    precision: Precision,
    tiling: TensorTiling,
) -> Result<TensorType, LayoutError> {
    tensor_type(
        extents,
        precision,
        ElementOrder::RowMajor,
        MemoryClass::Ipu21Standard,
        tiling,
    )
}

/// `ty` with its tiling rotated by `rotation` modulo its tile count.
pub fn rotated(ty: &TensorType, rotation: u64) -> Result<TensorType, LayoutError> {
    let count = u64::from(ty.tiling().tile_count());
    let tiling = ty
        .tiling()
        .clone()
        .with_rotation((rotation % count.max(1)) as u32)?;
    let mut format = ty.format().clone();
    format.layout.tiling = tiling;
    TensorType::new(ty.shape().clone(), format)
}

pub(super) fn split(axis: Axis, partitions: u64, block: u64, stride: u64) -> AxisTiling {
    AxisTiling::new(axis, partitions as u32)
        .with_block(block as u32)
        .with_stride(stride as u32)
}

/// Elements per block of a vector split over tiles: at least 4 bytes, so
/// every fragment is a whole number of words.
fn vector_block(precision: Precision) -> u64 {
    (16 / precision.element_bytes()).max(1)
}

/// How a row layout splits a shape: `(token parts, batch parts)`.
pub fn row_split(extents: &[u64], tiles: u32) -> (u64, u64) {
    let tiles = u64::from(tiles.max(1));
    let rank = extents.len();
    if rank < 2 {
        return (1, 1);
    }
    let tokens = extents[rank - 2].clamp(1, tiles);
    let batch = if rank >= 3 {
        extents[rank - 3].clamp(1, tiles / tokens)
    } else {
        1
    };
    (tokens, batch)
}

/// Whole rows on each tile: tokens (the second-last axis) split first, then
/// the batch (third-last). A vector is split in blocks of at least 4 bytes.
pub fn row_layout(
    extents: &[u64],
    precision: Precision,
    tiles: u32,
) -> Result<TensorType, LayoutError> {
    let rank = extents.len();
    let tiling = match rank {
        0 => TensorTiling::new(1, 1, vec![])?,
        1 => {
            let block = vector_block(precision);
            let parts = extents[0].div_ceil(block).clamp(1, u64::from(tiles.max(1)));
            TensorTiling::new(
                parts as u32,
                1,
                vec![split(Axis::FromEnd(1), parts, block, 1)],
            )?
        }
        _ => {
            let (tokens, batch) = row_split(extents, tiles);
            let mut axes = vec![split(Axis::FromEnd(2), tokens, 1, 1)];
            if batch > 1 {
                axes.push(split(Axis::FromEnd(3), batch, 1, tokens));
            }
            TensorTiling::new((tokens * batch) as u32, 1, axes)?
        }
    };
    row_major(extents, precision, tiling)
}

/// Bytes per tile of a resting weight vector (layer-norm parameters,
/// biases). Readers gather or broadcast whole vectors, one fragment per
/// block: 256-byte blocks keep those fragments few (9 for a 1152-element F16
/// vector, against 144 with word-sized blocks) while no tile holds much of
/// any vector.
const VECTOR_HOME_BLOCK_BYTES: u64 = 256;

/// Where a weight vector rests: blocks of `VECTOR_HOME_BLOCK_BYTES` (256) of
/// its last axis on consecutive tiles from `first_tile` on (wrapping). The
/// tiling spans all `tiles`, the tiles past the vector's blocks holding
/// empty shards, so that the blocks can start anywhere: vectors starting at
/// different tiles keep their blocks off the tiles every other tensor's
/// partition 0 uses. Other axes stay whole in every block, so a small
/// weight of any rank (a `[1, 1, N]` probe token) rests the same way.
pub fn vector_home(
    extents: &[u64],
    precision: Precision,
    tiles: u32,
    first_tile: u32,
) -> Result<TensorType, LayoutError> {
    let tiles = tiles.max(1);
    let extent = extents.last().copied().unwrap_or(1);
    let block = (VECTOR_HOME_BLOCK_BYTES / precision.element_bytes()).max(vector_block(precision));
    let parts = extent.div_ceil(block).clamp(1, u64::from(tiles));
    let block = extent
        .div_ceil(parts)
        .next_multiple_of(vector_block(precision));
    let axes = if extents.is_empty() {
        vec![]
    } else {
        vec![split(Axis::FromEnd(1), u64::from(tiles), block, 1)]
    };
    let tiling = if axes.is_empty() {
        TensorTiling::new(1, 1, axes)?
    } else {
        TensorTiling::new(tiles, 1, axes)?.with_rotation(first_tile % tiles)?
    };
    row_major(extents, precision, tiling)
}

/// Rows spread like [`row_layout`], and where there are fewer rows than
/// tiles, the last axis too, in blocks of 16 elements: for element-wise
/// work (sums of partials, bias adds) on results with few rows.
pub fn element_layout(
    extents: &[u64],
    precision: Precision,
    tiles: u32,
) -> Result<TensorType, LayoutError> {
    if extents.len() < 2 {
        return row_layout(extents, precision, tiles);
    }
    let (tokens, batch) = row_split(extents, tiles);
    let columns = extents[extents.len() - 1];
    let parts =
        (columns.div_ceil(16)).clamp(1, (u64::from(tiles.max(1)) / (tokens * batch)).max(1));
    if parts == 1 {
        return row_layout(extents, precision, tiles);
    }
    let mut axes = vec![
        split(Axis::FromEnd(1), parts, 16, 1),
        split(Axis::FromEnd(2), tokens, 1, parts),
    ];
    if batch > 1 {
        axes.push(split(Axis::FromEnd(3), batch, 1, parts * tokens));
    }
    let tiling = TensorTiling::new((parts * tokens * batch) as u32, 1, axes)?;
    row_major(extents, precision, tiling)
}

/// How many column blocks [`element_layout`] splits the last axis into.
pub fn column_parts(layout: &TensorType) -> u32 {
    column_tiling(layout).map_or(1, |a| a.partitions)
}

/// How the last axis of `layout` is split, if it is.
pub fn column_tiling(layout: &TensorType) -> Option<&AxisTiling> {
    let rank = layout.shape().rank();
    layout
        .tiling()
        .axes()
        .iter()
        .find(|a| rank > 0 && a.axis.resolve(rank).ok() == Some(rank - 1))
}

/// A rotation (or first tile) for the item numbered `id`: a multiplicative
/// hash, so that consecutive ids land far apart on the tiles.
pub fn spread(id: u32) -> u64 {
    (u64::from(id) + 1).wrapping_mul(0x9e37_79b1) >> 7
}

/// A vector held whole on each of `tiles` tiles.
pub fn replicated(
    extents: &[u64],
    precision: Precision,
    tiles: u32,
) -> Result<TensorType, LayoutError> {
    let tiling = TensorTiling::new(tiles, tiles, vec![])?;
    row_major(extents, precision, tiling)
}

/// The same rows as `layout` (a row layout) but for another shape whose
/// extents differ only in the last axis, replicated `replicas` times.
pub fn rows_like(
    layout: &TensorType,
    extents: &[u64],
    precision: Precision,
) -> Result<TensorType, LayoutError> {
    let tiling = layout.tiling().clone();
    row_major(extents, precision, tiling)
}

/// An attention plan: `(batch, head)` pairs spread `pb × ph`, query rows
/// `gq` ways, key/value rows `s` ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionGrid {
    /// Batch parts.
    pub pb: u32,
    /// Head parts.
    pub ph: u32,
    /// Query row parts.
    pub gq: u32,
    /// Key/value row parts.
    pub s: u32,
}

/// The dimensions of one attention.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    /// Batch.
    pub batch: u64,
    /// Query rows.
    pub tq: u64,
    /// Key/value rows.
    pub tk: u64,
    /// Hidden width.
    pub hidden: u64,
    /// Heads.
    pub heads: u64,
    /// Whether the queries carry the scores' `1/√head_dim` already
    /// (`Op::Attention::queries_scaled`): the softmax then only takes the
    /// row maximum of the scores.
    pub queries_scaled: bool,
    /// The values' precision: F16, or FP8 (their product with the
    /// probabilities then reads them as FP8 weights).
    pub values: Precision,
    /// The precision of the probabilities the values are multiplied by
    /// (`SoftmaxPrecision::probabilities`): F16, or FP8 (with FP8 values,
    /// the values' product then runs at the AMP's FP8 rate).
    pub probs: Precision,
}

impl AttentionShape {
    /// Columns per head.
    pub fn head_dim(&self) -> u64 {
        self.hidden / self.heads
    }

    /// The factor the softmax multiplies the scores by: `1/√head_dim`,
    /// or exactly 1 when the queries carry it.
    pub fn score_scale(&self) -> f32 {
        if self.queries_scaled {
            1.0
        } else {
            1.0 / (self.head_dim() as f32).sqrt()
        }
    }
}

impl AttentionGrid {
    /// Tiles used.
    pub fn tiles(&self) -> u64 {
        u64::from(self.pb) * u64::from(self.ph) * u64::from(self.gq) * u64::from(self.s)
    }

    /// Per-tile bytes of the largest tile: queries, keys, values, partial
    /// output and statistics (F16 operands, F32 partials), and the block's
    /// scratch row of scores (F32, one key row's worth: the block computes
    /// one query row's scores at a time).
    pub fn bytes_per_tile(&self, a: &AttentionShape, element_bytes: u64) -> u64 {
        let pairs = a.batch.div_ceil(u64::from(self.pb)) * a.heads.div_ceil(u64::from(self.ph));
        let rq = a.tq.div_ceil(u64::from(self.gq));
        let rk = a.tk.div_ceil(u64::from(self.s));
        let d = a.head_dim();
        pairs * (rq * d * element_bytes + 2 * rk * d * element_bytes + rq * d * 4 + 2 * rq * 4)
            + rk * 4
    }

    /// Estimated cycles: the two matrix products on the AMP at F16 rate,
    /// an exponential per score, and the exchanges feeding the block.
    pub fn cycles(&self, a: &AttentionShape, element_bytes: u64, cost: &CostModel) -> u64 {
        let pairs = a.batch.div_ceil(u64::from(self.pb)) * a.heads.div_ceil(u64::from(self.ph));
        let rq = a.tq.div_ceil(u64::from(self.gq));
        let rk = a.tk.div_ceil(u64::from(self.s));
        let d = a.head_dim();
        let macs = pairs * 2 * rq * rk * d;
        let compute = macs.div_ceil(cost.f16_macs_per_cycle) + pairs * rq * rk;
        let received = pairs * (rq * d + 2 * rk * d) * element_bytes;
        let combine = if self.s > 1 {
            cost.exchange_cycles(pairs * rq * d * 4)
        } else {
            0
        };
        compute + cost.exchange_cycles(received) + combine
    }
}

/// The cheapest attention grid on at most `tiles` tiles whose largest tile
/// needs at most `budget` bytes, or else the one needing the fewest bytes.
pub fn attention_grid(
    a: &AttentionShape,
    element_bytes: u64,
    tiles: u32,
    budget: u64,
    cost: &CostModel,
) -> AttentionGrid {
    let tiles = u64::from(tiles.max(1));
    let pairs = a.batch * a.heads;
    let mut best: Option<(bool, u64, u64, AttentionGrid)> = None;
    let (pb_max, ph_max) = (a.batch.max(1), a.heads.max(1));
    for pb in 1..=pb_max.min(tiles) {
        if a.batch % pb != 0 {
            continue;
        }
        for ph in 1..=ph_max.min(tiles / pb) {
            if a.heads % ph != 0 {
                continue;
            }
            let groups = tiles / (pb * ph);
            if pb * ph < pairs && groups > 1 {
                // Spread the pairs fully before splitting rows.
                continue;
            }
            for s in 1..=groups.min(a.tk) {
                let gq = (groups / s).min(a.tq).max(1);
                let grid = AttentionGrid {
                    pb: pb as u32,
                    ph: ph as u32,
                    gq: gq as u32,
                    s: s as u32,
                };
                let bytes = grid.bytes_per_tile(a, element_bytes);
                let cycles = grid.cycles(a, element_bytes, cost);
                let key = (
                    bytes > budget,
                    if bytes > budget { bytes } else { cycles },
                    bytes,
                    grid,
                );
                if best
                    .as_ref()
                    .is_none_or(|b| (key.0, key.1, key.2) < (b.0, b.1, b.2))
                {
                    best = Some(key);
                }
            }
        }
    }
    best.map(|b| b.3).unwrap_or(AttentionGrid {
        pb: 1,
        ph: 1,
        gq: 1,
        s: 1,
    })
}

/// The layouts of one attention on a grid.
#[derive(Clone, Debug)]
pub struct AttentionLayouts {
    /// `[B, Tq, H]`, replicated `s` times.
    pub q: TensorType,
    /// `[B, Tk, H]`, replicated `gq` times (also the values' layout).
    pub kv: TensorType,
    /// `[s, B, Tq, H]` F32 unnormalised outputs of the blocks.
    pub out_part: TensorType,
    /// `[s, B, heads, Tq]` F32 row maxima (and sums) of the blocks.
    pub stat_part: TensorType,
    /// `[tiles, Tk/s]` F32 scratch, one row of scores per tile (the block
    /// codelet's workspace: it scores one query row at a time).
    pub workspace: TensorType,
    /// The partial outputs where they are combined (the same as
    /// `out_part` when `s == 1`).
    pub out_combine: TensorType,
    /// The statistics where they are combined.
    pub stat_combine: TensorType,
    /// `[B, Tq, H]` result.
    pub output: TensorType,
}

/// Builds the attention layouts of `grid`.
pub fn attention_layouts(
    a: &AttentionShape,
    grid: AttentionGrid,
    precision: Precision,
    output: Precision,
) -> Result<AttentionLayouts, LayoutError> {
    let AttentionGrid { pb, ph, gq, s } = grid;
    let (pb, ph, gq, s) = (u64::from(pb), u64::from(ph), u64::from(gq), u64::from(s));
    let d = a.head_dim();
    let tiles = (pb * ph * gq * s) as u32;
    // tile = kv + s·(q + gq·(h + ph·b))
    let (st_kv, st_q, st_h, st_b) = (1, s, s * gq, s * gq * ph);
    let std = MemoryClass::Ipu21Standard;
    let rm = ElementOrder::RowMajor;
    let heads_per = a.heads / ph;
    let q = tensor_type(
        &[a.batch, a.tq, a.hidden],
        precision,
        rm,
        std,
        TensorTiling::new(
            tiles,
            s as u32,
            vec![
                split(Axis::FromStart(0), pb, 1, st_b),
                split(Axis::FromStart(2), ph, d * heads_per, st_h),
                split(Axis::FromStart(1), gq, 1, st_q),
            ],
        )?,
    )?;
    let kv = tensor_type(
        &[a.batch, a.tk, a.hidden],
        precision,
        rm,
        std,
        TensorTiling::new(
            tiles,
            gq as u32,
            vec![
                split(Axis::FromStart(0), pb, 1, st_b),
                split(Axis::FromStart(2), ph, d * heads_per, st_h),
                split(Axis::FromStart(1), s, 1, st_kv),
            ],
        )?,
    )?;
    let part_tiling = |rows: u64, row_stride: u64, kv_whole: bool, hidden_axis_block: u64| {
        let mut axes = vec![
            split(Axis::FromStart(1), pb, 1, st_b),
            split(Axis::FromStart(3), ph, hidden_axis_block, st_h),
            split(Axis::FromStart(2), rows, 1, row_stride),
        ];
        if !kv_whole {
            axes.push(split(Axis::FromStart(0), s, 1, st_kv));
        }
        TensorTiling::new(tiles, 1, axes)
    };
    let out_part = tensor_type(
        &[s, a.batch, a.tq, a.hidden],
        Precision::F32,
        rm,
        std,
        part_tiling(gq, st_q, false, d * heads_per)?,
    )?;
    let stat_part = tensor_type(&[s, a.batch, a.heads, a.tq], Precision::F32, rm, std, {
        // Heads are axis 2 here and query rows axis 3.
        let axes = vec![
            split(Axis::FromStart(1), pb, 1, st_b),
            split(Axis::FromStart(2), ph, heads_per, st_h),
            split(Axis::FromStart(3), gq, 1, st_q),
            split(Axis::FromStart(0), s, 1, st_kv),
        ];
        TensorTiling::new(tiles, 1, axes)?
    })?;
    let rk = a.tk.div_ceil(s);
    let workspace = tensor_type(
        &[u64::from(tiles), rk],
        Precision::F32,
        rm,
        std,
        TensorTiling::new(
            tiles,
            1,
            vec![split(Axis::FromStart(0), u64::from(tiles), 1, 1)],
        )?,
    )?;
    // Combining happens on a finer query-row split over the same tiles:
    // query part q' = kv + s·q, so tile = q' + gq·s·(h + ph·b) as before.
    let (out_combine, stat_combine, output_tiling) = if s == 1 {
        let tiling = TensorTiling::new(
            tiles,
            1,
            vec![
                split(Axis::FromStart(0), pb, 1, st_b),
                split(Axis::FromStart(2), ph, d * heads_per, st_h),
                split(Axis::FromStart(1), gq, 1, st_q),
            ],
        )?;
        (out_part.clone(), stat_part.clone(), tiling)
    } else {
        fine_combine(a, grid, Precision::F32, a.head_dim())?
    };
    let output = tensor_type(&[a.batch, a.tq, a.hidden], output, rm, std, output_tiling)?;
    Ok(AttentionLayouts {
        q,
        kv,
        out_part,
        stat_part,
        workspace,
        out_combine,
        stat_combine,
        output,
    })
}

/// Where the blocks of an attention with `grid.s > 1` are combined: the
/// partial outputs `[s, B, Tq, H]` and statistics `[s, B, heads, Tq]`
/// gathered on a finer query-row split over the same tiles (query part
/// `q' = kv + s·q`, so tile `q' + gq·s·(h + ph·b)` as before), the
/// partial outputs in `blocks`' precision with `head_width` columns a
/// head (the head dimension, and the row sums' column where the AMP
/// computes them), and the result's tiling.
pub(super) fn fine_combine(
    a: &AttentionShape,
    grid: AttentionGrid,
    blocks: Precision,
    head_width: u64,
) -> Result<(TensorType, TensorType, TensorTiling), LayoutError> {
    let AttentionGrid { pb, ph, gq, s } = grid;
    let (pb, ph, gq, s) = (u64::from(pb), u64::from(ph), u64::from(gq), u64::from(s));
    let d = a.head_dim();
    let heads_per = a.heads / ph;
    let (rm, std) = (ElementOrder::RowMajor, MemoryClass::Ipu21Standard);
    let rows = (gq * s).min(a.tq);
    let fine_tiles = (pb * ph * rows) as u32;
    let (fh, fb) = (rows, rows * ph);
    let out_c = tensor_type(
        &[s, a.batch, a.tq, a.heads * head_width],
        blocks,
        rm,
        std,
        TensorTiling::new(
            fine_tiles,
            1,
            vec![
                split(Axis::FromStart(1), pb, 1, fb),
                split(Axis::FromStart(3), ph, head_width * heads_per, fh),
                split(Axis::FromStart(2), rows, 1, 1),
            ],
        )?,
    )?;
    let stat_c = tensor_type(
        &[s, a.batch, a.heads, a.tq],
        Precision::F32,
        rm,
        std,
        TensorTiling::new(
            fine_tiles,
            1,
            vec![
                split(Axis::FromStart(1), pb, 1, fb),
                split(Axis::FromStart(2), ph, heads_per, fh),
                split(Axis::FromStart(3), rows, 1, 1),
            ],
        )?,
    )?;
    let tiling = TensorTiling::new(
        fine_tiles,
        1,
        vec![
            split(Axis::FromStart(0), pb, 1, fb),
            split(Axis::FromStart(2), ph, d * heads_per, fh),
            split(Axis::FromStart(1), rows, 1, 1),
        ],
    )?;
    Ok((out_c, stat_c, tiling))
}

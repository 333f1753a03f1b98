//! Shard sizes and tile maps from the seed log, which must hold exactly.

use ipu_layout::*;

fn f16(shape: &[u64], order: ElementOrder, tiling: TensorTiling, class: MemoryClass) -> TensorType {
    let format = TensorFormat {
        precision: Precision::F16,
        layout: Layout {
            order,
            tiling,
            memory_class: class,
        },
    };
    TensorType::new(TensorShape::from(shape), format).expect("valid seed layout")
}

/// `[2,729,4304]` F16 RowMajor, replicas 8: the MLP intermediate the seed
/// failed to place.
pub fn mlp_intermediate() -> TensorType {
    let tiling = TensorTiling::new(
        1472,
        8,
        vec![
            AxisTiling::new(Axis::FromEnd(1), 23).with_block(192),
            AxisTiling::new(Axis::FromEnd(2), 8).with_block(2),
        ],
    )
    .unwrap();
    f16(
        &[2, 729, 4304],
        ElementOrder::RowMajor,
        tiling,
        MemoryClass::Ipu21Standard,
    )
}

fn amp_left(
    shape: &[u64],
    tile_count: u32,
    axes: [(u32, u32, u32, u32, Padding); 3],
) -> TensorType {
    let axes = axes
        .into_iter()
        .map(|(axis, partitions, block, stride, padding)| AxisTiling {
            padding,
            ..AxisTiling::new(Axis::FromStart(axis), partitions)
                .with_block(block)
                .with_stride(stride)
        })
        .collect();
    let tiling = TensorTiling::new(tile_count, 1, axes).unwrap();
    f16(
        shape,
        ElementOrder::Amp(AmpOperand::Left),
        tiling,
        MemoryClass::Ipu21Interleaved,
    )
}

/// `[5,2,729,3456]` F16 Amp(Left) on 1440 tiles.
pub fn qkv_left() -> TensorType {
    amp_left(
        &[5, 2, 729, 3456],
        1440,
        [
            (3, 24, 16, 1, Padding::Zero),
            (2, 12, 2, 120, Padding::Zero),
            (0, 5, 1, 24, Padding::Reject),
        ],
    )
}

/// `[23,2,729,1152]` F16 Amp(Left) on 1472 tiles.
pub fn fc2_left() -> TensorType {
    amp_left(
        &[23, 2, 729, 1152],
        1472,
        [
            (3, 8, 16, 1, Padding::Zero),
            (2, 8, 2, 184, Padding::Zero),
            (0, 23, 1, 8, Padding::Reject),
        ],
    )
}

fn bytes(t: &TensorType, tile: u32) -> u64 {
    t.shard_bytes(TileId::from_u32(tile)).unwrap()
}

#[test]
fn seed_mlp_intermediate_shards() {
    let t = mlp_intermediate();
    assert_eq!(bytes(&t, 69), 70656);
    assert_eq!(bytes(&t, 1104), 69120);
    assert_eq!(bytes(&t, 1288), 69120);
    assert_eq!(t.max_shard_bytes(), 70656);
    let shard = t.shard(TileId::from_u32(69)).unwrap();
    // Tile 69 = replica 5 of tuple 8: column partition 8, row partition 0.
    assert_eq!(shard.replica, 5);
    assert_eq!(
        (shard.axes[2].start, shard.axes[2].end, shard.axes[2].width),
        (1536, 1728, 192)
    );
    assert_eq!(
        (shard.axes[1].start, shard.axes[1].end, shard.axes[1].width),
        (0, 92, 92)
    );
    // The last column partition holds 4304 - 22·192 = 80 data columns.
    let last = t.shard(TileId::from_u32(22 * 8)).unwrap();
    assert_eq!(
        (last.axes[2].start, last.axes[2].end, last.axes[2].width),
        (4224, 4304, 192)
    );
    // The last row partition holds 1 padding row (729 rounds up to 730).
    let bottom = t.shard(TileId::from_u32(7 * 184)).unwrap();
    assert_eq!(
        (
            bottom.axes[1].start,
            bottom.axes[1].end,
            bottom.axes[1].width
        ),
        (640, 729, 90)
    );
}

#[test]
fn seed_qkv_left_shards() {
    let t = qkv_left();
    for tile in [69, 368, 92, 46, 552] {
        assert_eq!(bytes(&t, tile), 35712, "tile {tile}");
    }
    // Rows 365 blocks over 12 partitions: 5 long (62 rows), 7 short (60 rows).
    assert_eq!(bytes(&t, 600), 2 * 60 * 144 * 2);
}

#[test]
fn seed_fc2_left_shards() {
    let t = fc2_left();
    assert_eq!(bytes(&t, 138), 52992);
    assert_eq!(bytes(&t, 115), 52992);
    assert_eq!(bytes(&t, 1288), 51840);
    assert_eq!(bytes(&t, 1104), 51840);
}

#[test]
fn debug_reads_like_the_seed_log() {
    let text = format!("{:?}", mlp_intermediate());
    let seed = "TensorType { shape: TensorShape([2, 729, 4304]), format: TensorFormat { precision: F16, layout: Layout { order: RowMajor, tiling: TensorTiling { tile_count: 1472, replicas: 8, axes: [AxisTiling { axis: FromEnd(1), partitions: 23, padding_groups: 1, block_size: 192, padding_multiple: 192, shard_padding_multiple: 1, padding: Zero, tile_stride: None }, AxisTiling { axis: FromEnd(2), partitions: 8, padding_groups: 1, block_size: 2, padding_multiple: 2, shard_padding_multiple: 1, padding: Zero, tile_stride: None }] }, memory_class: Ipu21Standard } } }";
    assert_eq!(text, seed);
}

#[test]
fn serde_round_trip_revalidates() {
    for t in [mlp_intermediate(), qkv_left(), fc2_left()] {
        let json = serde_json::to_string(&t).unwrap();
        let back: TensorType = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.max_shard_bytes(), t.max_shard_bytes());
    }
    // A fixture with a wrong tile count is rejected when read.
    let bad = r#"{"shape":[4],"format":{"precision":"F16","layout":{"order":"RowMajor",
        "tiling":{"tile_count":3,"replicas":1,"axes":[{"axis":{"FromStart":0},"partitions":2}]},
        "memory_class":"Ipu21Standard"}}}"#;
    let err = serde_json::from_str::<TensorType>(bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tile_count is 3"), "{err}");
}

#[test]
fn tiles_holding_matches_shards() {
    let t = mlp_intermediate();
    let holders: Vec<TileId> = t.tiles_holding(&[1, 100, 2000]).unwrap().collect();
    assert_eq!(holders.len(), 8);
    for tile in holders {
        let offset = t.element_offset(tile, &[1, 100, 2000]).unwrap();
        assert!(offset.is_some());
    }
    assert!(t.tiles_holding(&[2, 0, 0]).is_err());
}

#[test]
fn invalid_tilings_are_errors() {
    let axis = |p| AxisTiling::new(Axis::FromStart(0), p);
    assert!(matches!(
        TensorTiling::new(10, 2, vec![axis(4)]),
        Err(LayoutError::TileCountMismatch { covered: 8, .. })
    ));
    assert!(matches!(
        TensorTiling::new(0, 1, vec![]),
        Err(LayoutError::Zero { .. })
    ));
    let format = |tiling| TensorFormat {
        precision: Precision::F32,
        layout: Layout {
            order: ElementOrder::RowMajor,
            tiling,
            memory_class: MemoryClass::Ipu21Standard,
        },
    };
    let two_axes = TensorTiling::new(4, 1, vec![axis(2), axis(2)]).unwrap();
    assert!(matches!(
        TensorType::new(TensorShape::from([8u64, 8]), format(two_axes)),
        Err(LayoutError::DuplicateAxis { axis: 0 })
    ));
    let far = TensorTiling::new(2, 1, vec![AxisTiling::new(Axis::FromEnd(3), 2)]).unwrap();
    assert!(matches!(
        TensorType::new(TensorShape::from([8u64, 8]), format(far)),
        Err(LayoutError::AxisOutOfRange { .. })
    ));
    let reject = TensorTiling::new(
        2,
        1,
        vec![AxisTiling {
            padding: Padding::Reject,
            ..axis(2).with_block(4)
        }],
    )
    .unwrap();
    assert!(matches!(
        TensorType::new(TensorShape::from([10u64]), format(reject)),
        Err(LayoutError::PaddingRejected { .. })
    ));
    // Strides 1 and 1 on two axes of 2 give tuples (0,0) and (1,1) twice.
    let irregular = TensorTiling::new(
        4,
        1,
        vec![
            axis(2).with_stride(1),
            AxisTiling::new(Axis::FromStart(1), 2).with_stride(1),
        ],
    )
    .unwrap();
    assert!(matches!(
        TensorType::new(TensorShape::from([8u64, 8]), format(irregular)),
        Err(LayoutError::IrregularStrides { .. })
    ));
}

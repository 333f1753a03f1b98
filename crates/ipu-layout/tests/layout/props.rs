//! Properties over random shapes and tilings.
//!
//! The fragment checks use a brute-force model written here: every data
//! element's byte offset in every shard, computed from the shard ranges with
//! the storage-order formulas stated in `ElementOrder`'s documentation, not
//! with the crate's geometry code.

use std::collections::HashMap;

use ipu_layout::*;
use proptest::prelude::*;

/// A random valid-looking tensor type description (may still be invalid).
#[derive(Clone, Debug)]
struct Case {
    extents: Vec<u64>,
    precision: Precision,
    order: ElementOrder,
    replicas: u32,
    axes: Vec<AxisTiling>,
    /// Permutation of digits (0 = replicas, i + 1 = axis i) for explicit strides.
    stride_order: Option<Vec<usize>>,
    /// Rotation, reduced modulo the tile count.
    rotation: u32,
}

impl Case {
    fn tiling(&self) -> Result<TensorTiling, LayoutError> {
        let product: u32 = self.axes.iter().map(|a| a.partitions).product();
        let tile_count = product * self.replicas;
        let mut axes = self.axes.clone();
        if let Some(order) = &self.stride_order {
            // Assign packed strides in the permuted digit order: always regular.
            let mut stride = 1u32;
            for &digit in order {
                if digit == 0 {
                    stride *= self.replicas;
                } else {
                    axes[digit - 1].tile_stride = Some(stride);
                    stride *= axes[digit - 1].partitions;
                }
            }
        }
        TensorTiling::new(tile_count, self.replicas, axes)?
            .with_rotation(self.rotation % tile_count)
    }

    fn build(&self) -> Result<TensorType, LayoutError> {
        let format = TensorFormat {
            precision: self.precision,
            layout: Layout {
                order: self.order,
                tiling: self.tiling()?,
                memory_class: MemoryClass::Ipu21Standard,
            },
        };
        TensorType::new(TensorShape::new(self.extents.iter().copied()), format)
    }
}

fn precision() -> impl Strategy<Value = Precision> {
    prop_oneof![
        Just(Precision::F32),
        Just(Precision::F16),
        Just(Precision::F8 {
            format: Fp8Format::F143,
            scale: 0
        }),
    ]
}

fn order() -> impl Strategy<Value = ElementOrder> {
    prop_oneof![
        Just(ElementOrder::RowMajor),
        Just(ElementOrder::Amp(AmpOperand::Left)),
        Just(ElementOrder::Amp(AmpOperand::Output)),
    ]
}

fn axis_tiling(axis: usize, rank: usize, extent: u64) -> impl Strategy<Value = AxisTiling> {
    // Padding groups that divide the extent, so that most cases are valid.
    let groups: Vec<u32> = (1..=3u32).filter(|g| extent % u64::from(*g) == 0).collect();
    (
        prop::sample::select(groups),
        1..=3u32,
        1..=4u32,
        1..=3u32,
        1..=2u32,
        any::<bool>(),
    )
        .prop_map(
            move |(groups, per_group, block, pad_extra, shard_multiple, from_end)| AxisTiling {
                axis: if from_end {
                    Axis::FromEnd((rank - axis) as u32)
                } else {
                    Axis::FromStart(axis as u32)
                },
                partitions: groups * per_group,
                padding_groups: groups,
                block_size: block,
                padding_multiple: block * pad_extra,
                shard_padding_multiple: shard_multiple,
                padding: Padding::Zero,
                tile_stride: None,
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    // The last axis is long enough to cross AMP panels (8, 16, 32 columns).
    (prop::collection::vec(1..=7u64, 0..=2), 1..=70u64)
        .prop_map(|(mut extents, last)| {
            extents.push(last);
            extents
        })
        .prop_flat_map(|extents| {
            let rank = extents.len();
            let tiled: Vec<_> = extents
                .iter()
                .enumerate()
                .map(|(i, &e)| axis_tiling(i, rank, e))
                .collect();
            (
                Just(extents),
                precision(),
                order(),
                1..=3u32,
                tiled,
                prop::collection::vec(any::<bool>(), rank),
                prop::option::of(Just(()).prop_perturb(move |_, mut rng| {
                    let mut digits: Vec<usize> = (0..=rank).collect();
                    for i in (1..digits.len()).rev() {
                        let j = (rng.next_u32() as usize) % (i + 1);
                        digits.swap(i, j);
                    }
                    digits
                })),
                prop_oneof![Just(0u32), any::<u32>()],
            )
        })
        .prop_map(
            |(extents, precision, order, replicas, tiled, keep, stride_order, rotation)| {
                let axes: Vec<AxisTiling> = tiled
                    .into_iter()
                    .zip(&keep)
                    .filter(|(_, k)| **k)
                    .map(|(a, _)| a)
                    .collect();
                // Strides are assigned only to kept axes: drop digits of the others.
                let kept: Vec<usize> = keep
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| **k)
                    .map(|(i, _)| i)
                    .collect();
                let stride_order = stride_order.map(|order| {
                    order
                        .into_iter()
                        .filter_map(|d| {
                            if d == 0 {
                                Some(0)
                            } else {
                                kept.iter().position(|&k| k == d - 1).map(|p| p + 1)
                            }
                        })
                        .collect()
                });
                Case {
                    extents,
                    precision,
                    order,
                    replicas,
                    axes,
                    stride_order,
                    rotation,
                }
            },
        )
}

/// Byte offset of a shard-local position by the documented formulas.
fn model_offset(order: ElementOrder, precision: Precision, widths: &[u64], local: &[u64]) -> u64 {
    let eb = precision.element_bytes();
    match order {
        ElementOrder::RowMajor => local.iter().zip(widths).fold(0, |a, (&i, &w)| a * w + i) * eb,
        ElementOrder::Amp(_) => {
            let n = widths.len() - 1;
            let rows: u64 = widths[..n].iter().product();
            let row = local[..n]
                .iter()
                .zip(&widths[..n])
                .fold(0, |a, (&i, &w)| a * w + i);
            let p = precision.amp_panel_columns();
            let panel_start = local[n] / p * p;
            let panel_width = p.min(widths[n] - panel_start);
            (panel_start * rows + row * panel_width + local[n] - panel_start) * eb
        }
    }
}

/// Every tile's map from data byte offset to (element index, byte in element).
fn byte_model(t: &TensorType) -> Vec<HashMap<u64, (Vec<u64>, u64)>> {
    let eb = t.precision().element_bytes();
    t.shards()
        .map(|shard| {
            let widths: Vec<u64> = shard.axes.iter().map(|a| a.width).collect();
            let mut map = HashMap::new();
            let mut index: Vec<u64> = shard.axes.iter().map(|a| a.start).collect();
            if shard.axes.iter().any(|a| a.is_empty()) {
                return map;
            }
            loop {
                let local: Vec<u64> = index
                    .iter()
                    .zip(&shard.axes)
                    .map(|(i, a)| i - a.start)
                    .collect();
                let offset = model_offset(t.order(), t.precision(), &widths, &local);
                assert!(offset + eb <= shard.bytes);
                for b in 0..eb {
                    assert!(
                        map.insert(offset + b, (index.clone(), b)).is_none(),
                        "offset reused"
                    );
                }
                let mut axis = index.len();
                loop {
                    if axis == 0 {
                        return map;
                    }
                    axis -= 1;
                    index[axis] += 1;
                    if index[axis] < shard.axes[axis].end {
                        break;
                    }
                    index[axis] = shard.axes[axis].start;
                }
            }
        })
        .collect()
}

fn all_indices(extents: &[u64]) -> Vec<Vec<u64>> {
    let mut out = vec![vec![]];
    for &e in extents {
        out = out
            .into_iter()
            .flat_map(|p| (0..e).map(move |i| [p.clone(), vec![i]].concat()))
            .collect();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn shards_agree_with_brute_force(c in case()) {
        let Ok(t) = c.build() else { return Ok(()) };
        let mut held = vec![0u64; t.tiling().tile_count() as usize];
        for index in all_indices(&c.extents) {
            let tiles: Vec<TileId> = t.tiles_holding(&index).unwrap().collect();
            prop_assert_eq!(tiles.len() as u32, c.replicas);
            for tile in tiles {
                held[tile.as_u32() as usize] += 1;
                let offset = t.element_offset(tile, &index).unwrap();
                prop_assert!(offset.is_some());
            }
        }
        let eb = c.precision.element_bytes();
        for shard in t.shards() {
            prop_assert_eq!(held[shard.tile.as_u32() as usize], shard.data_elements());
            let padded: u64 = shard.axes.iter().map(|a| a.width).product();
            prop_assert_eq!(shard.bytes, padded * eb);
            prop_assert!(shard.bytes <= t.max_shard_bytes());
        }
    }

    /// The padding runs along an axis cover exactly the bytes of the
    /// elements with padding along that axis and data along every other,
    /// by the documented offset formulas, in order and merged.
    #[test]
    fn axis_padding_runs_are_the_padding_meeting_data(c in case(), pick in 0usize..4) {
        let Ok(t) = c.build() else { return Ok(()) };
        let rank = c.extents.len();
        if rank == 0 {
            return Ok(());
        }
        let a = pick % rank;
        let eb = c.precision.element_bytes();
        for shard in t.shards() {
            let mut runs = Vec::new();
            t.for_each_axis_padding_run(shard.tile, Axis::FromStart(a as u32), |o, n| runs.push((o, n)))
                .unwrap();
            let mut expected = std::collections::BTreeSet::new();
            if !shard.axes.iter().any(|x| x.is_empty()) {
                let widths: Vec<u64> = shard.axes.iter().map(|x| x.width).collect();
                for local in all_indices(&widths) {
                    let meets = local.iter().zip(&shard.axes).enumerate().all(|(i, (&l, x))| {
                        if i == a { l >= x.len() } else { l < x.len() }
                    });
                    if meets {
                        let o = model_offset(t.order(), t.precision(), &widths, &local);
                        expected.extend(o..o + eb);
                    }
                }
            }
            let mut covered = std::collections::BTreeSet::new();
            let mut last_end: Option<u64> = None;
            for &(o, n) in &runs {
                prop_assert!(n > 0 && o + n <= shard.bytes);
                // In order, and adjacent runs merged.
                prop_assert!(last_end.is_none_or(|e| o > e));
                last_end = Some(o + n);
                covered.extend(o..o + n);
            }
            prop_assert_eq!(covered, expected);
        }
    }

    #[test]
    fn rotation_moves_every_shard_up_by_its_amount(c in case()) {
        // What the unrotated tiling puts on tile t, the rotated one puts on
        // tile (t + ρ) mod T, and nothing else changes.
        let Ok(rotated) = c.build() else { return Ok(()) };
        let plain = Case { rotation: 0, ..c.clone() }.build().unwrap();
        let count = rotated.tiling().tile_count();
        let rho = rotated.tiling().rotation();
        prop_assert_eq!(rho, c.rotation % count);
        for t in 0..count {
            let a = plain.shard(TileId::from_u32(t)).unwrap();
            let b = rotated.shard(TileId::from_u32((t + rho) % count)).unwrap();
            prop_assert_eq!(&a.axes, &b.axes);
            prop_assert_eq!(a.bytes, b.bytes);
        }
    }

    #[test]
    fn fragments_cover_every_destination_byte_once(a in case(), b in case()) {
        // Give both the same shape and precision: take b's tiling onto a's shape.
        let b = Case { extents: a.extents.clone(), precision: a.precision, ..b };
        let (Ok(src), Ok(dst)) = (a.build(), b.build()) else { return Ok(()) };
        let src_model = byte_model(&src);
        let dst_model = byte_model(&dst);
        let r = redistribute(&src, &dst, &RedistributeConfig::default()).unwrap();
        let mut covered: Vec<HashMap<u64, u32>> = vec![HashMap::new(); dst_model.len()];
        for f in r.fragments() {
            prop_assert!(f.bytes > 0);
            for i in 0..f.bytes {
                let s = src_model[f.source.as_u32() as usize].get(&(f.source_offset + i));
                let d = dst_model[f.destination.as_u32() as usize].get(&(f.destination_offset + i));
                // Both bytes are data (padding is never read or written) of
                // the same element.
                prop_assert!(s.is_some(), "fragment {:?} reads padding", f);
                prop_assert!(d.is_some(), "fragment {:?} writes padding", f);
                prop_assert_eq!(s, d);
                *covered[f.destination.as_u32() as usize].entry(f.destination_offset + i).or_default() += 1;
            }
        }
        for (tile, model) in dst_model.iter().enumerate() {
            for offset in model.keys() {
                prop_assert_eq!(covered[tile].get(offset).copied(), Some(1), "tile {} byte {}", tile, offset);
            }
        }
        // A redistribution to the same type is the identity.
        let same = redistribute(&src, &src, &RedistributeConfig::default()).unwrap();
        prop_assert!(same.is_identity());
    }

    #[test]
    fn arbitrary_inputs_never_panic(
        extents in prop::collection::vec(0..=40u64, 0..=4),
        tile_count in 0..=64u32,
        replicas in 0..=8u32,
        raw in prop::collection::vec((0..6u32, any::<bool>(), 0..6u32, 0..4u32, 0..5u32, 0..5u32, 0..3u32, any::<bool>(), prop::option::of(0..9u32)), 0..=4),
        order in order(),
        precision in precision(),
    ) {
        let axes = raw.into_iter().map(|(axis, end, partitions, groups, block, pad, shard, reject, stride)| AxisTiling {
            axis: if end { Axis::FromEnd(axis) } else { Axis::FromStart(axis) },
            partitions, padding_groups: groups, block_size: block, padding_multiple: pad,
            shard_padding_multiple: shard,
            padding: if reject { Padding::Reject } else { Padding::Zero },
            tile_stride: stride,
        }).collect();
        let Ok(tiling) = TensorTiling::new(tile_count, replicas, axes) else { return Ok(()) };
        let format = TensorFormat { precision, layout: Layout { order, tiling, memory_class: MemoryClass::Ipu21Standard } };
        let Ok(t) = TensorType::new(TensorShape::new(extents.clone()), format) else { return Ok(()) };
        for shard in t.shards() {
            let _ = t.element_offset(shard.tile, &extents);
        }
        let _ = t.shard(TileId::from_u32(tile_count));
        let _ = t.tiles_holding(&extents);
        let _ = redistribute(&t, &t, &RedistributeConfig::default());
    }
}

#[test]
fn huge_sizes_are_errors_not_panics() {
    let tiling = TensorTiling::new(2, 1, vec![AxisTiling::new(Axis::FromStart(0), 2)]).unwrap();
    let format = TensorFormat {
        precision: Precision::F32,
        layout: Layout {
            order: ElementOrder::RowMajor,
            tiling,
            memory_class: MemoryClass::Ipu21Standard,
        },
    };
    let err = TensorType::new(TensorShape::from([u64::MAX - 1, u64::MAX / 2]), format).unwrap_err();
    assert!(matches!(err, LayoutError::Overflow { .. }), "{err}");
}

/// A view of a source shape: per source axis a slice `(origin, extent)`,
/// broadcast where the source extent is 1, and optionally a new leading axis.
fn view_of(extents: &[u64]) -> impl Strategy<Value = (Vec<u64>, Vec<u64>)> + use<> {
    let axes: Vec<_> = extents
        .iter()
        .map(|&e| {
            if e == 1 {
                (1..=4u64).prop_map(|d| (0u64, d)).boxed()
            } else {
                (0..e).prop_flat_map(move |o| (Just(o), 1..=e - o)).boxed()
            }
        })
        .collect();
    (axes, prop::option::of(1..=3u64)).prop_map(|(axes, lead)| {
        let origin = axes.iter().map(|(o, _)| *o).collect();
        let mut shape: Vec<u64> = lead.into_iter().collect();
        shape.extend(axes.iter().map(|(_, d)| *d));
        (origin, shape)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn view_fragments_read_the_viewed_element(
        (a, (origin, shape)) in case().prop_flat_map(|a| { let v = view_of(&a.extents); (Just(a), v) }),
        b in case(),
    ) {
        // b's tiling on the view's shape, when its axes fit that rank.
        let b = Case { extents: shape.clone(), precision: a.precision, ..b };
        let (Ok(src), Ok(dst)) = (a.build(), b.build()) else { return Ok(()) };
        let src_model = byte_model(&src);
        let dst_model = byte_model(&dst);
        let r = redistribute_view(&src, &SourceView::Window(origin.clone()), &dst, &RedistributeConfig::default()).unwrap();
        let lead = shape.len() - a.extents.len();
        let mut covered: Vec<HashMap<u64, u32>> = vec![HashMap::new(); dst_model.len()];
        for f in r.fragments() {
            for i in 0..f.bytes {
                let Some((x, byte)) = dst_model[f.destination.as_u32() as usize].get(&(f.destination_offset + i)) else {
                    return Err(TestCaseError::fail(format!("fragment {f:?} writes padding")));
                };
                let expected: Vec<u64> = a.extents.iter().enumerate().map(|(j, &e)| {
                    if e == 1 && shape[j + lead] != 1 { 0 } else { x[j + lead] + origin[j] }
                }).collect();
                let s = src_model[f.source.as_u32() as usize].get(&(f.source_offset + i));
                prop_assert_eq!(s, Some(&(expected, *byte)), "fragment {:?}", f);
                *covered[f.destination.as_u32() as usize].entry(f.destination_offset + i).or_default() += 1;
            }
        }
        for (tile, model) in dst_model.iter().enumerate() {
            for offset in model.keys() {
                prop_assert_eq!(covered[tile].get(offset).copied(), Some(1));
            }
        }
    }
}

#[test]
fn views_outside_the_source_are_errors() {
    let t = |shape: &[u64]| {
        let tiling = TensorTiling::new(1, 1, vec![]).unwrap();
        let format = TensorFormat {
            precision: Precision::F16,
            layout: Layout {
                order: ElementOrder::RowMajor,
                tiling,
                memory_class: MemoryClass::Ipu21Standard,
            },
        };
        TensorType::new(TensorShape::from(shape), format).unwrap()
    };
    let config = RedistributeConfig::default();
    assert!(
        redistribute_view(
            &t(&[4, 6]),
            &SourceView::Window(vec![0, 4]),
            &t(&[4, 3]),
            &config
        )
        .is_err()
    );
    assert!(
        redistribute_view(
            &t(&[4, 6]),
            &SourceView::Window(vec![0]),
            &t(&[4, 3]),
            &config
        )
        .is_err()
    );
    assert!(
        redistribute_view(
            &t(&[2, 4, 6]),
            &SourceView::Window(vec![0, 0, 0]),
            &t(&[4, 6]),
            &config
        )
        .is_err()
    );
    let slice = redistribute_view(
        &t(&[4, 6]),
        &SourceView::Window(vec![1, 2]),
        &t(&[2, 3]),
        &config,
    )
    .unwrap();
    // Rows 1 and 2, columns 2..5: two runs of 3 F16 elements.
    assert_eq!(slice.fragments().len(), 2);
    assert_eq!(slice.fragments()[0].source_offset, (6 + 2) * 2);
    assert_eq!(slice.fragments()[1].source_offset, (12 + 2) * 2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Inserting an axis of extent 1 into the destination shape and then
    /// squeezing it back reads every element at its own index.
    #[test]
    fn squeeze_reads_the_same_elements(a in case(), b in case(), at in 0..4usize) {
        let mut shape = a.extents.clone();
        shape.insert(at.min(shape.len()), 1);
        let b = Case { extents: shape.clone(), precision: a.precision, ..b };
        let (Ok(src), Ok(dst)) = (a.build(), b.build()) else { return Ok(()) };
        let src_model = byte_model(&src);
        let dst_model = byte_model(&dst);
        for (from, to, from_model, to_model) in [(&src, &dst, &src_model, &dst_model), (&dst, &src, &dst_model, &src_model)] {
            let r = redistribute_view(from, &SourceView::Squeeze, to, &RedistributeConfig::default()).unwrap();
            let mut covered = 0u64;
            for f in r.fragments() {
                for i in 0..f.bytes {
                    let (x, byte) = to_model[f.destination.as_u32() as usize].get(&(f.destination_offset + i)).unwrap();
                    let (y, source_byte) = from_model[f.source.as_u32() as usize].get(&(f.source_offset + i)).unwrap();
                    let squeeze = |v: &Vec<u64>, e: &[u64]| v.iter().zip(e).filter(|(_, e)| **e != 1).map(|(i, _)| *i).collect::<Vec<_>>();
                    prop_assert_eq!(squeeze(x, to.shape().extents()), squeeze(y, from.shape().extents()));
                    prop_assert_eq!(byte, source_byte);
                    covered += 1;
                }
            }
            let expected: u64 = to_model.iter().map(|m| m.len() as u64).sum();
            prop_assert_eq!(covered, expected);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Packing every shard from row-major values and unpacking them gives
    /// the values back (quantised), at the documented offsets.
    #[test]
    fn pack_and_unpack_round_trip(c in case()) {
        let Ok(t) = c.build() else { return Ok(()) };
        let count = t.shape().element_count().unwrap() as usize;
        let values: Vec<f32> = (0..count).map(|i| (i % 50) as f32 - 20.0).collect();
        let mut back = vec![f32::NAN; count];
        for shard in t.shards() {
            let mut bytes = vec![0u8; shard.bytes as usize];
            t.pack_shard(shard.tile, &values, &mut bytes).unwrap();
            t.unpack_shard(shard.tile, &bytes, &mut back).unwrap();
            let widths: Vec<u64> = shard.axes.iter().map(|a| a.width).collect();
            t.for_each_element(shard.tile, |index, offset| {
                let local: Vec<u64> = index.iter().zip(&shard.axes).map(|(i, a)| i - a.start).collect();
                assert_eq!(offset, model_offset(t.order(), t.precision(), &widths, &local));
                assert_eq!(offset, t.order().byte_offset(t.precision(), &widths, &local));
            }).unwrap();
            // The runs pack and unpack use list the same elements, in the
            // same order, at the same offsets.
            let mut elements = Vec::new();
            t.for_each_element(shard.tile, |index, offset| elements.push((index.to_vec(), offset))).unwrap();
            let mut from_runs = Vec::new();
            let eb = t.precision().element_bytes();
            t.for_each_run(shard.tile, |index, offset, count| {
                for i in 0..count {
                    let mut at = index.to_vec();
                    if let Some(last) = at.last_mut() {
                        *last += i;
                    }
                    from_runs.push((at, offset + i * eb));
                }
            }).unwrap();
            prop_assert_eq!(&from_runs, &elements);
        }
        for (v, b) in values.iter().zip(&back) {
            prop_assert_eq!(c.precision.quantize(*v), *b);
        }
        prop_assert!(t.pack_shard(TileId::from_u32(0), &values[..count - 1], &mut []).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A sink that stops after `k` fragments gets the list's first `k`,
    /// and the redistribution still succeeds; one that never stops gets
    /// the whole list.
    #[test]
    fn a_stopped_sink_gets_a_prefix_of_the_fragments(a in case(), b in case(), k in 1usize..40) {
        let b = Case { extents: a.extents.clone(), precision: a.precision, ..b };
        let (Ok(src), Ok(dst)) = (a.build(), b.build()) else { return Ok(()) };
        let config = RedistributeConfig::default();
        let all = redistribute(&src, &dst, &config).unwrap().into_fragments();
        let mut whole = Vec::new();
        redistribute_view_each(&src, &SourceView::Whole, &dst, &config, &mut |f| {
            whole.push(f);
            true
        })
        .unwrap();
        prop_assert_eq!(&whole, &all);
        let mut first = Vec::new();
        redistribute_view_each(&src, &SourceView::Whole, &dst, &config, &mut |f| {
            first.push(f);
            first.len() < k
        })
        .unwrap();
        prop_assert_eq!(&first[..], &all[..k.min(all.len())]);
    }
}

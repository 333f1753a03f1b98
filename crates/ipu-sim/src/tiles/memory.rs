//! Tile memory as the steps see it: placed ranges, the kernel programs, the
//! exchange's word view of the images and a codelet's view of one tile.

use std::cell::Cell;
use std::collections::HashMap;

use ipu_exchange::{BlockCopy, ExchangeMemory, Fabric, MemoryError};
use ipu_kernels::{EmulateOptions, KernelArgs, PreparedProgram, emulate_prepared};
use ipu_layout::{EntityId, Precision, TileId};
use ipu_package::package::Package;
use ipu_package::program::{Buffer, BufferId, GemmEntry, KernelId, Operand};

use crate::SimError;
use crate::codelets::CodeletMemory;

/// What every tile's view needs and nobody changes during a run.
pub(super) struct Shared<'p> {
    pub(super) package: &'p Package,
    /// Per buffer: tile → (address, shard bytes with the access tail).
    pub(super) ranges: Vec<HashMap<u32, (u32, u64)>>,
    /// Per tile: the union of placed ranges `(start, end)`, sorted.
    pub(super) placed: Vec<Vec<(u32, u32)>>,
    /// Per kernel: programs by entry `[small init, small acc, large init,
    /// large acc]`, decoded and prepared once from the objects.
    pub(super) programs: Vec<[Option<PreparedProgram>; 4]>,
    pub(super) fabric: Fabric,
    /// Per FP8 precision a cast writes: the code of every F16 value.
    pub(super) fp8_tables: HashMap<Precision, Vec<u8>>,
    /// The first SRAM address of the package's target: where images start.
    pub(super) sram_start: u32,
}

/// The code of every F16 value in `output`, by the F16's bits: exactly
/// what `output.encode_into` writes for it.
pub(super) fn fp8_table(output: Precision) -> Vec<u8> {
    (0..=u16::MAX)
        .map(|bits| {
            let mut code = [0u8];
            output.encode_into(Precision::F16.decode_from(&bits.to_le_bytes()), &mut code);
            code[0]
        })
        .collect()
}

/// The names of the four entries, in [`Shared::programs`] order.
const ENTRIES: [&str; 4] = [
    "small initialise",
    "small accumulate",
    "large initialise",
    "large accumulate",
];

impl Shared<'_> {
    pub(super) fn resolve(&self, subst: &HashMap<BufferId, BufferId>, b: BufferId) -> BufferId {
        subst.get(&b).copied().unwrap_or(b)
    }

    /// Buffer `b` (validated ids always exist; an unknown one is an error,
    /// not a panic).
    pub(super) fn buffer(&self, b: BufferId) -> Result<&Buffer, SimError> {
        let buffers = &self.package.program.buffers;
        buffers.get(b).ok_or(SimError::UnknownBuffer {
            buffer: b,
            buffers: buffers.len(),
            context: "an operand".to_owned(),
        })
    }

    /// The placed range of `b` on `tile`: `(address, bytes with tail)`.
    pub(super) fn range(&self, b: BufferId, tile: TileId) -> Result<(u32, u64), SimError> {
        let buffer = self.buffer(b)?;
        self.ranges
            .get(b.index())
            .and_then(|m| m.get(&tile.as_u32()))
            .copied()
            .ok_or_else(|| SimError::OutOfRange {
                tile,
                buffer: buffer.name.clone(),
                offset: 0,
                bytes: 0,
                limit: 0,
            })
    }

    /// The image offset of `bytes` bytes at `address` on `tile`, if they
    /// lie inside one placed range.
    pub(super) fn placed_offset(
        &self,
        tile: TileId,
        address: u32,
        bytes: u64,
    ) -> Result<usize, SimError> {
        let unplaced = SimError::Unplaced {
            tile,
            address,
            bytes,
        };
        let Some(list) = self.placed.get(tile.index()) else {
            return Err(unplaced);
        };
        let end = u64::from(address).saturating_add(bytes);
        let i = list.partition_point(|r| r.0 <= address);
        match i.checked_sub(1).and_then(|i| list.get(i)) {
            Some(&(_, stop)) if u64::from(stop) >= end => Ok((address - self.sram_start) as usize),
            _ => Err(unplaced),
        }
    }

    /// The image range of `bytes` bytes at `address` on `tile`.
    pub(super) fn placed_range(
        &self,
        tile: TileId,
        address: u32,
        bytes: u64,
    ) -> Result<std::ops::Range<usize>, SimError> {
        let at = self.placed_offset(tile, address, bytes)?;
        // A placed range lies inside SRAM, so `bytes` fits in usize.
        Ok(at..at + bytes as usize)
    }

    /// The address of `bytes` bytes at operand `at` on `tile`, checked
    /// against the (substituted) buffer's placed range.
    pub(super) fn operand(
        &self,
        subst: &HashMap<BufferId, BufferId>,
        tile: TileId,
        at: Operand,
        bytes: u64,
    ) -> Result<u32, SimError> {
        let b = self.resolve(subst, at.buffer);
        let (address, limit) = self.range(b, tile)?;
        if u64::from(at.offset).saturating_add(bytes) > limit {
            return Err(SimError::OutOfRange {
                tile,
                buffer: self.buffer(b)?.name.clone(),
                offset: u64::from(at.offset),
                bytes,
                limit,
            });
        }
        // Inside a placed range, which ends below SRAM_END.
        Ok(address + at.offset)
    }
}

/// The images as the exchange replay sees them: words at placed addresses.
///
/// A replay moves runs of consecutive words, reading from one tile and
/// writing to another, so the placed range that held the last word read
/// usually holds the next one read, and likewise for writes: each is
/// remembered and tried before the binary search (the check itself is the
/// same).
pub(super) struct Words<'a, 'p> {
    shared: &'a Shared<'p>,
    images: &'a mut [Vec<u8>],
    /// The last placed range read from: `(tile, start, end)`.
    last_read: Cell<(u32, u32, u32)>,
    /// The last placed range written to.
    last_write: Cell<(u32, u32, u32)>,
}

impl<'a, 'p> Words<'a, 'p> {
    pub(super) fn new(shared: &'a Shared<'p>, images: &'a mut [Vec<u8>]) -> Self {
        Words {
            shared,
            images,
            last_read: Cell::new((u32::MAX, 0, 0)),
            last_write: Cell::new((u32::MAX, 0, 0)),
        }
    }

    /// The image range of the word at `byte_address` on `tile`: the
    /// placed range `last` remembers for this kind of access if it holds
    /// the word, else [`placed_words`]'s, which is then remembered.
    fn word(
        &self,
        tile: TileId,
        byte_address: u32,
        last: &Cell<(u32, u32, u32)>,
    ) -> Result<std::ops::Range<usize>, MemoryError> {
        let (t, start, stop) = last.get();
        if let Some(end) = byte_address.checked_add(4)
            && t == tile.as_u32()
            && start <= byte_address
            && end <= stop
        {
            let at = (byte_address - self.shared.sram_start) as usize;
            return Ok(at..at + 4);
        }
        let (range, (start, stop)) = placed_words(
            &self.shared.placed,
            self.shared.sram_start,
            tile,
            byte_address,
            1,
        )?;
        last.set((tile.as_u32(), start, stop));
        Ok(range)
    }
}

/// The image range of `words` words at `byte_address` on `tile` and the
/// placed range holding them, if one holds them all; otherwise the error
/// of the first word no placed range holds. It keeps no state, so the
/// parallel block copies share it.
fn placed_words(
    placed: &[Vec<(u32, u32)>],
    sram_start: u32,
    tile: TileId,
    byte_address: u32,
    words: u32,
) -> Result<(std::ops::Range<usize>, (u32, u32)), MemoryError> {
    let holding = |address: u32, bytes: u32| {
        let end = address.checked_add(bytes)?;
        let list = placed.get(tile.index())?;
        let i = list.partition_point(|r| r.0 <= address).checked_sub(1)?;
        let &(start, stop) = list.get(i)?;
        (end <= stop).then_some((start, stop))
    };
    let bytes = words.checked_mul(4);
    match bytes.and_then(|b| holding(byte_address, b)) {
        Some(held) => {
            let at = (byte_address - sram_start) as usize;
            Ok((at..at + 4 * words as usize, held))
        }
        None => {
            for k in 0..words {
                let at = byte_address.checked_add(4 * k).unwrap_or(byte_address);
                if holding(at, 4).is_none() {
                    return Err(MemoryError {
                        tile,
                        byte_address: at,
                    });
                }
            }
            Err(MemoryError { tile, byte_address })
        }
    }
}

impl ExchangeMemory for Words<'_, '_> {
    fn read_word(&self, tile: TileId, byte_address: u32) -> Result<u32, MemoryError> {
        let range = self.word(tile, byte_address, &self.last_read)?;
        let word = self
            .images
            .get(tile.index())
            .and_then(|image| image.get(range))
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .ok_or(MemoryError { tile, byte_address })?;
        Ok(u32::from_le_bytes(word))
    }

    fn write_word(
        &mut self,
        tile: TileId,
        byte_address: u32,
        word: u32,
    ) -> Result<(), MemoryError> {
        let range = self.word(tile, byte_address, &self.last_write)?;
        self.images
            .get_mut(tile.index())
            .and_then(|image| image.get_mut(range))
            .ok_or(MemoryError { tile, byte_address })?
            .copy_from_slice(&word.to_le_bytes());
        Ok(())
    }

    /// Checks the copies' ranges, a chunk of copies at a time in
    /// parallel, then makes the chunk's copies one after another, each
    /// straight from its source image to its destination image: replay
    /// guarantees no copy reads what another writes and no word is written
    /// twice, so this is the sequential result, and each byte moves once
    /// (gathering everything first, to write tiles in parallel, moved
    /// every byte twice through a buffer the size of the phase). A failing
    /// copy stops the run with its error, the earlier copies made.
    fn copy_blocks(&mut self, copies: &[BlockCopy]) -> Result<(), MemoryError> {
        use rayon::prelude::*;
        /// Copies checked per parallel pass.
        const CHUNK: usize = 1 << 14;
        let (placed, sram_start) = (&self.shared.placed, self.shared.sram_start);
        for chunk in copies.chunks(CHUNK) {
            let ranges: Vec<Result<_, MemoryError>> = chunk
                .par_iter()
                .map(|c| {
                    Ok((
                        placed_words(placed, sram_start, c.source, c.source_address, c.words)?.0,
                        placed_words(placed, sram_start, c.dest, c.dest_address, c.words)?.0,
                    ))
                })
                .collect();
            for (c, checked) in chunk.iter().zip(ranges) {
                let (source, dest) = checked?;
                copy_between(self.images, c.source.index(), source, c.dest.index(), dest).ok_or(
                    MemoryError {
                        tile: c.dest,
                        byte_address: c.dest_address,
                    },
                )?;
            }
        }
        Ok(())
    }
}

/// Copies `images[s][source]` to `images[d][dest]` (ranges of equal
/// length), or `None` when a tile or range is missing.
fn copy_between(
    images: &mut [Vec<u8>],
    s: usize,
    source: std::ops::Range<usize>,
    d: usize,
    dest: std::ops::Range<usize>,
) -> Option<()> {
    if source.len() != dest.len() {
        return None;
    }
    if s == d {
        let image = images.get_mut(s)?;
        if source.end > image.len() || dest.end > image.len() {
            return None;
        }
        image.copy_within(source, dest.start);
        return Some(());
    }
    let high = s.max(d);
    if high >= images.len() {
        return None;
    }
    let (below, above) = images.split_at_mut(high);
    let (low, high) = (below.get_mut(s.min(d))?, above.first_mut()?);
    let (from, to) = if s < d { (&*low, high) } else { (&*high, low) };
    to.get_mut(dest)?.copy_from_slice(from.get(source)?);
    Some(())
}

/// One tile's image as its codelets see it during a compute step.
pub(super) struct TileView<'a, 'p> {
    pub(super) shared: &'a Shared<'p>,
    pub(super) subst: &'a HashMap<BufferId, BufferId>,
    pub(super) tile: TileId,
    pub(super) image: &'a mut Vec<u8>,
}

impl TileView<'_, '_> {
    /// Refuses an access to another tile's memory: the parallel run relies
    /// on each codelet touching only its own tile.
    fn own(&self, tile: TileId) -> Result<(), SimError> {
        if tile == self.tile {
            Ok(())
        } else {
            Err(SimError::ForeignTile {
                tile: self.tile,
                accessed: tile,
            })
        }
    }

    /// The image range of `bytes` bytes at operand `at`.
    fn locate(
        &self,
        tile: TileId,
        at: Operand,
        bytes: u64,
    ) -> Result<std::ops::Range<usize>, SimError> {
        self.own(tile)?;
        let address = self.shared.operand(self.subst, tile, at, bytes)?;
        self.shared.placed_range(tile, address, bytes)
    }
}

impl CodeletMemory for TileView<'_, '_> {
    fn precision(&self, _tile: TileId, buffer: BufferId) -> Result<Precision, SimError> {
        let b = self.shared.resolve(self.subst, buffer);
        Ok(self.shared.buffer(b)?.ty.precision())
    }

    fn read(&self, tile: TileId, at: Operand, bytes: u64) -> Result<Vec<u8>, SimError> {
        let range = self.locate(tile, at, bytes)?;
        let unplaced = || SimError::Unplaced {
            tile,
            address: 0,
            bytes,
        };
        Ok(self.image.get(range).ok_or_else(unplaced)?.to_vec())
    }

    fn extent(&self, tile: TileId, at: Operand, bytes: u64) -> Result<(), SimError> {
        self.locate(tile, at, bytes).map(|_| ())
    }

    fn f16_to_fp8(&self, output: Precision) -> Option<&[u8]> {
        self.shared.fp8_tables.get(&output).map(Vec::as_slice)
    }

    fn write(&mut self, tile: TileId, at: Operand, data: &[u8]) -> Result<(), SimError> {
        let range = self.locate(tile, at, data.len() as u64)?;
        let unplaced = SimError::Unplaced {
            tile,
            address: 0,
            bytes: data.len() as u64,
        };
        self.image
            .get_mut(range)
            .ok_or(unplaced)?
            .copy_from_slice(data);
        Ok(())
    }

    fn gemm(
        &mut self,
        tile: TileId,
        kernel: KernelId,
        entry: GemmEntry,
        rows: u32,
        left: Operand,
        right: Operand,
        output: Operand,
    ) -> Result<(), SimError> {
        self.own(tile)?;
        let shared = self.shared;
        let p = &shared.package.program;
        let index = usize::from(entry.large) * 2 + usize::from(entry.accumulate);
        let (Some(spec), Some(compiled), Some(programs)) = (
            p.kernels.get(kernel),
            shared.package.kernels.get(kernel.index()),
            shared.programs.get(kernel.index()),
        ) else {
            return Err(SimError::UnknownKernel {
                kernel,
                kernels: p.kernels.len().min(shared.package.kernels.len()),
            });
        };
        let program = programs
            .get(index)
            .and_then(Option::as_ref)
            .ok_or_else(|| SimError::NoKernelProgram {
                tile,
                kernel: compiled.name.clone(),
                entry: ENTRIES.get(index).copied().unwrap_or("unknown"),
            })?;
        // Every operand the kernel touches must lie in its placed range.
        let (r, k, c) = (
            u64::from(rows),
            u64::from(spec.inner),
            u64::from(spec.columns),
        );
        let bytes = |o: Operand, a: u64, b: u64| -> Result<u64, SimError> {
            let eb = self.precision(tile, o.buffer)?.element_bytes();
            // Products of two u32 values and an element size of at most 4
            // fit in u64 only up to a point: saturate, and the range check
            // refuses it.
            Ok(a.saturating_mul(b).saturating_mul(eb))
        };
        let args = KernelArgs {
            left: shared.operand(self.subst, tile, left, bytes(left, r, k)?)?,
            right: shared.operand(self.subst, tile, right, bytes(right, k, c)?)?,
            output: shared.operand(self.subst, tile, output, bytes(output, r, c)?)?,
        };
        emulate_prepared(
            program,
            self.image,
            shared.sram_start,
            &args,
            &EmulateOptions::default(),
        )
        .map_err(|source| SimError::Kernel {
            tile,
            kernel: compiled.name.clone(),
            source,
        })?;
        Ok(())
    }
}

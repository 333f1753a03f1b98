//! Structural validation of a package read from disk: what its files say
//! must agree with its own declarations and its target before anything
//! runs it. The digests only find damage; a package edited with its digests
//! recomputed is caught here or not at all.

use ipu_layout::TileId;

use super::Package;

/// One way a package contradicts itself or its target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The manifest's tile count is not one the target has.
    #[error("the manifest says {tiles} tiles; the target {target} has {available}")]
    TileCount {
        /// Tiles in the manifest.
        tiles: u32,
        /// The target's name.
        target: String,
        /// Tiles the target has.
        available: u32,
    },
    /// The manifest names another target than `target.toml`.
    #[error("the manifest names target {manifest}, target.toml describes {file}")]
    TargetName {
        /// The manifest's target name.
        manifest: String,
        /// `target.toml`'s.
        file: String,
    },
    /// Support memory is not given for every tile.
    #[error("support memory is given for {found} tiles, the package has {tiles}")]
    Support {
        /// Entries found.
        found: usize,
        /// Tiles of the package.
        tiles: u32,
    },
    /// Addresses are given for a different number of buffers than the
    /// program has.
    #[error("addresses are given for {found} buffers, the program has {buffers}")]
    AddressLists {
        /// Lists found.
        found: usize,
        /// Buffers of the program.
        buffers: usize,
    },
    /// A shard is placed on a tile the package does not have, or outside
    /// the tile's SRAM.
    #[error("{buffer} on {tile} at {address:#x} ({bytes} bytes) is outside tile memory")]
    ShardOutside {
        /// The buffer's name.
        buffer: String,
        /// The tile.
        tile: TileId,
        /// The address.
        address: u32,
        /// The bytes of the shard and its access tail.
        bytes: u64,
    },
    /// A buffer's shards are not listed in increasing tile order, once each.
    #[error("the addresses of {buffer} are not in increasing tile order")]
    AddressOrder {
        /// The buffer's name.
        buffer: String,
    },
    /// A phase's rows are not for the package's tile count.
    #[error("phase {phase} has rows for {found} tiles, the package has {tiles}")]
    RowTiles {
        /// The phase.
        phase: usize,
        /// Tiles with rows.
        found: u32,
        /// Tiles of the package.
        tiles: u32,
    },
}

impl Package {
    /// Every way the package contradicts itself or its target; empty when
    /// it is consistent.
    pub fn validate(&self) -> Vec<ValidationError> {
        let mut out = Vec::new();
        let tiles = self.manifest.tile_count;
        let target = &self.target;
        if tiles == 0 || tiles > target.tile_count() {
            out.push(ValidationError::TileCount {
                tiles,
                target: target.name().to_owned(),
                available: target.tile_count(),
            });
        }
        if self.manifest.target != target.name() {
            out.push(ValidationError::TargetName {
                manifest: self.manifest.target.clone(),
                file: target.name().to_owned(),
            });
        }
        if self.placement.support.len() != tiles as usize {
            out.push(ValidationError::Support {
                found: self.placement.support.len(),
                tiles,
            });
        }
        let addresses = &self.placement.addresses;
        if addresses.len() != self.program.buffers.len() {
            out.push(ValidationError::AddressLists {
                found: addresses.len(),
                buffers: self.program.buffers.len(),
            });
        }
        let memory = target.memory();
        for (id, b) in self.program.buffers.iter() {
            if addresses.of(id).windows(2).any(|w| w[0].0 >= w[1].0) {
                out.push(ValidationError::AddressOrder {
                    buffer: b.name.clone(),
                });
            }
            for &(tile, address) in addresses.of(id) {
                let tile = TileId::from_u32(tile);
                let bytes =
                    b.ty.shard_bytes(tile)
                        .unwrap_or(u64::MAX)
                        .saturating_add(u64::from(b.tail_bytes));
                let end = u64::from(address).saturating_add(bytes);
                if tile.as_u32() >= tiles
                    || address < memory.sram_start
                    || end > u64::from(memory.loader_limit)
                {
                    out.push(ValidationError::ShardOutside {
                        buffer: b.name.clone(),
                        tile,
                        address,
                        bytes,
                    });
                }
            }
        }
        for (phase, p) in self.phases.iter().enumerate() {
            if p.rows.tile_count() != tiles {
                out.push(ValidationError::RowTiles {
                    phase,
                    found: p.rows.tile_count(),
                    tiles,
                });
            }
        }
        out
    }
}

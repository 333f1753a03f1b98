//! Integration tests of ipu-layout: the seed log's shard vectors, serde and
//! Debug forms, ownership queries, and properties of redistributions.

mod numeric;
mod props;
mod vectors;

//! Image input shared by the vision families: decoding a file into 8-bit
//! RGB as transformers' processors do before they resize (`decode.rs`),
//! Pillow's `Image.resize` reproduced bit for bit (`resample.rs`), and the
//! built-in synthetic calibration images (`synthetic.rs`). What a family
//! does after the resize (rescale, normalise, cut into patches) is the
//! processor's (`crate::processor`).

mod decode;
mod resample;
pub mod synthetic;

pub use decode::{over_white, read_rgb8};
pub use resample::{Filter, Rgb8};
pub use synthetic::{SYNTHETIC_IMAGES, synthetic_image};

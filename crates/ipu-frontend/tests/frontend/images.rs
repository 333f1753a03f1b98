//! Images into the SigLIP graph: Pillow's resize reproduced exactly for
//! every convolution filter, transformers' pixel values reproduced bit for
//! bit, the documented patch order, and typed errors for a wrong image
//! count, an unreadable file, a file of the wrong kind and a wrong size.

use std::path::{Path, PathBuf};

use ipu_frontend::ImageError;
use ipu_frontend::imaging::{Filter, over_white, read_rgb8};
use ipu_frontend::siglip::{
    ImportConfig, PrecisionPolicy, Processor, ProcessorError, VisionConfig, VisionParams,
    import_checkpoint, patchify,
};

use crate::checkpoint::checkpoint_dir;

fn images() -> [PathBuf; 2] {
    [
        checkpoint_dir("images/rgb-40x30.png"),
        checkpoint_dir("images/rgba-13x11.png"),
    ]
}

/// Every tensor of a golden safetensors file, as raw bytes with shape.
fn golden(path: &Path) -> Vec<(String, Vec<usize>, safetensors::Dtype, Vec<u8>)> {
    let bytes = std::fs::read(path).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    let mut out: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.shape().to_vec(), v.dtype(), v.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn resizing_equals_pillow_for_every_filter() {
    let filters = [
        ("bicubic", Filter::Bicubic),
        ("bilinear", Filter::Bilinear),
        ("lanczos", Filter::Lanczos),
        ("box", Filter::Box),
        ("hamming", Filter::Hamming),
    ];
    let mut checked = 0;
    for (name, shape, dtype, data) in golden(&checkpoint_dir("resize.safetensors")) {
        assert_eq!(dtype, safetensors::Dtype::U8);
        // `<image>.rgb`: the decoded image in RGB (composited over white).
        if let Some(image) = name.strip_suffix(".rgb") {
            let ours = read_rgb8(&checkpoint_dir(&format!("images/{image}.png"))).expect("reads");
            assert_eq!(shape, [ours.height(), ours.width(), 3]);
            assert!(
                ours.pixels() == data.as_slice(),
                "{name} differs from Pillow"
            );
            checked += 1;
            continue;
        }
        // `<image>.<filter>.<size>`.
        let mut parts = name.rsplitn(3, '.');
        let size: usize = parts.next().expect("size").parse().expect("number");
        let filter_name = parts.next().expect("filter");
        let image = parts.next().expect("image");
        let filter = filters
            .iter()
            .find(|(n, _)| *n == filter_name)
            .expect("known filter")
            .1;
        assert_eq!(shape, [size, size, 3]);
        let source = read_rgb8(&checkpoint_dir(&format!("images/{image}.png"))).expect("reads");
        let resized = source.resize(size, size, filter);
        let differing = resized
            .pixels()
            .iter()
            .zip(&data)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(differing, 0, "{name}: {differing} bytes differ from Pillow");
        checked += 1;
    }
    // Two images, unresized and with five filters at two sizes.
    assert_eq!(checked, 2 + 20);
}

#[test]
fn compositing_over_white_equals_pillow_for_every_alpha_and_colour() {
    // Pillow's alpha_composite over opaque white, as its integer formula
    // gives it, against a plain rational reference: the result is within
    // one level of c·a/255 + 255·(1 − a/255), exact at a = 0 and 255.
    let mut rgba = Vec::new();
    for a in 0..=255u8 {
        for c in 0..=255u8 {
            rgba.extend_from_slice(&[c, c, c, a]);
        }
    }
    let out = over_white(&rgba);
    for (i, pixel) in out.chunks_exact(3).enumerate() {
        let (a, c) = ((i / 256) as f64, (i % 256) as f64);
        let exact = c * a / 255.0 + 255.0 * (1.0 - a / 255.0);
        assert!((f64::from(pixel[0]) - exact).abs() <= 1.0, "a {a} c {c}");
        if a == 0.0 {
            assert_eq!(pixel[0], 255);
        }
        if a == 255.0 {
            assert_eq!(f64::from(pixel[0]), c);
        }
    }
}

#[test]
fn pixel_values_equal_the_processor_bit_for_bit() {
    for name in ["siglip-vision-head", "siglip-full-nohead"] {
        let dir = checkpoint_dir(name);
        let config = ipu_frontend::siglip::read_config(&dir).expect("config");
        let processor = ipu_frontend::siglip::read_processor(&dir, &config).expect("processor");
        let golden = golden(&dir.join("golden.safetensors"));
        let (_, shape, _, data) = golden
            .iter()
            .find(|(n, ..)| n == "pixel_values")
            .expect("pixel_values");
        let side = config.image_size() as usize;
        assert_eq!(shape, &[2, 3, side, side]);
        let expected = f32s(data);
        let plane = 3 * side * side;
        for (b, path) in images().iter().enumerate() {
            let ours = processor.pixel_values(path).expect("preprocesses");
            let theirs = &expected[b * plane..(b + 1) * plane];
            let differing = ours
                .iter()
                .zip(theirs)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(differing, 0, "{name} image {b}: {differing} values differ");
        }
    }
}

#[test]
fn patches_follow_the_convolution_order() {
    // Image 9x9, patch 4: a 2x2 grid; the last row and column are not read.
    let config = VisionConfig::new(&VisionParams {
        hidden_size: 8,
        intermediate_size: 8,
        num_attention_heads: 2,
        num_hidden_layers: 1,
        image_size: 9,
        patch_size: 4,
        ..VisionParams::default()
    })
    .expect("valid");
    let side = 9;
    // Each pixel value encodes its (channel, row, column).
    let pixels: Vec<f32> = (0..3 * side * side).map(|i| i as f32).collect();
    let mut patches = Vec::new();
    patchify(&config, &pixels, &mut patches).expect("patchifies");
    assert_eq!(patches.len(), 4 * 3 * 16);
    for gy in 0..2 {
        for gx in 0..2 {
            for c in 0..3 {
                for ky in 0..4 {
                    for kx in 0..4 {
                        let t = gy * 2 + gx;
                        let k = c * 16 + ky * 4 + kx;
                        let pixel = (c * side + gy * 4 + ky) * side + gx * 4 + kx;
                        assert_eq!(patches[t * 48 + k], pixel as f32);
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    assert!(matches!(
        patchify(&config, &pixels[1..], &mut out),
        Err(ImageError::Internal { .. })
    ));
}

#[test]
fn image_errors_are_typed() {
    let dir = checkpoint_dir("siglip-vision-head");
    let checkpoint = import_checkpoint(
        &dir,
        &ImportConfig {
            batch: 2,
            policy: PrecisionPolicy::all_f32(),
            name: None,
        },
    )
    .expect("imports");
    let [rgb, rgba] = images();
    let input = checkpoint.input_values(&[&rgb, &rgba]).expect("two images");
    let patches = input.get(checkpoint.patches()).expect("patches");
    assert_eq!(patches.len(), 2 * 16 * 48);

    assert!(matches!(
        checkpoint.input_values(&[&rgb]),
        Err(ImageError::Count { batch: 2, found: 1 })
    ));
    let missing = dir.join("no-such-image.png");
    assert!(matches!(
        checkpoint.input_values(&[&rgb, &missing]),
        Err(ImageError::Read { .. })
    ));
    let not_an_image = dir.join("config.json");
    let err = checkpoint
        .input_values(&[&rgb, &not_an_image])
        .expect_err("a JSON file");
    assert!(matches!(err, ImageError::NotAnImage { .. }), "{err:?}");
    assert!(err.to_string().contains("config.json"), "{err}");

    // A PNG signature followed by garbage is an image that cannot be
    // decoded.
    let temp = tempfile::tempdir().expect("tempdir");
    let broken = temp.path().join("broken.png");
    std::fs::write(&broken, b"\x89PNG\r\n\x1a\n garbage").expect("write");
    assert!(matches!(
        checkpoint.input_values(&[&rgb, &broken]),
        Err(ImageError::Decode { .. })
    ));

    // Without a resize step the image must already have the model's size.
    let config = checkpoint.config();
    let processor = Processor::from_json(r#"{"do_resize": false}"#, config).expect("valid");
    assert!(matches!(
        processor.pixel_values(&rgb),
        Err(ImageError::Size {
            width: 40,
            height: 30,
            expected: 16,
            ..
        })
    ));
}

#[test]
fn processor_config_errors() {
    let config = VisionConfig::new(&VisionParams {
        image_size: 16,
        patch_size: 4,
        ..VisionParams::default()
    })
    .expect("valid");
    type Expect = fn(&ProcessorError) -> bool;
    let cases: [(&str, Expect); 6] = [
        (r#"{"size": {"height": 32, "width": 32}}"#, |e| {
            matches!(e, ProcessorError::Size { height: 32, .. })
        }),
        (r#"{"size": {"shortest_edge": 16}}"#, |e| {
            matches!(
                e,
                ProcessorError::SizeForm {
                    shortest_edge: false
                }
            )
        }),
        (r#"{"resample": 0}"#, |e| {
            matches!(e, ProcessorError::Resample { code: 0 })
        }),
        (r#"{"do_center_crop": true}"#, |e| {
            matches!(e, ProcessorError::Step { .. })
        }),
        (r#"{"image_std": [0.5, 0.0, 0.5]}"#, |e| {
            matches!(e, ProcessorError::Value { .. })
        }),
        (r#"{"image_mean": [0.5, 0.5]}"#, |e| {
            matches!(e, ProcessorError::Channels { found: 2, .. })
        }),
    ];
    for (text, expected) in cases {
        let err = Processor::from_json(text, &config).expect_err(text);
        assert!(expected(&err), "{text}: {err:?}");
        assert!(!err.to_string().is_empty());
    }
    // Defaults: a processor config that says nothing is SigLIP's.
    assert_eq!(
        Processor::from_json("{}", &config).expect("valid"),
        Processor::default_for(&config)
    );
}

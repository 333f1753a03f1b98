//! `--device FILE`: the tiny fixture builds and runs on the tile model on
//! both device descriptions under `device/`, every package records the
//! device it was built for, and the tile count is checked against the
//! device given.

use crate::support::{Sandbox, fixture};

fn device(name: &str) -> String {
    fixture(&format!("../device/{name}"))
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_tiny_fixture_builds_and_runs_on_both_devices() {
    let sandbox = Sandbox::new();
    for (file, name, tiles) in [
        ("ipu21.toml", "ipu21", "64"),
        ("ipu21-m64.toml", "ipu21-m64", "64"),
    ] {
        let out = sandbox.out(name);
        sandbox
            .build(
                &fixture("tiny-2l-h64.json"),
                tiles,
                &out,
                None,
                &["--device", &device(file)],
            )
            .succeeded();
        let inspected = sandbox.xtask(&["inspect-package", &out.to_string_lossy()]);
        inspected.succeeded();
        assert!(
            inspected.stdout.contains(&format!("target {name})")),
            "{}",
            inspected.describe()
        );
        let target = std::fs::read_to_string(out.join("target.toml")).expect("target.toml");
        assert!(target.contains(&format!("name = \"{name}\"")), "{target}");
        let run = sandbox.xtask(&["run-package", &out.to_string_lossy()]);
        run.succeeded();
        assert!(
            run.stdout.lines().any(|l| l.starts_with("result=pass ")),
            "{name}: {}",
            run.describe()
        );
    }
    // The two devices' packages differ: another memory map, fabric and AMP.
    let a = std::fs::read(sandbox.out("ipu21").join("placement.json")).expect("placement");
    let b = std::fs::read(sandbox.out("ipu21-m64").join("placement.json")).expect("placement");
    assert_ne!(a, b);
}

#[test]
fn tiles_beyond_the_given_device_are_refused() {
    let sandbox = Sandbox::new();
    let out = sandbox.out("too-many");
    sandbox
        .build(
            &fixture("tiny-2l-h64.json"),
            "65",
            &out,
            None,
            &["--device", &device("ipu21-m64.toml")],
        )
        .failed_with("the device ipu21-m64 has 64 tiles; give 1 to 64");
    assert!(!out.exists());
}

#[test]
fn a_bad_device_file_is_refused_naming_the_key() {
    let sandbox = Sandbox::new();
    let bad = sandbox.work().join("bad.toml");
    let text = std::fs::read_to_string(device("ipu21-m64.toml")).expect("the device file");
    std::fs::write(&bad, text.replace("partner_xor = 2", "partner_xor = 3")).expect("write");
    let out = sandbox.out("bad-device");
    sandbox
        .build(
            &fixture("tiny-2l-h64.json"),
            "16",
            &out,
            None,
            &["--device", &bad.to_string_lossy()],
        )
        .failed_with("exchange.partner_xor");
    sandbox
        .build(
            &fixture("tiny-2l-h64.json"),
            "16",
            &out,
            None,
            &["--device", "/nonexistent/device.toml"],
        )
        .failed_with("/nonexistent/device.toml");
    assert!(!out.exists());
}

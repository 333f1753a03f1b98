//! `profile` and `report`: the cycle estimate of a small package prints
//! its figures, and its HTML report is one self-contained file that a real
//! headless browser renders with every figure and without a console
//! message or error.
//!
//! The browser part needs Chromium (`apt-get install -y chromium`, or a
//! binary named by `$CHROMIUM`); without one it is skipped with a message
//! saying so, unless `IPU_REQUIRE_BROWSER=1` (which `.ci/run` sets where it
//! has Chromium), when a missing browser fails the test. The browser runs with no network services, a profile
//! directory of its own, and `--dump-dom`: the page's script writes what it
//! drew and every error it met into `#selfcheck`, and `--enable-logging`
//! puts every console message on stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::Sandbox;

#[test]
fn profile_prints_the_whole_model_per_layer_and_the_roofline() {
    let sandbox = Sandbox::new();
    let package = sandbox.good_package("tiny-2l-h64.json", "16", "tiny");
    let outcome = sandbox.xtask(&["profile", &package.to_string_lossy()]);
    outcome.succeeded();
    for expected in [
        "whole model: ",
        " items/s",
        "roofline ",
        "repeat encoder x2: ",
        "per op kind, whole run",
        "per op of one encoder iteration",
    ] {
        assert!(
            outcome.stdout.contains(expected),
            "{expected:?} missing:\n{}",
            outcome.stdout
        );
    }
    // Every entry program agrees with the kernel cost model.
    let line = outcome
        .stdout
        .lines()
        .find(|l| l.contains("AMP programs vs kernel cost model: "))
        .unwrap_or_else(|| panic!("no kernel check:\n{}", outcome.stdout));
    let counts: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        matches!(counts.as_slice(), [a, b] if a == b && *a > 0),
        "{line}"
    );
    sandbox
        .xtask(&["profile", &sandbox.out("absent").to_string_lossy()])
        .failed_with("absent/manifest.json");
}

/// A Chromium to test with: `$CHROMIUM`, else the first of the usual names
/// on `PATH`.
fn browser() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Runs the browser on `page` with `--dump-dom`: `(DOM, stderr)`. Fails the
/// test after a minute.
fn dump_dom(browser: &Path, page: &Path, profile_dir: &Path) -> (String, String) {
    let out = page.with_extension("dom");
    let err = page.with_extension("log");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("DOM file"))
        .stderr(std::fs::File::create(&err).expect("log file"))
        .spawn()
        .expect("the browser starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child
            .try_wait()
            .expect("the browser can be waited for")
            .is_some()
        {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the browser did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default(),
    )
}

/// The value of `attribute` on the `#selfcheck` element of a dumped DOM,
/// with HTML's entity escapes undone.
fn selfcheck_attribute(dom: &str, attribute: &str) -> Option<String> {
    let start = dom.find("<div id=\"selfcheck\"")?;
    let tag = &dom[start..start + dom[start..].find('>')?];
    let key = format!("{attribute}=\"");
    let from = tag.find(&key)? + key.len();
    let value = &tag[from..from + tag[from..].find('"')?];
    Some(
        value
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

#[test]
fn the_report_is_self_contained_and_renders_in_a_headless_browser() {
    let sandbox = Sandbox::new();
    let package = sandbox.good_package("tiny-2l-h64.json", "16", "tiny");
    let page = sandbox.out("report.html");
    let outcome = sandbox.xtask(&[
        "report",
        &package.to_string_lossy(),
        "--out",
        &page.to_string_lossy(),
    ]);
    outcome.succeeded();
    let html = std::fs::read_to_string(&page).expect("the report is written");
    // One file: no script, style, image or frame comes from elsewhere, and
    // the page forbids fetching anything.
    for forbidden in [
        "<script src",
        "<link",
        "<img",
        "<iframe",
        "@import",
        "url(",
        "https://",
    ] {
        assert!(
            !html.contains(forbidden),
            "the report contains {forbidden:?}"
        );
    }
    let without_svg_namespace = html.replace("http://www.w3.org/2000/svg", "");
    assert!(
        !without_svg_namespace.contains("http://"),
        "the report names a network address"
    );
    assert!(html.contains("default-src 'none'"), "no content policy");
    // A tile outside the package is refused before any work.
    sandbox
        .xtask(&[
            "report",
            &package.to_string_lossy(),
            "--out",
            &sandbox.out("other.html").to_string_lossy(),
            "--tile",
            "16",
        ])
        .failed_with("the package has 16 tiles");

    let Some(browser) = browser() else {
        assert!(
            std::env::var_os("IPU_REQUIRE_BROWSER").is_none_or(|v| v != "1"),
            "IPU_REQUIRE_BROWSER=1 but no Chromium found (apt-get install -y chromium, or set CHROMIUM)"
        );
        eprintln!(
            "SKIPPED the browser check: no Chromium found (apt-get install -y chromium, or set CHROMIUM)"
        );
        return;
    };
    let profile_dir = tempfile::tempdir().expect("a browser profile directory");
    let (dom, log) = dump_dom(&browser, &page, profile_dir.path());
    let status = selfcheck_attribute(&dom, "data-status");
    let problems = selfcheck_attribute(&dom, "data-problems");
    assert_eq!(
        status.as_deref(),
        Some("ok"),
        "the page did not finish rendering; problems: {problems:?}\nbrowser log:\n{log}"
    );
    assert_eq!(problems.as_deref(), Some("[]"));
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(
        console.is_empty(),
        "the page wrote to the console:\n{}",
        console.join("\n")
    );
    let figures: serde_json::Value =
        serde_json::from_str(&selfcheck_attribute(&dom, "data-figures").expect("figures"))
            .expect("figures are JSON");
    // Every figure has content: the step timeline, the tables, the memory
    // heatmap's pixels, the buffers, the phases and the kernels.
    for figure in [
        "cards",
        "timeline_rects",
        "step_rows",
        "op_rows",
        "opkind_rows",
        "codelet_rows",
        "heatmap_cells",
        "heatmap_coloured_pixels",
        "buffer_rows",
        "phase_bars",
        "kernel_rows",
    ] {
        let n = figures[figure].as_u64().unwrap_or(0);
        assert!(n > 0, "{figure} is empty: {figures}");
    }
    // The timeline has one bar per step of the profile.
    let profile: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(package.join("profile.json")).expect("profile.json"),
    )
    .expect("profile.json is JSON");
    let steps = profile["steps"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(figures["timeline_rects"].as_u64(), Some(steps));
    assert_eq!(figures["step_rows"].as_u64(), Some(steps));

    // The check can fail: a copy whose script logs and whose data does not
    // parse is caught on both counts.
    let broken = sandbox.out("broken.html");
    std::fs::write(
        &broken,
        html.replacen(
            "\"use strict\";",
            "\"use strict\"; console.log(\"noise\");",
            1,
        )
        .replacen(
            "JSON.parse(document.getElementById(\"report-data\").textContent)",
            "JSON.parse(\"{\")",
            1,
        ),
    )
    .expect("broken copy");
    let (dom, log) = dump_dom(&browser, &broken, profile_dir.path());
    assert_ne!(
        selfcheck_attribute(&dom, "data-status").as_deref(),
        Some("ok")
    );
    assert!(log.contains("CONSOLE"), "the console message is logged");
}

//! What the command-line tests share: a sandbox (a temporary working
//! directory and kernel cache), running the binary, and snapshots of
//! package directories with a readable difference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// `fixtures/<name>` at the workspace root.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(name)
}

/// A temporary directory: `work/` is where packages go, `cache/` the
/// kernel cache, so that a test neither reads nor fills the user's cache
/// and nothing it writes can land in the source tree.
#[derive(Debug)]
pub struct Sandbox {
    root: TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let root = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(root.path().join("work")).expect("work directory");
        Sandbox { root }
    }

    /// The directory packages are written into.
    pub fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    /// `work/<name>`.
    pub fn out(&self, name: &str) -> PathBuf {
        self.work().join(name)
    }

    /// The sandbox's kernel cache.
    pub fn cache(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    /// `xtask args...` run from the sandbox.
    pub fn xtask(&self, args: &[&str]) -> Outcome {
        // Only warnings and errors: the logs are not under test, and a
        // short stderr keeps a failure's message readable.
        self.xtask_logging(args, Some("warn"))
    }

    /// `xtask args...` run from the sandbox with `RUST_LOG` set to
    /// `rust_log`, or unset.
    pub fn xtask_logging(&self, args: &[&str], rust_log: Option<&str>) -> Outcome {
        let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
        command
            .args(args)
            .current_dir(self.root.path())
            .env_remove("RUST_BACKTRACE");
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let output = command.output().expect("the xtask binary runs");
        Outcome {
            args: args.join(" "),
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `build-package` of `fixture` on `tiles` tiles into `out`, with the
    /// sandbox's kernel cache (or `cache` if given) and `extra` arguments.
    pub fn build(
        &self,
        fixture: &Path,
        tiles: &str,
        out: &Path,
        cache: Option<&Path>,
        extra: &[&str],
    ) -> Outcome {
        self.build_logging(fixture, tiles, out, cache, extra, Some("warn"))
    }

    /// [`Sandbox::build`] with `RUST_LOG` set to `rust_log`, or unset.
    pub fn build_logging(
        &self,
        fixture: &Path,
        tiles: &str,
        out: &Path,
        cache: Option<&Path>,
        extra: &[&str],
        rust_log: Option<&str>,
    ) -> Outcome {
        let fixture = fixture.to_string_lossy();
        self.build_package(&["--fixture", &fixture], tiles, out, cache, extra, rust_log)
    }

    /// `build-package` of the checkpoint directory `dir` at `batch` on 16
    /// tiles into `out`, with the sandbox's kernel cache and `extra`
    /// arguments, logging as [`Sandbox::xtask`] does.
    pub fn build_checkpoint(&self, dir: &Path, batch: &str, out: &Path, extra: &[&str]) -> Outcome {
        self.build_checkpoint_logging(dir, batch, out, extra, Some("warn"))
    }

    /// [`Sandbox::build_checkpoint`] with `RUST_LOG` set to `rust_log`, or
    /// unset.
    pub fn build_checkpoint_logging(
        &self,
        dir: &Path,
        batch: &str,
        out: &Path,
        extra: &[&str],
        rust_log: Option<&str>,
    ) -> Outcome {
        let dir = dir.to_string_lossy();
        let source = ["--checkpoint", &dir, "--batch", batch];
        self.build_package(&source, "16", out, None, extra, rust_log)
    }

    /// `build-package` of what `source` names on `tiles` tiles into `out`,
    /// with the sandbox's kernel cache (or `cache`) and `extra` arguments.
    fn build_package(
        &self,
        source: &[&str],
        tiles: &str,
        out: &Path,
        cache: Option<&Path>,
        extra: &[&str],
        rust_log: Option<&str>,
    ) -> Outcome {
        let cache = cache.map_or_else(|| self.cache(), Path::to_owned);
        let out = out.to_string_lossy();
        let cache = cache.to_string_lossy();
        let mut args = vec!["build-package"];
        args.extend_from_slice(source);
        args.extend_from_slice(&["--tiles", tiles, "--out", &out, "--kernel-cache", &cache]);
        args.extend_from_slice(extra);
        self.xtask_logging(&args, rust_log)
    }

    /// Builds `fixture` on `tiles` tiles into `work/<name>` and returns its
    /// path; the build must succeed.
    pub fn good_package(&self, fixture_name: &str, tiles: &str, name: &str) -> PathBuf {
        let out = self.out(name);
        self.build(&fixture(fixture_name), tiles, &out, None, &[])
            .succeeded();
        assert!(
            out.join("manifest.json").is_file(),
            "no manifest in {out:?}"
        );
        out
    }
}

/// A finished command.
#[derive(Debug)]
pub struct Outcome {
    args: String,
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    /// The command, its status and its output, for a failure message.
    pub fn describe(&self) -> String {
        format!(
            "xtask {}\nstatus: {}\n--- stdout\n{}--- stderr\n{}",
            self.args, self.status, self.stdout, self.stderr
        )
    }

    /// Asserts a zero exit status.
    pub fn succeeded(&self) -> &Self {
        assert!(
            self.status.success(),
            "expected success:\n{}",
            self.describe()
        );
        self
    }

    /// Asserts the command failed the way a user should see it fail: a
    /// non-zero status (not a signal), an `error:` line on stderr that
    /// contains `needle`, and no panic.
    pub fn failed_with(&self, needle: &str) -> &Self {
        let code = self.status.code();
        assert!(
            matches!(code, Some(c) if c != 0),
            "expected a non-zero exit status:\n{}",
            self.describe()
        );
        // A panic exits with 101 and prints "panicked at"; either would
        // mean an unchecked path, whatever the message says.
        assert_ne!(
            code,
            Some(101),
            "exit status 101 (a panic):\n{}",
            self.describe()
        );
        assert!(
            !self.stderr.contains("panicked"),
            "the command panicked:\n{}",
            self.describe()
        );
        assert!(
            self.stderr
                .lines()
                .any(|l| l.starts_with("error:") && l.contains(needle)),
            "no `error:` line mentions {needle:?}:\n{}",
            self.describe()
        );
        self
    }
}

/// Every file under `dir` by its path relative to `dir` (with `/`), with
/// its bytes. Directories themselves are not entries; an empty directory
/// shows only through [`entries`].
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let mut children: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        children.sort();
        for path in children {
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("under the root");
                let key = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                let bytes = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
                out.insert(key, bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The names directly inside `dir`, sorted: what a failed build must not
/// add to (a package directory, a temporary sibling left behind).
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// How two snapshots differ, one line per file: only in one of them, a
/// different size, or the first differing byte with a little context.
/// Empty when they are identical.
pub fn differences(
    a_name: &str,
    a: &BTreeMap<String, Vec<u8>>,
    b_name: &str,
    b: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (file, x) in a {
        let Some(y) = b.get(file) else {
            out.push(format!("{file}: only in {a_name}"));
            continue;
        };
        if x == y {
            continue;
        }
        let at = x
            .iter()
            .zip(y)
            .position(|(p, q)| p != q)
            .unwrap_or(x.len().min(y.len()));
        let context = |bytes: &[u8]| {
            let start = at.saturating_sub(40);
            let end = (at + 40).min(bytes.len());
            String::from_utf8_lossy(&bytes[start..end])
                .escape_debug()
                .to_string()
        };
        out.push(format!(
            "{file}: {} bytes in {a_name}, {} in {b_name}; first difference at byte {at}\n  \
             {a_name}: …{}…\n  {b_name}: …{}…",
            x.len(),
            y.len(),
            context(x),
            context(y)
        ));
    }
    for file in b.keys().filter(|f| !a.contains_key(*f)) {
        out.push(format!("{file}: only in {b_name}"));
    }
    out
}

//! Logging for the tasks that build: tracing-subscriber's fmt layout on
//! stderr, `RUST_LOG` honoured (default `info`), text or JSON lines.
//!
//! On a terminal, a build phase (a `phase{phase=...}` span) that has run
//! for more than a second shows a one-line progress indicator with its
//! elapsed time; the line is cleared before any log line is written, so
//! logs stay intact. Nothing of it reaches a file or a pipe.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// Phases open now (innermost last) and whether a progress line is shown.
#[derive(Default)]
struct Progress {
    open: Vec<(Id, String, Instant)>,
    shown: bool,
}

type Shared = Arc<Mutex<Progress>>;

fn lock(p: &Shared) -> MutexGuard<'_, Progress> {
    // A poisoned lock only means a panic elsewhere; the state is still a
    // plain list, so keep using it.
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `phase` field of a span.
struct PhaseName(Option<String>);

impl Visit for PhaseName {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "phase" {
            self.0 = Some(value.to_owned());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "phase" {
            self.0 = Some(format!("{value:?}").trim_matches('"').to_owned());
        }
    }
}

/// Tracks `phase` spans for the indicator.
struct PhaseLayer(Shared);

/// A span's phase name, kept in its extensions between `new_span` and
/// `enter`.
struct PhaseTag(String);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for PhaseLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "phase" {
            return;
        }
        let mut name = PhaseName(None);
        attrs.record(&mut name);
        if let (Some(name), Some(span)) = (name.0, ctx.span(id)) {
            span.extensions_mut().insert(PhaseTag(name));
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(tag) = span.extensions().get::<PhaseTag>() {
            lock(&self.0)
                .open
                .push((id.clone(), tag.0.clone(), Instant::now()));
        }
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        let mut p = lock(&self.0);
        if let Some(i) = p.open.iter().rposition(|(open, _, _)| open == id) {
            p.open.remove(i);
        }
        // The last phase ended: clear the line before the summary prints.
        if p.open.is_empty() && p.shown {
            let _ = std::io::stderr().lock().write_all(b"\r\x1b[2K");
            p.shown = false;
        }
    }
}

/// Writes log lines to stderr, clearing the progress line first.
#[derive(Clone)]
struct ClearingStderr(Shared);

impl Write for ClearingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut p = lock(&self.0);
        let mut err = std::io::stderr().lock();
        if p.shown {
            err.write_all(b"\r\x1b[2K")?;
            p.shown = false;
        }
        err.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Redraws the indicator while a phase has been open for over a second.
fn tick(shared: Shared) {
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let mut p = lock(&shared);
        let line = p.open.last().and_then(|(_, name, since)| {
            let elapsed = since.elapsed();
            (elapsed >= Duration::from_secs(1))
                .then(|| format!("  {name} … {:.1} s", elapsed.as_secs_f64()))
        });
        let mut err = std::io::stderr().lock();
        // Write errors on a terminal are not worth failing a build for.
        match line {
            Some(line) => {
                let _ = write!(err, "\r\x1b[2K{line}");
                p.shown = true;
            }
            None if p.shown => {
                let _ = write!(err, "\r\x1b[2K");
                p.shown = false;
            }
            None => {}
        }
        let _ = err.flush();
    }
}

/// Installs the global subscriber; a second call does nothing.
pub fn init(format: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let shared: Shared = Arc::default();
    let writer = {
        let shared = shared.clone();
        move || ClearingStderr(shared.clone())
    };
    let registry = tracing_subscriber::registry().with(filter);
    let installed = if format == "json" {
        registry
            .with(tracing_subscriber::fmt::layer().json().with_writer(writer))
            .with(terminal.then(|| PhaseLayer(shared.clone())))
            .try_init()
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(terminal)
                    .with_writer(writer),
            )
            .with(terminal.then(|| PhaseLayer(shared.clone())))
            .try_init()
    };
    if installed.is_ok() && terminal {
        std::thread::spawn(move || tick(shared));
    }
}

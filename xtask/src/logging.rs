//! Logging for every task: the global options `-v`/`--verbose`,
//! `-q`/`--quiet` and `--log-format`, tracing-subscriber's fmt layout on
//! stderr (text or JSON lines), `RUST_LOG` honoured.
//!
//! By default only warnings and errors are logged: a task's own summary
//! lines are printed, not logged, so a plain build shows its summary, its
//! warnings and its errors. `-v` brings back the events (`info`: every
//! build phase, placement and schedule), `-vv` debug, `-vvv` trace;
//! without `-v` or `-q`, `RUST_LOG` chooses (e.g. `RUST_LOG=info`, or
//! per crate `RUST_LOG=ipu_exchange=debug`). `-q` logs errors only and
//! turns the progress line off.
//!
//! On a terminal the progress line (`progress`) follows the build's
//! phases (the `phase{phase=...}` spans, watched by a layer of their own
//! whatever the log level) and is cleared before every log line.

use clap::ArgAction;
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{LevelFilter, filter_fn};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::progress;

/// The logging options every task takes.
#[derive(clap::Args, Debug, Clone, Copy)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log more: -v the build's events (info), -vv debug, -vvv trace
    /// [default: warnings and errors, or what RUST_LOG says]
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    /// Log errors only, and show no progress line
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// How log events are written on stderr
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

/// The layout of log lines.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// tracing-subscriber's text layout.
    Text,
    /// One JSON object a line.
    Json,
}

impl LogArgs {
    /// The filter of log events these options ask for.
    fn filter(&self) -> EnvFilter {
        let level = match (self.quiet, self.verbose) {
            (true, _) => LevelFilter::ERROR,
            (false, 0) => {
                return EnvFilter::builder()
                    .with_default_directive(LevelFilter::WARN.into())
                    .from_env_lossy();
            }
            (false, 1) => LevelFilter::INFO,
            (false, 2) => LevelFilter::DEBUG,
            (false, _) => LevelFilter::TRACE,
        };
        EnvFilter::default().add_directive(level.into())
    }
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

/// Tells the progress line of `phase` spans entered and left.
struct PhaseLayer;

/// A span's phase name, kept in its extensions between `new_span` and
/// `enter`.
struct PhaseTag(String);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for PhaseLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut name = PhaseName(None);
        attrs.record(&mut name);
        if let (Some(name), Some(span)) = (name.0, ctx.span(id)) {
            span.extensions_mut().insert(PhaseTag(name));
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(tag) = span.extensions().get::<PhaseTag>() {
            progress::span_entered(id, &tag.0);
        }
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        progress::span_exited(id);
    }
}

/// Writes log lines to stderr, clearing the progress line first.
struct ClearingStderr;

impl std::io::Write for ClearingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        progress::write_clearing(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::Write::flush(&mut std::io::stderr())
    }
}

/// Installs the global subscriber and, on a terminal without `--quiet`,
/// the progress line; a second call does nothing.
pub fn init(args: &LogArgs) {
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let show_progress = terminal && !args.quiet;
    let events = match args.log_format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(|| ClearingStderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(terminal)
            .with_writer(|| ClearingStderr)
            .boxed(),
    };
    // The phase spans reach the progress layer whatever the log level;
    // no event does, so events the filter turns off cost nothing.
    let phases = show_progress
        .then(|| PhaseLayer.with_filter(filter_fn(|m| m.is_span() && m.name() == "phase")));
    let installed = tracing_subscriber::registry()
        .with(events.with_filter(args.filter()))
        .with(phases)
        .try_init();
    if installed.is_ok() && show_progress {
        progress::enable();
    }
}

//! Logging for the tasks that build: tracing-subscriber's fmt layout on
//! stderr, `RUST_LOG` honoured (default `info`), text or JSON lines.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call does nothing.
pub fn init(format: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

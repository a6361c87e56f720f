//! One log set-up for `sluice-reader` and `sluice-operator`, so a log pipeline parses both with
//! one rule: JSON lines of one shape for clusters, `tracing`'s text format for people.
//!
//! Why a crate of its own: the shape is a contract with whatever collects the logs, and two copies
//! of a formatter drift apart; both binaries already depend on `tracing-subscriber`, so this adds
//! no third-party code.

#![forbid(unsafe_code)]

pub mod capture;
mod flat_json;
mod process;

use std::io::IsTerminal;

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::JsonFields;
use tracing_subscriber::util::SubscriberInitExt;

pub use flat_json::{FlatJson, HEAD};
pub use process::ProcessFields;
pub use tracing_subscriber::EnvFilter;

#[cfg(test)]
mod tests;

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object a line (see [`FlatJson`]).
    Json,
    /// `tracing`'s human format, colored on a terminal.
    Text,
}

/// Install the global subscriber: `RUST_LOG` filters, else `default_filter`. The returned
/// [`ProcessFields`] adds fields every JSON line carries once the process knows them (the
/// reader's source and namespace, read after logging starts so a bad config is logged too).
pub fn init(format: Format, default_filter: &str) -> Result<ProcessFields, String> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let process = ProcessFields::default();
    let result = match format {
        Format::Json => json_subscriber(filter, std::io::stderr, process.clone()).try_init(),
        Format::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .finish()
            .try_init(),
    };
    result.map_err(|e| format!("cannot set up logging: {e}"))?;
    Ok(process)
}

/// The JSON subscriber `init` installs, writing to `writer` (tests pass a buffer).
pub fn json_subscriber<W>(
    filter: EnvFilter,
    writer: W,
    process: ProcessFields,
) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .fmt_fields(JsonFields::new())
        .event_format(FlatJson::new(process))
        .finish()
}

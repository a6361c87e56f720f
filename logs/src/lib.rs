//! One log set-up for `sluice-reader` and `sluice-operator`, so a log pipeline parses both with
//! one rule: JSON lines of one shape for clusters, `tracing`'s text format for people.
//!
//! Why a crate of its own: the shape is a contract with whatever collects the logs, and two copies
//! of a formatter drift apart. The optional OTLP export of spans (feature `otlp`) lives here too:
//! it is one more layer of the same subscriber, set up from the same flags in both binaries.

#![forbid(unsafe_code)]

pub mod capture;
mod flat_json;
#[cfg(feature = "listen")]
pub mod listen;
#[cfg(feature = "otlp")]
mod otlp;
#[cfg(not(feature = "otlp"))]
#[path = "otlp_off.rs"]
mod otlp;
mod otlp_args;
mod process;

use std::io::IsTerminal;

use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::JsonFields;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

pub use flat_json::{FlatJson, HEAD};
pub use otlp::{Export, continue_trace, export_failures, exporting, on_export_failure};
pub use otlp_args::OtlpArgs;
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

/// What a binary tells [`init`] about span export.
pub struct Spans<'a> {
    pub otlp: &'a OtlpArgs,
    /// `service.name` when `OTEL_SERVICE_NAME` and `--otlp-service-name` are unset.
    pub service: &'a str,
    /// Long-lived spans not to export (see the `otlp` module).
    pub not_exported: &'static [&'static str],
}

/// What [`init`] set up: the process's log fields, and the span export if one was asked for.
pub struct Telemetry {
    pub process: ProcessFields,
    pub export: Option<Export>,
}

impl Telemetry {
    /// Flush exported spans (the end of a drain); nothing to do without export.
    pub async fn shutdown(self) {
        if let Some(export) = self.export {
            export.shutdown().await;
        }
    }
}

/// kube's client logs every failed request at ERROR with the bare transport error ("failed with
/// error client error (Connect)"), four lines a second per poller through an API server outage,
/// while the caller says what failed and what it does about it in a WARN line of its own: that
/// line is silenced unless `filter_text` (RUST_LOG, else the default) names `kube_client`.
fn quiet_kube_requests(filter: EnvFilter, filter_text: &str) -> EnvFilter {
    if filter_text.contains("kube_client") {
        return filter;
    }
    match "kube_client::client::builder=off".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// Install the global subscriber: `RUST_LOG` filters, else `default_filter`; spans are exported
/// over OTLP when `spans.otlp` names an endpoint. [`Telemetry::process`] adds fields every JSON
/// line carries once the process knows them (the reader's source and namespace, read after
/// logging starts so a bad config is logged too).
pub fn init(format: Format, default_filter: &str, spans: &Spans<'_>) -> Result<Telemetry, String> {
    let filter = quiet_kube_requests(
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter)),
        &std::env::var("RUST_LOG").unwrap_or_else(|_| default_filter.to_owned()),
    );
    let process = ProcessFields::default();
    let fmt: Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync> = match format {
        Format::Json => json_layer(std::io::stderr, process.clone()).boxed(),
        Format::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
    };
    let mut layers = vec![fmt];
    let export = match Export::start(spans.otlp, spans.service, &process, spans.not_exported)? {
        Some((export, layer)) => {
            layers.push(layer);
            Some(export)
        }
        None => None,
    };
    tracing_subscriber::registry()
        .with(layers)
        .with(filter)
        .try_init()
        .map_err(|e| format!("cannot set up logging: {e}"))?;
    Ok(Telemetry { process, export })
}

/// The JSON subscriber `init` installs (without span export), writing to `writer` (tests pass a
/// buffer).
pub fn json_subscriber<W>(
    filter: EnvFilter,
    writer: W,
    process: ProcessFields,
) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::registry().with(json_layer(writer, process)).with(filter)
}

/// The JSON lines layer, writing to `writer`.
fn json_layer<S, W>(writer: W, process: ProcessFields) -> impl Layer<S> + Send + Sync
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false)
        .fmt_fields(JsonFields::new())
        .event_format(FlatJson::new(process))
}

//! Export of spans over OTLP/HTTP (protobuf), on when a binary is given an endpoint.
//!
//! What is exported: the binaries' own spans (targets `sluice*`), not those of the libraries
//! under them (the AWS SDK, kube), with their fields as attributes and the events logged inside
//! them. A span that continues a message's trace ([`continue_trace`]) is a child of the
//! producer's span, so the trace joins the producer's. Long-lived spans a binary names (the
//! reader's poller span, open for the process's whole life) are left out: a span is exported
//! when it closes, and everything under it would wait for a parent that arrives at shutdown.
//!
//! Cost: spans are queued in memory (bounded: full means dropped, never waited for) and sent by
//! the SDK's batch thread every few seconds; a slow or absent collector costs that thread, not
//! the data path. The queue is flushed when [`Export::shutdown`] runs at the end of a drain.

mod client;
mod exporter;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::Registry;

use crate::ProcessFields;
use crate::otlp_args::OtlpArgs;

pub use exporter::{export_failures, on_export_failure};

/// How long a shutdown waits for the last spans to be sent.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are being exported: code that makes spans only for export (one per message)
/// asks first, so a process without an endpoint pays nothing for them.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Make `span` a child of the remote span a W3C `traceparent` names. Call it before the span is
/// first entered. Without export, or with an unparsable value, nothing happens.
pub fn continue_trace(span: &Span, traceparent: &str) {
    if !exporting() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Traceparent(traceparent));
    let _ = span.set_parent(parent);
}

/// A carrier holding only a `traceparent` header.
struct Traceparent<'a>(&'a str);

impl Extractor for Traceparent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        key.eq_ignore_ascii_case("traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

/// The running export; [`Export::shutdown`] flushes it.
pub struct Export {
    provider: SdkTracerProvider,
}

/// The layer the subscriber gets when exporting.
pub type OtelLayer = Box<dyn Layer<Registry> + Send + Sync>;

impl Export {
    /// Start exporting when `args` name an endpoint: `Ok(None)` when they do not. Spans named in
    /// `not_exported` are left out (see the module documentation). Needs a tokio runtime.
    pub fn start(
        args: &OtlpArgs,
        default_service: &str,
        process: &ProcessFields,
        not_exported: &'static [&'static str],
    ) -> Result<Option<(Export, OtelLayer)>, String> {
        let Some(endpoint) = args.endpoint() else { return Ok(None) };
        let url = traces_url(endpoint);
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "OTLP export needs the async runtime, and it is not running".to_owned())?;
        let last_error = client::LastError::default();
        let otlp = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client::OnRuntime::new(runtime, last_error.clone())?)
            .with_endpoint(url.clone())
            .build()
            .map_err(|e| format!("cannot set up OTLP export to {url} (--otlp-endpoint): {e}"))?;
        let counted = exporter::Counted::new(otlp, url, process.clone(), last_error);
        let service =
            args.service_name.as_deref().filter(|s| !s.trim().is_empty()).unwrap_or(default_service);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(counted).build())
            .with_resource(Resource::builder().with_service_name(service.to_owned()).build())
            .build();
        let tracer = provider.tracer("sluice");
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(filter_fn(move |meta| {
                meta.target().starts_with("sluice")
                    && !(meta.is_span() && not_exported.contains(&meta.name()))
            }))
            .boxed();
        EXPORTING.store(true, Ordering::Relaxed);
        Ok(Some((Export { provider }, layer)))
    }

    /// Send what is queued and stop the batch thread, waiting at most a few seconds. Runs the
    /// blocking part off the runtime, whose workers the last export still needs.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT)).await;
        if let Ok(Err(e)) = done {
            tracing::warn!("OTLP span export did not flush at shutdown: {e}");
        }
        EXPORTING.store(false, Ordering::Relaxed);
    }
}

/// The URL spans are POSTed to: the OTLP specification's rule for the generic endpoint variable
/// (`<base>/v1/traces`), unless the URL already names the traces path.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") { base.to_owned() } else { format!("{base}/v1/traces") }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
    }
}

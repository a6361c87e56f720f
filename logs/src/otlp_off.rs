//! Built without the `otlp` feature: the same interface, exporting nothing; an endpoint is an
//! error rather than silently ignored.

use tracing::Span;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::Registry;

use crate::ProcessFields;
use crate::otlp_args::OtlpArgs;

pub type OtelLayer = Box<dyn Layer<Registry> + Send + Sync>;

pub struct Export;

impl Export {
    pub fn start(
        args: &OtlpArgs,
        _default_service: &str,
        _process: &ProcessFields,
        _not_exported: &'static [&'static str],
    ) -> Result<Option<(Export, OtelLayer)>, String> {
        match args.endpoint() {
            Some(endpoint) => Err(format!(
                "--otlp-endpoint {endpoint}: this build has no OTLP export; build with the `otlp` feature \
                 or unset the flag and OTEL_EXPORTER_OTLP_ENDPOINT"
            )),
            None => Ok(None),
        }
    }

    pub async fn shutdown(self) {}
}

pub fn exporting() -> bool {
    false
}

pub fn continue_trace(_span: &Span, _traceparent: &str) {}

pub fn export_failures() -> u64 {
    0
}

pub fn on_export_failure(_hook: impl Fn() + Send + Sync + 'static) {}

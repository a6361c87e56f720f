//! The command-line flags for OTLP export, the same in both binaries.

/// Where spans go, if anywhere. Without an endpoint nothing is set up: no exporter thread, no
/// OpenTelemetry layer, no per-message spans.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct OtlpArgs {
    /// OTLP/HTTP collector base URL (e.g. http://otel-collector:4318): spans are POSTed as
    /// protobuf to <URL>/v1/traces. Unset: no export.
    #[arg(long = "otlp-endpoint", env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub endpoint: Option<String>,
    /// `service.name` of the exported spans (default: the binary's name).
    #[arg(long = "otlp-service-name", env = "OTEL_SERVICE_NAME", value_name = "NAME")]
    pub service_name: Option<String>,
}

impl OtlpArgs {
    /// The endpoint, when one is given and not blank.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref().map(str::trim).filter(|e| !e.is_empty())
    }
}

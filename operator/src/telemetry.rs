//! Structured logs through `tracing`, in the reader's shape (`sluice-logs`): flat JSON lines for
//! clusters, with the `source` and `namespace` of the reconcile, scaler tick or checkpoint step
//! they belong to (spans); text for people. `RUST_LOG` filters; the default keeps kube's and
//! the AWS SDK's chatter down. With `--otlp-endpoint` those spans are also exported over OTLP.

use sluice_logs::{OtlpArgs, Spans, Telemetry};

use crate::cli::LogFormat;

pub const DEFAULT_FILTER: &str = "info,kube=warn,aws_config=warn,aws_smithy_runtime=warn";

/// `service.name` of exported spans unless `OTEL_SERVICE_NAME` says otherwise.
pub const SERVICE_NAME: &str = "sluice-operator";

pub fn init(format: LogFormat, otlp: &OtlpArgs) -> Result<Telemetry, String> {
    let format = match format {
        LogFormat::Json => sluice_logs::Format::Json,
        LogFormat::Text => sluice_logs::Format::Text,
    };
    // Every operator span ends with its reconcile, tick or step: none is long-lived.
    let spans = Spans { otlp, service: SERVICE_NAME, not_exported: &[] };
    // No process fields: `namespace` on an operator line is the namespace of the source it is
    // about (a span's field), not the operator's own.
    sluice_logs::init(format, DEFAULT_FILTER, &spans)
}

#[cfg(test)]
mod tests {
    use sluice_logs::EnvFilter;
    use sluice_logs::capture::Captured;

    use super::DEFAULT_FILTER;

    /// The operator's JSON lines have the reader's head keys, and a line logged inside a
    /// per-source span (reconcile, scaler, checkpoint step) names the source and namespace.
    #[test]
    fn lines_have_the_reader_shape_and_name_the_source() {
        let out = Captured::default();
        let filter = EnvFilter::new(DEFAULT_FILTER);
        let subscriber = sluice_logs::json_subscriber(filter, out.clone(), Default::default());
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("checkpoint_step", source = "orders", namespace = "shop");
            let _step = span.enter();
            tracing::warn!(error = "409 Conflict", "checkpoint step failed");
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{}", out.text());
        let line = lines[0].as_object().expect("an object");
        for key in sluice_logs::HEAD.iter().chain(&["message"]) {
            assert!(line.get(*key).is_some_and(serde_json::Value::is_string), "{key}: {}", out.text());
        }
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["target"], "sluice_operator::telemetry::tests");
        assert_eq!(line["source"], "orders");
        assert_eq!(line["namespace"], "shop");
        assert_eq!(line["error"], "409 Conflict");
    }
}

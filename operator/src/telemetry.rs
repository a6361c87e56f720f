//! Structured logs through `tracing`: JSON for clusters (one object a line, fields kept), text
//! for people. `RUST_LOG` filters; the default keeps kube's and the AWS SDK's chatter down.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

const DEFAULT_FILTER: &str = "info,kube=warn,aws_config=warn,aws_smithy_runtime=warn";

pub fn init(format: LogFormat) -> Result<(), String> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| e.to_string())
}

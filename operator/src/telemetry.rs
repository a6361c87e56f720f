//! Structured logs through `tracing`, in the reader's shape (`sluice-logs`): flat JSON lines for
//! clusters, with the `source` and `namespace` of the reconcile, scaler tick or checkpoint step
//! they belong to (spans); text for people. `RUST_LOG` filters; the default keeps kube's and
//! the AWS SDK's chatter down.

use crate::cli::LogFormat;

pub const DEFAULT_FILTER: &str = "info,kube=warn,aws_config=warn,aws_smithy_runtime=warn";

pub fn init(format: LogFormat) -> Result<(), String> {
    let format = match format {
        LogFormat::Json => sluice_logs::Format::Json,
        LogFormat::Text => sluice_logs::Format::Text,
    };
    sluice_logs::init(format, DEFAULT_FILTER).map(|_process| ())
}

//! The command line. The harness, the operator's pod template and the tests rely on these flags
//! and their defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use sluice_crds::SqsSource;

use super::options::{Coordination, Options};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CoordinationArg {
    Standalone,
    Kubernetes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Sluice reader: moves messages from Amazon SQS to sinks, deleting only what is safely delivered.
#[derive(Debug, Parser)]
#[command(
    name = "sluice-reader",
    version,
    after_help = "Exit codes:\n  0  clean stop (SIGTERM or SIGINT, drained)\n  1  anything else (a crash, the admin port taken)\n  2  configuration the user must edit; the message names the field\n  3  stopped by failOnError (a rejected message; it stays in the source queue)\nAn unreachable endpoint is an outage, not a configuration error: the reader retries it with backoff\nwhile /readyz answers 503."
)]
pub struct Args {
    /// SqsSource YAML (apiVersion/kind/metadata/spec) to run.
    #[arg(long, env = "SLUICE_SOURCE_FILE")]
    pub source: PathBuf,

    /// `standalone` runs with no cluster; `kubernetes` coordinates epochs through ConfigMaps.
    #[arg(long, env = "SLUICE_COORDINATION", value_enum, default_value = "standalone")]
    pub coordination: CoordinationArg,

    /// Address of the admin server (/metrics, /healthz, /readyz); port 0 picks a free one.
    #[arg(long, env = "SLUICE_ADMIN_ADDR", default_value = "[::]:9090")]
    pub admin_addr: String,

    /// Also write the bound admin address to this file.
    #[arg(long)]
    pub admin_addr_file: Option<PathBuf>,

    /// After SIGTERM: finish or release in-flight work within this many seconds, then exit.
    #[arg(long, default_value_t = 20)]
    pub shutdown_deadline_seconds: u64,

    /// /readyz answers 503 while deliveries fail and none has succeeded for this many seconds.
    /// Default: the source's spec.delivery.unreadyAfterSeconds (60 unless set there).
    #[arg(long)]
    pub unready_after_seconds: Option<u64>,

    /// Log format on stderr (filter with RUST_LOG).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub otlp: sluice_logs::OtlpArgs,
}

impl Args {
    /// The options for running `source`: a flag left out takes the value the spec gives.
    pub fn options(&self, source: &SqsSource) -> Options {
        let unready_after_seconds = self
            .unready_after_seconds
            .unwrap_or_else(|| u64::from(source.spec.delivery.unready_after_seconds));
        let reader_id = std::env::var("POD_NAME")
            .ok()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("standalone-{}", std::process::id()));
        Options {
            admin_addr: self.admin_addr.clone(),
            admin_addr_file: self.admin_addr_file.clone(),
            shutdown_deadline: Duration::from_secs(self.shutdown_deadline_seconds),
            unready_after: Duration::from_secs(unready_after_seconds),
            reader_id,
            coordination: match self.coordination {
                CoordinationArg::Standalone => Coordination::Standalone,
                CoordinationArg::Kubernetes => Coordination::Kubernetes,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(delivery: &str) -> SqsSource {
        let yaml = format!(
            "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata: {{name: s}}\nspec:\n  \
             queues: [{{url: 'http://127.0.0.1:4566/queue/us-east-1/000000000000/q'}}]\n  \
             sinks: [{{name: out, log: {{}}}}]\n{delivery}"
        );
        match sluice_crds::validate::parse_source_yaml(&yaml) {
            Ok(source) => source,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn defaults_follow_the_contract() {
        let args = Args::try_parse_from(["sluice-reader", "--source", "s.yaml"]).unwrap();
        assert_eq!(args.coordination, CoordinationArg::Standalone);
        assert_eq!(args.admin_addr, "[::]:9090");
        assert_eq!(args.shutdown_deadline_seconds, 20);
        assert_eq!(args.log_format, LogFormat::Text);
        let options = args.options(&source(""));
        assert_eq!(options.shutdown_deadline, Duration::from_secs(20));
        assert_eq!(options.unready_after, Duration::from_secs(60));
        assert_eq!(options.coordination, Coordination::Standalone);
    }

    #[test]
    fn every_flag_parses() {
        let args = Args::try_parse_from([
            "sluice-reader",
            "--source=/etc/sluice/source.yaml",
            "--coordination=kubernetes",
            "--admin-addr=127.0.0.1:0",
            "--admin-addr-file=/tmp/a",
            "--shutdown-deadline-seconds=5",
            "--log-format=json",
        ])
        .unwrap();
        assert_eq!(args.coordination, CoordinationArg::Kubernetes);
        assert_eq!(args.admin_addr_file, Some(PathBuf::from("/tmp/a")));
        assert_eq!(args.log_format, LogFormat::Json);
        assert!(Args::try_parse_from(["sluice-reader"]).is_err(), "--source is required");
    }

    #[test]
    fn the_unready_time_comes_from_the_spec_unless_the_flag_says_otherwise() {
        let spec = source("  delivery: {unreadyAfterSeconds: 7}\n");
        let args = Args::try_parse_from(["sluice-reader", "--source", "s.yaml"]).unwrap();
        assert_eq!(args.options(&spec).unready_after, Duration::from_secs(7));
        let args = Args::try_parse_from(["sluice-reader", "--source", "s.yaml", "--unready-after-seconds=3"])
            .unwrap();
        assert_eq!(args.options(&spec).unready_after, Duration::from_secs(3));
    }
}

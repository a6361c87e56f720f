//! The operator's command line. Every flag also reads an environment variable, so the Deployment
//! in `deploy/` can set them with the downward API.

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

#[derive(Clone, Debug, Parser)]
#[command(name = "sluice-operator", version, about = "Runs SqsSources as reader Deployments")]
pub struct Cli {
    /// Reader image for sources whose spec.reader.image is unset.
    #[arg(long, env = "SLUICE_READER_IMAGE")]
    pub reader_image: Option<String>,
    /// Serve only this namespace; all namespaces when absent.
    #[arg(long, env = "SLUICE_NAMESPACE")]
    pub namespace: Option<String>,
    /// Address of the admin server (/metrics, /healthz, /readyz).
    #[arg(long, env = "SLUICE_ADMIN_ADDR", default_value = "[::]:8080")]
    pub admin_addr: SocketAddr,
    /// Hold a Lease before acting, so that only one of several replicas writes.
    #[arg(long, env = "SLUICE_LEADER_ELECTION", value_enum, default_value = "on")]
    pub leader_election: Switch,
    /// Name of the Lease.
    #[arg(long, env = "SLUICE_LEASE_NAME", default_value = "sluice-operator")]
    pub lease_name: String,
    /// Namespace of the Lease: the operator's own.
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's identity in the Lease: its pod name.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Sources reconciled at once. Raise it for thousands of sources when the API server has
    /// room; lower it when API priority and fairness throttles the operator (docs/scaling.md).
    #[arg(long, env = "SLUICE_RECONCILES_AT_ONCE", default_value_t = crate::controller::RECONCILES_AT_ONCE, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub reconciles_at_once: u16,
    /// Sources whose autoscaler interval (queue read, decision, writes) runs at once.
    #[arg(long, env = "SLUICE_SCALER_INTERVALS_AT_ONCE", default_value_t = crate::scaler::task::TICKS_AT_ONCE, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub scaler_intervals_at_once: u16,
    /// Log output: json for clusters (one object a line), text for people.
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub otlp: sluice_logs::OtlpArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_flags() {
        let cli = Cli::try_parse_from(["sluice-operator"]);
        let Ok(cli) = cli else { panic!("{cli:?}") };
        assert_eq!(cli.leader_election, Switch::On);
        assert_eq!(cli.admin_addr.port(), 8080);
        assert_eq!((cli.reconciles_at_once, cli.scaler_intervals_at_once), (8, 16));
        let cli = Cli::try_parse_from([
            "sluice-operator",
            "--reader-image",
            "img:1",
            "--namespace",
            "team-a",
            "--leader-election",
            "off",
            "--log-format",
            "json",
            "--admin-addr",
            "127.0.0.1:0",
            "--reconciles-at-once",
            "32",
            "--scaler-intervals-at-once",
            "64",
        ]);
        let Ok(cli) = cli else { panic!("{cli:?}") };
        assert_eq!(cli.reader_image.as_deref(), Some("img:1"));
        assert_eq!(cli.namespace.as_deref(), Some("team-a"));
        assert_eq!(cli.leader_election, Switch::Off);
        assert_eq!(cli.log_format, LogFormat::Json);
        assert_eq!((cli.reconciles_at_once, cli.scaler_intervals_at_once), (32, 64));
        assert!(Cli::try_parse_from(["sluice-operator", "--reconciles-at-once", "0"]).is_err());
        assert!(Cli::try_parse_from(["sluice-operator", "--leader-election", "maybe"]).is_err());
    }
}

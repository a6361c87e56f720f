//! The peer consumers of the comparison table: what teams run instead of Sluice, started as
//! processes of their own beside the reader and the loop, against the same queue, proxy and sink.
//! Their code is in `peers/`, their packages are installed by `scripts/bench-peers.sh`.

use std::path::Path;
use std::process::Command;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Peer {
    /// npm `sqs-consumer` on the AWS SDK for JavaScript v3.
    SqsConsumer,
    /// boto3 with one thread per poller.
    Boto3,
}

const SQS_CONSUMER: &str = include_str!("peers/sqs_consumer.mjs");
const BOTO3_LOOP: &str = include_str!("peers/boto3_loop.py");

impl Peer {
    pub fn label(self) -> &'static str {
        match self {
            Self::SqsConsumer => "sqs-cons",
            Self::Boto3 => "boto3",
        }
    }

    /// The command for this peer, its script written next to its installed packages (an ES module
    /// resolves its imports from where the file is, so it must live beside `node_modules`).
    pub fn command(self, dir: &Path) -> Result<Command, String> {
        let missing = || {
            format!("{} is not installed in {}: run bash scripts/bench-peers.sh", self.label(), dir.display())
        };
        match self {
            Self::SqsConsumer => {
                let home = dir.join("node");
                if !home.join("node_modules/sqs-consumer").is_dir() {
                    return Err(missing());
                }
                let script = home.join("sqs_consumer.mjs");
                std::fs::write(&script, SQS_CONSUMER).map_err(|e| e.to_string())?;
                let mut c = Command::new("node");
                c.arg(script);
                Ok(c)
            }
            Self::Boto3 => {
                let python = dir.join("venv/bin/python");
                if !python.exists() {
                    return Err(missing());
                }
                let script = dir.join("boto3_loop.py");
                std::fs::write(&script, BOTO3_LOOP).map_err(|e| e.to_string())?;
                let mut c = Command::new(python);
                c.arg("-u").arg(script);
                Ok(c)
            }
        }
    }
}

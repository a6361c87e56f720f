#![forbid(unsafe_code)]
//! `sluice-operator`: parses the command line and runs the operator (see `app.rs`).

use clap::Parser;
use sluice_operator::app::{AppError, run};
use sluice_operator::cli::Cli;

#[tokio::main]
async fn main() -> Result<(), AppError> {
    run(Cli::parse()).await
}

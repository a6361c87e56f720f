//! `sluice-reader`: parse the command line, set up logging, run, map the result to an exit code.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use sluice_crds::SqsSource;
use sluice_reader::config::cli::{Args, LogFormat};
use sluice_reader::config::options::Coordination;
use sluice_reader::config::{operator_only, source_file};
use sluice_reader::process::{runtime, signals, stop::Stop};
use sluice_reader::run;

/// mimalloc rather than the system allocator: the reader's profile is flat, and allocation
/// (`malloc`, `_int_malloc`, `malloc_consolidate`, `memmove`) was its largest item, about 15% of its CPU
/// in a release profile (BENCHMARKS.md). A well-kept allocator crate cuts that without touching the
/// pipeline; no `unsafe` is needed here. Built with `no_thp` (reader/Cargo.toml): otherwise it asks
/// the kernel for transparent huge pages on its arena, and an idle reader held 12 MiB of them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    match runtime::build() {
        Ok(rt) => rt.block_on(reader(args)),
        Err(e) => {
            eprintln!("sluice-reader: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn reader(args: Args) -> ExitCode {
    let format = match args.log_format {
        LogFormat::Json => sluice_logs::Format::Json,
        LogFormat::Text => sluice_logs::Format::Text,
    };
    // The poller span lasts the process's life: exported, every delivery span under it would
    // wait for it until shutdown.
    let spans = sluice_logs::Spans { otlp: &args.otlp, service: "sluice-reader", not_exported: &["poll"] };
    let telemetry = match sluice_logs::init(format, "info", &spans) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("sluice-reader: {e}");
            return ExitCode::FAILURE;
        }
    };
    let process = &telemetry.process;
    let stop = Stop::new();
    signals::drain_on_signals(stop.clone());
    let outcome = match source_file::load(&args.source) {
        Ok(source) => {
            name_process(process, &source);
            let options = args.options(&source);
            if options.coordination == Coordination::Standalone {
                for line in operator_only::ignored_standalone(&source) {
                    tracing::warn!("{line}");
                }
            }
            run::run(source, options, stop).await
        }
        Err(e) => Err(e),
    };
    // After the drain: the spans of the last deliveries go out before the process ends.
    telemetry.shutdown().await;
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        // Printed once: as a JSON log record when logs are JSON, else as one plain line.
        Err(e) => {
            match args.log_format {
                LogFormat::Json => tracing::error!("{e}"),
                LogFormat::Text => eprintln!("sluice-reader: {e}"),
            }
            e.to_exit()
        }
    }
}

/// Every JSON line names the source and its namespace: the source file's, else the pod's
/// (`POD_NAMESPACE`, which the operator sets).
fn name_process(process: &sluice_logs::ProcessFields, source: &SqsSource) {
    let namespace = source.metadata.namespace.clone().or_else(|| std::env::var("POD_NAMESPACE").ok());
    process.set([
        ("source", source.metadata.name.as_deref().unwrap_or_default()),
        ("namespace", namespace.as_deref().unwrap_or_default()),
    ]);
}

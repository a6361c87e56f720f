//! SIGTERM and SIGINT start a drain.
//!
//! Why not `process::exit` in a handler: the drain (release in-flight, flush deletes) is the whole
//! point of handling the signal; a handler only flips the stop, and the reader exits when done.
//! A second signal while draining does not cut the drain short: the deadline bounds it anyway.

use crate::process::stop::Stop;

pub fn drain_on_signals(stop: Stop) {
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(e) => {
                tracing::error!(error = %e, "cannot watch SIGTERM");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: draining"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: draining"),
        }
        stop.drain();
    });
}

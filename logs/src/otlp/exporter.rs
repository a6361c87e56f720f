//! The OTLP exporter as the SDK's batch processor sees it, plus what an operator needs when the
//! collector is away: a count of failed exports (fed to the binary's metrics) and one WARN line
//! at a time naming the endpoint; and the process's fields (the reader's source and namespace)
//! as resource attributes once they are known.
//!
//! Retries are the exporter's own (bounded, backed off, on the batch thread); a batch that still
//! fails is dropped, never retried by the data path.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::lock::Mutex as AsyncMutex;
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use super::client::LastError;
use crate::ProcessFields;

/// At most one WARN line per window; the line says how many failures it stands for.
pub const WARN_WINDOW: Duration = Duration::from_secs(60);

/// Resource attribute names for the process's fields, from OpenTelemetry's semantic conventions
/// where there is one.
const RESOURCE_NAMES: [(&str, &str); 2] = [("source", "sluice.source"), ("namespace", "k8s.namespace.name")];

static FAILURES: AtomicU64 = AtomicU64::new(0);
static ON_FAILURE: OnceLock<Box<dyn Fn() + Send + Sync>> = OnceLock::new();
/// When the last WARN line was written, and the failures since.
static WARNED: Mutex<Option<(Instant, u64)>> = Mutex::new(None);

/// Failed span exports (batches dropped after the exporter's retries) since start.
pub fn export_failures() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// Call `hook` on every failed export (a binary counts it in its metrics); set once.
pub fn on_export_failure(hook: impl Fn() + Send + Sync + 'static) {
    let _ = ON_FAILURE.set(Box::new(hook));
}

pub struct Counted<E> {
    inner: AsyncMutex<Inner<E>>,
    endpoint: String,
    process: ProcessFields,
    /// What the HTTP client saw go wrong last (see [`LastError`]).
    last_error: LastError,
}

struct Inner<E> {
    exporter: E,
    /// The resource the provider set, before the process's fields are added.
    base: Resource,
    /// Whether the process's fields are in the exporter's resource yet.
    named: bool,
}

impl<E> Counted<E> {
    pub fn new(exporter: E, endpoint: String, process: ProcessFields, last_error: LastError) -> Self {
        let inner = Inner { exporter, base: Resource::builder_empty().build(), named: false };
        Self { inner: AsyncMutex::new(inner), endpoint, process, last_error }
    }
}

impl<E> fmt::Debug for Counted<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counted").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl<E: SpanExporter> Inner<E> {
    /// Add the process's fields to the resource once the process has named them.
    fn name(&mut self, process: &ProcessFields) {
        let Some(fields) = process.get().filter(|_| !self.named) else { return };
        let extra = RESOURCE_NAMES.iter().filter_map(|(field, name)| {
            fields.get(*field).and_then(|v| v.as_str()).map(|v| KeyValue::new(*name, v.to_owned()))
        });
        let base = self.base.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone()));
        let resource = Resource::builder_empty().with_attributes(base.chain(extra)).build();
        self.exporter.set_resource(&resource);
        self.named = true;
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let mut inner = self.inner.lock().await;
        inner.name(&self.process);
        let result = inner.exporter.export(batch).await;
        if let Err(e) = &result {
            let seen = self.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            failed(&self.endpoint, &seen.unwrap_or_else(|| e.to_string()), Instant::now());
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        match self.inner.try_lock() {
            Some(inner) => inner.exporter.shutdown_with_timeout(timeout),
            None => Ok(()),
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.try_lock().map_or(Ok(()), |inner| inner.exporter.force_flush())
    }

    fn set_resource(&mut self, resource: &Resource) {
        let inner = self.inner.get_mut();
        inner.base = resource.clone();
        inner.exporter.set_resource(resource);
        inner.named = false;
    }
}

/// Count a failed export and write the WARN line if one is due.
fn failed(endpoint: &str, reason: &str, now: Instant) {
    FAILURES.fetch_add(1, Ordering::Relaxed);
    if let Some(hook) = ON_FAILURE.get() {
        hook();
    }
    let due = {
        let mut warned = WARNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        due(&mut warned, now)
    };
    if let Some(failures) = due {
        let window = WARN_WINDOW.as_secs();
        tracing::warn!(
            endpoint,
            failures,
            "OTLP span export to {endpoint} failed ({failures} in up to {window} s), those spans are dropped \
             and delivery goes on: {reason}; check that a collector listens there (--otlp-endpoint, \
             OTEL_EXPORTER_OTLP_ENDPOINT)"
        );
    }
}

/// `Some(failures this line stands for)` when a line is due: the first failure at once, then
/// at most one per [`WARN_WINDOW`].
fn due(warned: &mut Option<(Instant, u64)>, now: Instant) -> Option<u64> {
    match warned {
        None => {
            *warned = Some((now, 0));
            Some(1)
        }
        Some((last, count)) => {
            *count += 1;
            if now.duration_since(*last) < WARN_WINDOW {
                return None;
            }
            let failures = *count;
            *warned = Some((now, 0));
            Some(failures)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_warns_then_one_line_a_window() {
        let start = Instant::now();
        let mut warned = None;
        assert_eq!(due(&mut warned, start), Some(1));
        assert_eq!(due(&mut warned, start + Duration::from_secs(5)), None);
        assert_eq!(due(&mut warned, start + Duration::from_secs(30)), None);
        assert_eq!(due(&mut warned, start + WARN_WINDOW), Some(3));
        assert_eq!(due(&mut warned, start + WARN_WINDOW + Duration::from_secs(1)), None);
    }
}

//! The `log` sink: records as tracing events.
//!
//! Why it exists: a source can be tried out (and a pipeline debugged) without any downstream
//! system. Writing a log line cannot fail in a way the reader could act on, so every record is
//! `Delivered`; and a log cannot take part in exactly-once, so `EpochSupport::None`.

use std::sync::Arc;

use futures::future::BoxFuture;
use sluice_crds::LogSinkSpec;

use super::{Outcome, Sink};
use crate::record::Record;

pub struct LogSink {
    name: String,
    body: bool,
}

impl LogSink {
    pub fn new(name: &str, spec: &LogSinkSpec) -> Self {
        Self { name: name.to_owned(), body: spec.body }
    }

    fn log(&self, record: &Record) {
        let attributes = format!("{:?}", record.message_attributes);
        if self.body {
            let body = String::from_utf8_lossy(&record.body);
            tracing::info!(
                sink = %self.name, message_id = %record.message_id, queue = %record.queue_url,
                group_id = ?record.group_id, receive_count = record.receive_count, epoch = record.epoch,
                sent_timestamp_ms = ?record.sent_timestamp_ms, %attributes, bytes = record.body.len(),
                %body, "message"
            );
        } else {
            tracing::info!(
                sink = %self.name, message_id = %record.message_id, queue = %record.queue_url,
                group_id = ?record.group_id, receive_count = record.receive_count, epoch = record.epoch,
                sent_timestamp_ms = ?record.sent_timestamp_ms, %attributes, bytes = record.body.len(),
                "message"
            );
        }
    }
}

impl Sink for LogSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn per_record(&self) -> bool {
        true
    }

    fn deliver<'a>(&'a self, records: &'a [Arc<Record>]) -> BoxFuture<'a, Vec<Outcome>> {
        let outcomes = records
            .iter()
            .map(|record| {
                self.log(record);
                Outcome::Delivered
            })
            .collect();
        Box::pin(async move { outcomes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::EpochSupport;
    use crate::sink::testing::record;

    #[tokio::test]
    async fn every_record_is_delivered() {
        let sink = LogSink::new("log", &LogSinkSpec { body: true });
        let records = vec![Arc::new(record("a")), Arc::new(record("b"))];
        assert_eq!(sink.deliver(&records).await, vec![Outcome::Delivered, Outcome::Delivered]);
        assert_eq!(sink.epoch_support(), EpochSupport::None);
        assert_eq!(sink.name(), "log");
    }
}

//! The JSON line shape: `timestamp`, `level`, `target`, `message`, then the event's own fields,
//! the fields of every span it happened in (innermost wins) and the process's fields, all at the
//! top level of one object.
//!
//! Why flat: log pipelines (Loki, CloudWatch Insights, `jq`) filter on top-level keys, so
//! `queue` or `sink` is a field to query wherever it was recorded, in the event or in a span
//! around it; `tracing-subscriber`'s own JSON format nests span fields under `span`/`spans`.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::process::ProcessFields;

/// The keys every line starts with, in this order; an event or span field of the same name is
/// left out rather than written twice.
pub const HEAD: [&str; 3] = ["timestamp", "level", "target"];

/// Formats events as flat JSON lines; span fields must be recorded as JSON
/// (`fmt_fields(JsonFields::new())`), which [`crate::init`] does.
pub struct FlatJson {
    process: ProcessFields,
}

impl FlatJson {
    pub fn new(process: ProcessFields) -> Self {
        Self { process }
    }
}

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        if let Some(scope) = ctx.event_scope() {
            for span in scope {
                let extensions = span.extensions();
                let Some(recorded) = extensions.get::<FormattedFields<N>>() else { continue };
                if let Ok(Value::Object(span_fields)) = serde_json::from_str::<Value>(&recorded.fields) {
                    for (key, value) in span_fields {
                        fields.entry(key).or_insert(value);
                    }
                }
            }
        }
        if let Some(process) = self.process.get() {
            for (key, value) in process {
                fields.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let head = [timestamp.as_str(), meta.level().as_str(), meta.target()];
        write!(writer, "{{")?;
        for (i, (key, value)) in HEAD.iter().zip(head).enumerate() {
            let comma = if i == 0 { "" } else { "," };
            write!(writer, "{comma}{}:{}", json(key), json(value))?;
        }
        let message = fields.remove("message");
        for (key, value) in
            message.iter().map(|m| ("message", m)).chain(fields.iter().map(|(k, v)| (k.as_str(), v)))
        {
            if !HEAD.contains(&key) {
                write!(writer, ",{}:{value}", json(key))?;
            }
        }
        writeln!(writer, "}}")
    }
}

fn json(text: &str) -> Value {
    Value::String(text.to_owned())
}

/// An event's fields as JSON values: numbers and booleans stay typed, the rest is text.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::String(value.to_owned()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().to_owned(), Value::String(value.to_string()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }
}

//! Which kind a sink is, as a value to match on.
//!
//! A sink is stored as optional blocks (`http`, `sqs`, `s3`, `log`) because that is what a
//! structural schema can express; code that dispatches on the kind wants an enum instead.

use crate::{SinkSpec, SqsSourceSpec};

/// The kind of a sink: which one of its blocks is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SinkKind {
    Http,
    Sqs,
    S3,
    Log,
}

impl SinkKind {
    /// The field name in the spec (`http`, `sqs`, `s3`, `log`), handy as a metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Sqs => "sqs",
            Self::S3 => "s3",
            Self::Log => "log",
        }
    }
}

impl SinkSpec {
    /// The one kind block that is set; `None` unless exactly one is (never for a validated spec).
    pub fn kind(&self) -> Option<SinkKind> {
        let set = [
            (self.http.is_some(), SinkKind::Http),
            (self.sqs.is_some(), SinkKind::Sqs),
            (self.s3.is_some(), SinkKind::S3),
            (self.log.is_some(), SinkKind::Log),
        ];
        let mut kinds = set.iter().filter(|(on, _)| *on).map(|(_, k)| *k);
        match (kinds.next(), kinds.next()) {
            (Some(kind), None) => Some(kind),
            _ => None,
        }
    }

    /// Whether the sink can take part in exactlyOnce checkpoints: s3 (transactional per epoch),
    /// http (idempotency key) or sqs to a FIFO queue (deduplication id); not log.
    pub fn supports_exactly_once(&self) -> bool {
        match self.kind() {
            Some(SinkKind::S3 | SinkKind::Http) => true,
            Some(SinkKind::Sqs) => self.sqs.as_ref().is_some_and(|s| s.is_fifo()),
            Some(SinkKind::Log) | None => false,
        }
    }
}

impl SqsSourceSpec {
    /// Whether `delivery.guarantee` is `exactlyOnce`.
    pub fn is_exactly_once(&self) -> bool {
        self.delivery.guarantee == crate::Guarantee::ExactlyOnce
    }

    /// Whether the source reads FIFO queues (a source never mixes FIFO and standard queues).
    pub fn is_fifo(&self) -> bool {
        self.queues.first().is_some_and(|q| q.is_fifo())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LogSinkSpec, S3BufferSpec, S3Compression, S3KeyTime, S3SinkSpec};

    fn sink() -> SinkSpec {
        SinkSpec { name: "s".into(), http: None, sqs: None, s3: None, log: None, route: None }
    }

    #[test]
    fn kind_is_the_single_block_set() {
        assert_eq!(sink().kind(), None);
        let log = SinkSpec { log: Some(LogSinkSpec::default()), ..sink() };
        assert_eq!(log.kind(), Some(SinkKind::Log));
        assert!(!log.supports_exactly_once());
        let s3 = S3SinkSpec {
            bucket: "bkt".into(),
            prefix: String::new(),
            endpoint: None,
            region: None,
            sse_kms_key_id: None,
            buffer: S3BufferSpec::default(),
            compression: S3Compression::None,
            key_template: String::new(),
            key_time: S3KeyTime::SentTimestamp,
        };
        let both = SinkSpec { s3: Some(s3.clone()), ..log };
        assert_eq!(both.kind(), None, "two blocks are not a kind");
        let s3_only = SinkSpec { s3: Some(s3), ..sink() };
        assert_eq!(s3_only.kind().map(SinkKind::as_str), Some("s3"));
        assert!(s3_only.supports_exactly_once());
    }
}

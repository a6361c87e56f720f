//! Which kind a sink is, as a value to match on.
//!
//! A sink is stored as optional blocks (`http`, `sqs`, `s3`, `log`) because that is what a
//! structural schema can express; code that dispatches on the kind wants an enum instead.

use crate::{HttpSinkSpec, LogSinkSpec, S3SinkSpec, SinkSpec, SqsSinkSpec, SqsSourceSpec};

/// The kind of a sink: which one of its blocks is set. Every place that lists, names or dispatches
/// on the kinds goes through this enum (or [`SinkBlock`]), so a new kind makes the compiler list
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SinkKind {
    Http,
    Sqs,
    S3,
    Log,
}

impl SinkKind {
    /// Every kind, in the order the spec and its messages list them.
    pub const ALL: [SinkKind; 4] = [Self::Http, Self::Sqs, Self::S3, Self::Log];

    /// The field name in the spec (`http`, `sqs`, `s3`, `log`), handy as a metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Sqs => "sqs",
            Self::S3 => "s3",
            Self::Log => "log",
        }
    }

    /// The kinds as a message lists them: `http, sqs, s3, log`.
    pub fn listed() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }

    /// Whether `sink` sets this kind's block.
    pub fn is_set_in(self, sink: &SinkSpec) -> bool {
        match self {
            Self::Http => sink.http.is_some(),
            Self::Sqs => sink.sqs.is_some(),
            Self::S3 => sink.s3.is_some(),
            Self::Log => sink.log.is_some(),
        }
    }

    /// Whether a sink of this kind may be the dead-letter sink: one that hands each rejected
    /// record to a system someone reads from (an endpoint or a queue), record by record.
    pub fn can_dead_letter(self) -> bool {
        match self {
            Self::Http | Self::Sqs => true,
            Self::S3 | Self::Log => false,
        }
    }
}

/// A sink's one kind block, borrowed: what code that builds or describes a sink matches on.
#[derive(Clone, Copy, Debug)]
pub enum SinkBlock<'a> {
    Http(&'a HttpSinkSpec),
    Sqs(&'a SqsSinkSpec),
    S3(&'a S3SinkSpec),
    Log(&'a LogSinkSpec),
}

impl SinkBlock<'_> {
    pub fn kind(self) -> SinkKind {
        match self {
            Self::Http(_) => SinkKind::Http,
            Self::Sqs(_) => SinkKind::Sqs,
            Self::S3(_) => SinkKind::S3,
            Self::Log(_) => SinkKind::Log,
        }
    }
}

impl SinkSpec {
    /// How many kind blocks are set (one in a valid spec).
    pub fn kinds_set(&self) -> usize {
        SinkKind::ALL.into_iter().filter(|k| k.is_set_in(self)).count()
    }

    /// The one kind block that is set; `None` unless exactly one is (never for a validated spec).
    pub fn block(&self) -> Option<SinkBlock<'_>> {
        if self.kinds_set() != 1 {
            return None;
        }
        let blocks = [
            self.http.as_ref().map(SinkBlock::Http),
            self.sqs.as_ref().map(SinkBlock::Sqs),
            self.s3.as_ref().map(SinkBlock::S3),
            self.log.as_ref().map(SinkBlock::Log),
        ];
        blocks.into_iter().flatten().next()
    }

    /// The kind of [`SinkSpec::block`].
    pub fn kind(&self) -> Option<SinkKind> {
        self.block().map(SinkBlock::kind)
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
        assert!(matches!(s3_only.block(), Some(SinkBlock::S3(s)) if s.bucket == "bkt"));
        assert_eq!(both.kinds_set(), 2);
        assert_eq!(SinkKind::listed(), "http, sqs, s3, log");
        assert!(s3_only.supports_exactly_once());
    }
}

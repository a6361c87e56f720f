//! Test fixtures shared by the sink tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::record::{Payload, Record};

/// A raw record with `id` as its message id and body `body-<id>`.
pub fn record(id: &str) -> Record {
    Record {
        message_id: id.into(),
        queue_url: Arc::from("http://127.0.0.1:4566/queue/us-east-1/000000000000/source"),
        body: Bytes::from(format!("body-{id}")),
        payload: Payload::Raw,
        attributes: BTreeMap::new(),
        message_attributes: BTreeMap::new(),
        attribute_types: BTreeMap::new(),
        sent_timestamp_ms: Some(1_700_000_000_000),
        receive_count: 1,
        group_id: None,
        dedup_id: None,
        epoch: 0,
        incarnation: 0,
        trace: None,
        object: None,
    }
}

//! The s3 sink's transaction per `EpochKey` against LocalStack S3: nothing is visible before
//! `commit`, everything exactly once after it, nothing at all after `abort`; two incarnations of a
//! pod that tag the same epoch number stay apart; any process can finish a pre-committed key, and
//! never completes another incarnation's upload; a late record is released, not dead-lettered.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_s3::Client;
use bytes::Bytes;
use sluice_crds::{RetrySpec, S3BufferSpec, S3Compression, S3KeyTime, S3SinkSpec};
use sluice_protocol::{EpochKey, Incarnation};

use super::aws_testing::{localstack, unique};
use super::retry::RetryPolicy;
use super::s3::{MIN_PART_BYTES, S3Sink};
use super::testing::record;
use super::{EpochSupport, Outcome, Sink};
use crate::record::Record;

const READER: &str = "reader-0";
const OTHER_READER: &str = "reader-1";
/// The incarnations of `READER` in these tests (a process, or a rejoin after a fence, each).
const INC_A: u64 = 0xa1;
const INC_B: u64 = 0xb2;

struct Bucket {
    client: Client,
    name: String,
}

impl Bucket {
    async fn new(aws: &aws_config::SdkConfig) -> Self {
        let config = aws_sdk_s3::config::Builder::from(aws).force_path_style(true).build();
        let client = Client::from_conf(config);
        let name = unique("sluice-sink");
        client.create_bucket().bucket(&name).send().await.unwrap();
        Self { client, name }
    }

    /// A sink of a new process of pod `READER`.
    fn sink(&self, aws: &aws_config::SdkConfig) -> S3Sink {
        self.sink_of(aws, READER)
    }

    /// A sink of a new process of pod `reader`.
    fn sink_of(&self, aws: &aws_config::SdkConfig, reader: &str) -> S3Sink {
        self.sink_with(aws, reader, |_| {})
    }

    /// A sink of a new process of pod `reader`, its spec changed by `change`; at-least-once
    /// objects wait at most 300 ms.
    fn sink_with(
        &self,
        aws: &aws_config::SdkConfig,
        reader: &str,
        change: impl FnOnce(&mut S3SinkSpec),
    ) -> S3Sink {
        let mut spec = S3SinkSpec {
            bucket: self.name.clone(),
            prefix: "out/".into(),
            endpoint: None,
            region: None,
            sse_kms_key_id: None,
            buffer: S3BufferSpec::default(),
            compression: S3Compression::None,
            key_template: String::new(),
            key_time: S3KeyTime::SentTimestamp,
        };
        let retry =
            RetrySpec { max_attempts: 3, initial_delay_ms: 10, max_delay_ms: 50, ..RetrySpec::default() };
        change(&mut spec);
        S3Sink::new("archive", &spec, aws, &Arc::default(), reader, RetryPolicy::from_spec(&retry))
            .unwrap()
            .with_max_wait(std::time::Duration::from_millis(300))
    }

    /// Visible objects: key to the message ids of its lines.
    async fn objects(&self) -> BTreeMap<String, Vec<String>> {
        let listed = self.client.list_objects_v2().bucket(&self.name).send().await.unwrap();
        let mut objects = BTreeMap::new();
        for object in listed.contents() {
            let key = object.key().unwrap().to_owned();
            let body = self.client.get_object().bucket(&self.name).key(&key).send().await.unwrap();
            let encoding = body.content_encoding().map(str::to_owned);
            let bytes =
                decoded(&key, encoding.as_deref(), &body.body.collect().await.unwrap().into_bytes()).await;
            let ids = String::from_utf8(bytes)
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["messageId"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            objects.insert(key, ids);
        }
        objects
    }

    async fn pending_uploads(&self) -> usize {
        let out = self.client.list_multipart_uploads().bucket(&self.name).send().await.unwrap();
        out.uploads().len()
    }
}

/// An object's JSON lines: gzip and zstd objects (named and labelled so) decompressed.
async fn decoded(key: &str, encoding: Option<&str>, bytes: &[u8]) -> Vec<u8> {
    use async_compression::tokio::bufread::{GzipDecoder, ZstdDecoder};
    use tokio::io::AsyncReadExt as _;
    let mut out = Vec::new();
    match encoding {
        Some("gzip") => {
            assert!(key.ends_with(".jsonl.gz"), "{key}");
            GzipDecoder::new(bytes).read_to_end(&mut out).await.unwrap();
        }
        Some("zstd") => {
            assert!(key.ends_with(".jsonl.zst"), "{key}");
            ZstdDecoder::new(bytes).read_to_end(&mut out).await.unwrap();
        }
        _ => {
            assert!(key.ends_with(".jsonl"), "{key}");
            out = bytes.to_vec();
        }
    }
    out
}

/// Records of `records` sent at `sent_ms`.
fn sent_at(mut records: Vec<Arc<Record>>, sent_ms: i64) -> Vec<Arc<Record>> {
    for r in &mut records {
        Arc::make_mut(r).sent_timestamp_ms = Some(sent_ms);
    }
    records
}

const HOUR_MS: i64 = 3_600_000;

#[tokio::test]
async fn at_least_once_records_share_an_object_until_a_hint_then_answer() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink_with(&aws, READER, |s| {
        (s.buffer.max_records, s.compression) = (3, S3Compression::Zstd);
        s.key_template = "dt={yyyy}-{MM}-{dd}".into();
    });
    let (a, b) = (sent_at(records(0, 0, &["a", "b"]), 0), sent_at(records(0, 0, &["c"]), 0));
    // Two deliveries fill one object (3 records): both answer when it is written.
    let (first, second) = tokio::join!(sink.deliver(&a), sink.deliver(&b));
    assert_eq!((first, second), (vec![Outcome::Delivered; 2], vec![Outcome::Delivered]));
    assert_eq!(bucket.objects().await.len(), 1);
    // One record alone waits for the time hint.
    assert_eq!(sink.deliver(&sent_at(records(0, 0, &["d"]), 0)).await, vec![Outcome::Delivered]);
    let objects = bucket.objects().await;
    assert_eq!(objects.len(), 2, "{objects:?}");
    assert!(objects.keys().all(|k| k.starts_with("out/dt=1970-01-01/reader-0/direct/")), "{objects:?}");
    let mut seen: Vec<_> = objects.values().flatten().map(String::as_str).collect();
    seen.sort_unstable();
    assert_eq!(seen, ["a", "b", "c", "d"]);
}

#[tokio::test]
async fn an_epoch_split_by_hints_and_hours_is_committed_whole_by_another_process() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let hourly = |s: &mut S3SinkSpec| {
        (s.buffer.max_records, s.compression) = (2, S3Compression::Gzip);
        s.key_template = "{yyyy}/{MM}/{dd}/{HH}".into();
    };
    let owner = bucket.sink_with(&aws, READER, hourly);
    let k = key(READER, INC_A, 3);
    let first_hour = sent_at(records(INC_A, 3, &["h0-a", "h0-b", "h0-c"]), 0);
    let next_hour = sent_at(records(INC_A, 3, &["h1-a", "h1-b"]), HOUR_MS);
    assert_eq!(owner.deliver(&[first_hour, next_hour].concat()).await, vec![Outcome::Delivered; 5]);
    owner.pre_commit(&k).await.unwrap();
    assert!(bucket.objects().await.is_empty(), "nothing is visible before the commit");
    assert_eq!(bucket.pending_uploads().await, 3, "hour 0: 2 + 1 records, hour 1: 2");
    let other = bucket.sink_with(&aws, "reader-1", hourly);
    other.commit(&k).await.unwrap();
    let objects = bucket.objects().await;
    let inc = Incarnation(INC_A).to_string();
    let expected = BTreeMap::from([
        (
            format!("out/1970/01/01/00/{READER}/epoch-00000000000000000003/{inc}.jsonl.gz"),
            ids(&["h0-a", "h0-b"]),
        ),
        (
            format!("out/1970/01/01/00/{READER}/epoch-00000000000000000003/{inc}-000001.jsonl.gz"),
            ids(&["h0-c"]),
        ),
        (
            format!("out/1970/01/01/01/{READER}/epoch-00000000000000000003/{inc}-000002.jsonl.gz"),
            ids(&["h1-a", "h1-b"]),
        ),
    ]);
    assert_eq!(objects, expected);
    assert_eq!(bucket.pending_uploads().await, 0);
    let err = owner.abort(&k).await.unwrap_err();
    assert!(err.message.contains("committed"), "{err:?}");
}

fn key(pod: &str, incarnation: u64, epoch: u64) -> EpochKey {
    EpochKey { pod: pod.to_owned(), incarnation: Incarnation(incarnation), epoch }
}

/// Records tagged by `incarnation` with `epoch` (both 0 under at-least-once).
fn records(incarnation: u64, epoch: u64, ids: &[&str]) -> Vec<Arc<Record>> {
    ids.iter()
        .map(|id| {
            let mut r = record(id);
            r.epoch = epoch;
            r.incarnation = incarnation;
            Arc::new(r)
        })
        .collect()
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn an_epoch_becomes_visible_on_commit_exactly_once() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    let k = key(READER, INC_A, 1);
    assert_eq!(sink.epoch_support(), EpochSupport::Transactional);
    assert_eq!(sink.deliver(&records(INC_A, 1, &["a", "b"])).await, vec![Outcome::Delivered; 2]);
    assert_eq!(sink.deliver(&records(INC_A, 1, &["c"])).await, vec![Outcome::Delivered]);
    sink.pre_commit(&k).await.unwrap();
    assert!(bucket.objects().await.is_empty(), "pre-committed output is invisible");
    assert_eq!(bucket.pending_uploads().await, 1);
    let late = sink.deliver(&records(INC_A, 1, &["late"])).await;
    assert!(
        matches!(&late[..], [Outcome::Redeliver { reason }] if reason.contains("pre-committed")),
        "a pre-committed key takes no records: {late:?}"
    );

    sink.commit(&k).await.unwrap();
    sink.commit(&k).await.unwrap();
    let objects = bucket.objects().await;
    assert_eq!(objects.len(), 1, "{objects:?}");
    let (object, ids_seen) = objects.iter().next().unwrap();
    assert_eq!(object, &sink.object_key(&k));
    assert_eq!(object, "out/reader-0/epoch-00000000000000000001/00000000000000a1.jsonl");
    assert_eq!(ids_seen, &ids(&["a", "b", "c"]));
    assert_eq!(bucket.pending_uploads().await, 0);
    let late = sink.deliver(&records(INC_A, 1, &["later"])).await;
    assert!(matches!(&late[..], [Outcome::Redeliver { reason }] if reason.contains("committed")), "{late:?}");
    assert!(sink.abort(&k).await.is_err(), "a committed key cannot be aborted");
    assert_eq!(bucket.objects().await.len(), 1);
}

#[tokio::test]
async fn an_aborted_epoch_leaves_nothing() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    let k = key(READER, INC_A, 2);
    sink.deliver(&records(INC_A, 2, &["x", "y"])).await;
    sink.pre_commit(&k).await.unwrap();
    sink.abort(&k).await.unwrap();
    sink.abort(&k).await.unwrap();
    assert!(sink.commit(&k).await.unwrap_err().message.contains("aborted"));
    assert!(sink.pre_commit(&k).await.unwrap_err().message.contains("aborted"));
    let late = sink.deliver(&records(INC_A, 2, &["z"])).await;
    assert!(matches!(&late[..], [Outcome::Redeliver { reason }] if reason.contains("aborted")), "{late:?}");
    assert!(bucket.objects().await.is_empty());
    assert_eq!(bucket.pending_uploads().await, 0);
}

#[tokio::test]
async fn a_key_with_nothing_staged_commits_to_nothing() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    let other = bucket.sink_of(&aws, OTHER_READER);
    let k = key(READER, INC_A, 5);
    sink.pre_commit(&k).await.unwrap();
    sink.commit(&k).await.unwrap();
    other.commit(&k).await.unwrap();
    // Never seen by anyone: nothing pending, no object, still success.
    sink.commit(&key(READER, INC_B, 8)).await.unwrap();
    other.commit(&key(READER, INC_B, 8)).await.unwrap();
    assert!(bucket.objects().await.is_empty());
    assert_eq!(bucket.pending_uploads().await, 0);
    let err = sink.pre_commit(&key(OTHER_READER, INC_A, 5)).await.unwrap_err();
    assert!(err.message.contains("reader-0"), "only own records are staged here: {err}");
}

#[tokio::test]
async fn a_late_record_is_released_not_dead_lettered() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    // Sealed with nothing buffered: the key had no records for this sink, and keeps it that way.
    sink.pre_commit(&key(READER, INC_A, 3)).await.unwrap();
    let late = sink.deliver(&records(INC_A, 3, &["late"])).await;
    assert!(
        matches!(&late[..], [Outcome::Redeliver { reason }] if reason.contains("pre-committed")),
        "Redeliver releases the message; Rejected would dead-letter it, Failed hold it: {late:?}"
    );
    // Only that key is sealed: the same epoch number under another incarnation, and the next
    // epoch, take records.
    let taken = [records(INC_B, 3, &["b3"]), records(INC_A, 4, &["a4"]), records(INC_A, 3, &["a3"])].concat();
    let outcomes = sink.deliver(&taken).await;
    assert_eq!(outcomes[..2], [Outcome::Delivered, Outcome::Delivered], "{outcomes:?}");
    assert!(matches!(&outcomes[2], Outcome::Redeliver { .. }), "{outcomes:?}");
    sink.commit(&key(READER, INC_A, 3)).await.unwrap();
    assert!(bucket.objects().await.is_empty(), "the late record is not in the output");
}

#[tokio::test]
async fn a_large_epoch_is_uploaded_in_parts() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws).with_part_bytes(MIN_PART_BYTES);
    let k = key(READER, INC_A, 3);
    let ids: Vec<String> = (0..70).map(|i| format!("big-{i:02}")).collect();
    for chunk in ids.chunks(10) {
        let batch: Vec<_> = chunk
            .iter()
            .map(|id| {
                let mut r = record(id);
                (r.epoch, r.incarnation) = (3, INC_A);
                r.body = Bytes::from(vec![b'x'; 100 * 1024]);
                Arc::new(r)
            })
            .collect();
        assert_eq!(sink.deliver(&batch).await, vec![Outcome::Delivered; 10]);
    }
    assert!(sink.stats().unwrap().requests() >= 2, "a part went up before pre-commit");
    assert!(bucket.objects().await.is_empty());
    sink.pre_commit(&k).await.unwrap();
    // Completed from the listing by another process: all parts, in order.
    bucket.sink_of(&aws, OTHER_READER).commit(&k).await.unwrap();
    let objects = bucket.objects().await;
    assert_eq!(objects.get(&sink.object_key(&k)), Some(&ids));
    sink.commit(&k).await.unwrap();
    assert_eq!(bucket.objects().await, objects);
}

#[tokio::test]
async fn another_process_commits_a_pre_committed_key() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let owner = bucket.sink(&aws);
    let k = key(READER, INC_A, 4);
    owner.deliver(&records(INC_A, 4, &["p", "q"])).await;
    owner.pre_commit(&k).await.unwrap();
    // A reader of another pod finishing the key (it received a redelivered committed message).
    let other = bucket.sink_of(&aws, OTHER_READER);
    other.commit(&k).await.unwrap();
    let expected = BTreeMap::from([(owner.object_key(&k), ids(&["p", "q"]))]);
    assert_eq!(bucket.objects().await, expected);
    assert_eq!(bucket.pending_uploads().await, 0);
    // Idempotent, from either side: the owner's own complete finds the object already there.
    other.commit(&k).await.unwrap();
    owner.commit(&k).await.unwrap();
    owner.commit(&k).await.unwrap();
    assert_eq!(bucket.objects().await, expected);
    assert!(other.abort(&k).await.unwrap_err().message.contains("committed"));
    assert!(bucket.sink(&aws).abort(&k).await.unwrap_err().message.contains("committed"));
    assert_eq!(bucket.objects().await, expected);
}

#[tokio::test]
async fn a_restarted_reader_finishes_its_previous_incarnations_key() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let crashed = bucket.sink(&aws);
    crashed.deliver(&records(INC_A, 4, &["p", "q"])).await;
    crashed.pre_commit(&key(READER, INC_A, 4)).await.unwrap();
    drop(crashed);
    // A new process of the same pod, with a new incarnation and no memory of the old one's key.
    let restarted = bucket.sink(&aws);
    restarted.deliver(&records(INC_B, 9, &["n"])).await;
    restarted.commit(&key(READER, INC_A, 4)).await.unwrap();
    let objects = bucket.objects().await;
    let expected = BTreeMap::from([(restarted.object_key(&key(READER, INC_A, 4)), ids(&["p", "q"]))]);
    assert_eq!(objects, expected);
    assert_eq!(bucket.pending_uploads().await, 0, "epoch 9 is still only buffered");
    restarted.pre_commit(&key(READER, INC_B, 9)).await.unwrap();
    restarted.commit(&key(READER, INC_B, 9)).await.unwrap();
    assert_eq!(bucket.objects().await.len(), 2);
}

#[tokio::test]
async fn two_incarnations_of_a_pod_never_share_an_epoch_transaction() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    // One process that was fenced as INC_A and rejoined as INC_B: both tagged epoch 6.
    let sink = bucket.sink(&aws);
    let (old, new) = (key(READER, INC_A, 6), key(READER, INC_B, 6));
    let mixed = [records(INC_A, 6, &["old-1"]), records(INC_B, 6, &["new-1"]), records(INC_A, 6, &["old-2"])];
    assert_eq!(sink.deliver(&mixed.concat()).await, vec![Outcome::Delivered; 3]);
    sink.pre_commit(&old).await.unwrap();
    assert_eq!(bucket.pending_uploads().await, 1, "pre-commit of one incarnation stages only its records");
    assert_eq!(sink.deliver(&records(INC_B, 6, &["new-2"])).await, vec![Outcome::Delivered]);
    sink.pre_commit(&new).await.unwrap();
    assert_eq!(bucket.pending_uploads().await, 2);
    assert_ne!(sink.object_key(&old), sink.object_key(&new));

    sink.abort(&old).await.unwrap();
    assert_eq!(bucket.pending_uploads().await, 1, "aborting one incarnation leaves the other's upload");
    let late = sink.deliver(&records(INC_A, 6, &["old-3"])).await;
    assert!(matches!(&late[..], [Outcome::Redeliver { reason }] if reason.contains("aborted")), "{late:?}");
    sink.commit(&new).await.unwrap();
    let expected = BTreeMap::from([(sink.object_key(&new), ids(&["new-1", "new-2"]))]);
    assert_eq!(bucket.objects().await, expected);
    assert_eq!(bucket.pending_uploads().await, 0);
    assert!(sink.commit(&old).await.unwrap_err().message.contains("aborted"));
}

#[tokio::test]
async fn a_commit_never_completes_another_incarnations_upload() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    // A fenced incarnation (a zombie process) staged epoch 6; its successor tagged epoch 6 too.
    let zombie = bucket.sink(&aws);
    zombie.deliver(&records(INC_A, 6, &["old"])).await;
    zombie.pre_commit(&key(READER, INC_A, 6)).await.unwrap();
    let (committed, empty) = (key(READER, INC_B, 6), key(READER, INC_B, 7));

    // Another pod finishing a key with nothing staged leaves other incarnations' uploads alone.
    bucket.sink_of(&aws, OTHER_READER).commit(&committed).await.unwrap();
    assert!(bucket.objects().await.is_empty());
    assert_eq!(bucket.pending_uploads().await, 1);

    let current = bucket.sink(&aws);
    current.deliver(&records(INC_B, 6, &["new"])).await;
    current.pre_commit(&committed).await.unwrap();
    current.pre_commit(&empty).await.unwrap();
    current.commit(&empty).await.unwrap();
    assert_eq!(bucket.pending_uploads().await, 2, "epoch 7 says nothing about uploads of epoch 6");
    current.commit(&committed).await.unwrap();
    let expected = BTreeMap::from([(current.object_key(&committed), ids(&["new"]))]);
    assert_eq!(bucket.objects().await, expected);
    assert_eq!(
        bucket.pending_uploads().await,
        0,
        "the own pod's commit aborted the stale incarnation's upload"
    );
    assert!(zombie.commit(&key(READER, INC_A, 6)).await.is_err(), "the zombie's epoch 6 is gone");
    assert_eq!(bucket.objects().await, expected);
}

#[tokio::test]
async fn at_least_once_records_are_visible_when_delivered() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    assert_eq!(sink.deliver(&records(0, 0, &["m1", "m2"])).await, vec![Outcome::Delivered; 2]);
    let mixed = [records(0, 0, &["m3"]), records(INC_A, 7, &["e1"])].concat();
    assert_eq!(sink.deliver(&mixed).await, vec![Outcome::Delivered; 2]);
    let objects = bucket.objects().await;
    let keys: Vec<_> = objects.keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("out/reader-0/direct/")), "{keys:?}");
    let ids: Vec<_> = objects.values().flatten().map(String::as_str).collect();
    assert_eq!(ids, ["m1", "m2", "m3"], "epoch 7 waits for its commit");
}

#[tokio::test]
async fn an_upload_of_the_key_without_parts_is_aborted_never_completed() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let owner = bucket.sink(&aws);
    let k = key(READER, INC_A, 11);
    let object = owner.object_key(&k);
    // What a CreateMultipartUpload whose answer was lost leaves: an upload of the key, no parts.
    let orphan = || bucket.client.create_multipart_upload().bucket(&bucket.name).key(&object).send();
    orphan().await.unwrap();
    owner.deliver(&records(INC_A, 11, &["r"])).await;
    owner.pre_commit(&k).await.unwrap();
    orphan().await.unwrap();
    assert_eq!(bucket.pending_uploads().await, 3);
    let other = bucket.sink_of(&aws, OTHER_READER);
    other.commit(&k).await.unwrap();
    let expected = BTreeMap::from([(object.clone(), ids(&["r"]))]);
    assert_eq!(bucket.objects().await, expected);
    assert_eq!(bucket.pending_uploads().await, 0);
    // One appearing after the commit must not replace the output with nothing either.
    orphan().await.unwrap();
    other.commit(&k).await.unwrap();
    assert_eq!(bucket.objects().await, expected);
    assert_eq!(bucket.pending_uploads().await, 0);
}

#[tokio::test]
async fn another_process_aborts_a_staged_key() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let owner = bucket.sink(&aws);
    let (k, kept) = (key(READER, INC_A, 12), key(READER, INC_B, 12));
    owner.deliver(&[records(INC_A, 12, &["gone"]), records(INC_B, 12, &["kept"])].concat()).await;
    owner.pre_commit(&k).await.unwrap();
    owner.pre_commit(&kept).await.unwrap();
    let other = bucket.sink_of(&aws, OTHER_READER);
    other.abort(&k).await.unwrap();
    other.abort(&k).await.unwrap();
    assert_eq!(bucket.pending_uploads().await, 1, "only the exact key's upload is aborted");
    owner.commit(&kept).await.unwrap();
    let expected = BTreeMap::from([(owner.object_key(&kept), ids(&["kept"]))]);
    assert_eq!(bucket.objects().await, expected);
    assert!(owner.commit(&k).await.is_err(), "its upload is gone and it has no object");
}

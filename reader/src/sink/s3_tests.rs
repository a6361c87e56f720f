//! The s3 sink's epoch transaction against LocalStack S3: nothing is visible before `commit`,
//! everything exactly once after it, nothing at all after `abort`; a new process can finish an
//! acked epoch; a stale incarnation's upload never becomes output.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_s3::Client;
use bytes::Bytes;
use sluice_crds::{RetrySpec, S3SinkSpec};

use super::aws_testing::{localstack, unique};
use super::retry::RetryPolicy;
use super::s3::{MIN_PART_BYTES, S3Sink};
use super::testing::record;
use super::{EpochSupport, Outcome, Sink};
use crate::record::Record;

const READER: &str = "reader-0";

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

    fn sink(&self, aws: &aws_config::SdkConfig) -> S3Sink {
        let spec =
            S3SinkSpec { bucket: self.name.clone(), prefix: "out/".into(), endpoint: None, region: None };
        let retry =
            RetrySpec { max_attempts: 3, initial_delay_ms: 10, max_delay_ms: 50, ..RetrySpec::default() };
        S3Sink::new("archive", &spec, aws, READER, RetryPolicy::from_spec(&retry)).unwrap()
    }

    /// Visible objects: key to the message ids of its lines.
    async fn objects(&self) -> BTreeMap<String, Vec<String>> {
        let listed = self.client.list_objects_v2().bucket(&self.name).send().await.unwrap();
        let mut objects = BTreeMap::new();
        for object in listed.contents() {
            let key = object.key().unwrap().to_owned();
            let body = self.client.get_object().bucket(&self.name).key(&key).send().await.unwrap();
            let bytes = body.body.collect().await.unwrap().into_bytes();
            let ids = String::from_utf8(bytes.to_vec())
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

fn records(epoch: u64, ids: &[&str]) -> Vec<Arc<Record>> {
    ids.iter()
        .map(|id| {
            let mut r = record(id);
            r.epoch = epoch;
            Arc::new(r)
        })
        .collect()
}

#[tokio::test]
async fn an_epoch_becomes_visible_on_commit_exactly_once() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    assert_eq!(sink.epoch_support(), EpochSupport::Transactional);
    assert_eq!(sink.deliver(&records(1, &["a", "b"])).await, vec![Outcome::Delivered; 2]);
    assert_eq!(sink.deliver(&records(1, &["c"])).await, vec![Outcome::Delivered]);
    sink.pre_commit(1).await.unwrap();
    assert!(bucket.objects().await.is_empty(), "pre-committed output is invisible");
    assert_eq!(bucket.pending_uploads().await, 1);
    let late = sink.deliver(&records(1, &["late"])).await;
    assert!(
        matches!(&late[..], [Outcome::Failed { .. }]),
        "a pre-committed epoch takes no records: {late:?}"
    );

    sink.commit(1).await.unwrap();
    sink.commit(1).await.unwrap();
    let objects = bucket.objects().await;
    assert_eq!(objects.len(), 1, "{objects:?}");
    let (key, ids) = objects.iter().next().unwrap();
    assert_eq!(key, &sink.object_key(1));
    assert!(key.starts_with("out/reader-0/epoch-00000000000000000001/"), "{key}");
    assert_eq!(ids, &["a", "b", "c"]);
    assert_eq!(bucket.pending_uploads().await, 0);
    let late = sink.deliver(&records(1, &["later"])).await;
    assert!(matches!(&late[..], [Outcome::Failed { reason }] if reason.contains("committed")), "{late:?}");
    assert!(sink.abort(1).await.is_err(), "a committed epoch cannot be aborted");
    assert_eq!(bucket.objects().await.len(), 1);
}

#[tokio::test]
async fn an_aborted_epoch_leaves_nothing() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    sink.deliver(&records(2, &["x", "y"])).await;
    sink.pre_commit(2).await.unwrap();
    sink.abort(2).await.unwrap();
    sink.abort(2).await.unwrap();
    assert!(sink.commit(2).await.unwrap_err().message.contains("aborted"));
    let late = sink.deliver(&records(2, &["z"])).await;
    assert!(matches!(&late[..], [Outcome::Failed { reason }] if reason.contains("aborted")), "{late:?}");
    assert!(bucket.objects().await.is_empty());
    assert_eq!(bucket.pending_uploads().await, 0);
}

#[tokio::test]
async fn an_empty_epoch_commits_to_nothing() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    sink.pre_commit(5).await.unwrap();
    sink.commit(5).await.unwrap();
    assert!(bucket.objects().await.is_empty());
}

#[tokio::test]
async fn a_large_epoch_is_uploaded_in_parts() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws).with_part_bytes(MIN_PART_BYTES);
    let ids: Vec<String> = (0..70).map(|i| format!("big-{i:02}")).collect();
    for chunk in ids.chunks(10) {
        let batch: Vec<_> = chunk
            .iter()
            .map(|id| {
                let mut r = record(id);
                r.epoch = 3;
                r.body = Bytes::from(vec![b'x'; 100 * 1024]);
                Arc::new(r)
            })
            .collect();
        assert_eq!(sink.deliver(&batch).await, vec![Outcome::Delivered; 10]);
    }
    assert!(sink.stats().unwrap().requests() >= 2, "a part went up before pre-commit");
    assert!(bucket.objects().await.is_empty());
    sink.pre_commit(3).await.unwrap();
    sink.commit(3).await.unwrap();
    let objects = bucket.objects().await;
    assert_eq!(objects.values().next().unwrap(), &ids);
}

#[tokio::test]
async fn a_restarted_reader_finishes_an_acked_epoch() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let crashed = bucket.sink(&aws);
    crashed.deliver(&records(4, &["p", "q"])).await;
    crashed.pre_commit(4).await.unwrap();
    drop(crashed);
    // A new process: same reader identity, no memory of epoch 4.
    let restarted = bucket.sink(&aws);
    restarted.commit(4).await.unwrap();
    let objects = bucket.objects().await;
    assert_eq!(objects.values().collect::<Vec<_>>(), vec![&vec!["p".to_string(), "q".to_string()]]);
    assert_eq!(bucket.pending_uploads().await, 0);
}

#[tokio::test]
async fn a_stale_incarnations_upload_never_becomes_output() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let zombie = bucket.sink(&aws);
    zombie.deliver(&records(6, &["old"])).await;
    zombie.pre_commit(6).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let current = bucket.sink(&aws);
    current.deliver(&records(6, &["new"])).await;
    current.pre_commit(6).await.unwrap();
    current.commit(6).await.unwrap();
    let objects = bucket.objects().await;
    assert_eq!(objects.values().collect::<Vec<_>>(), vec![&vec!["new".to_string()]]);
    assert_eq!(bucket.pending_uploads().await, 0, "the zombie's upload was aborted");
}

#[tokio::test]
async fn at_least_once_records_are_visible_when_delivered() {
    let aws = localstack().await;
    let bucket = Bucket::new(&aws).await;
    let sink = bucket.sink(&aws);
    assert_eq!(sink.deliver(&records(0, &["m1", "m2"])).await, vec![Outcome::Delivered; 2]);
    let mixed = [records(0, &["m3"]), records(7, &["e1"])].concat();
    assert_eq!(sink.deliver(&mixed).await, vec![Outcome::Delivered; 2]);
    let objects = bucket.objects().await;
    let keys: Vec<_> = objects.keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("out/reader-0/direct/")), "{keys:?}");
    let ids: Vec<_> = objects.values().flatten().map(String::as_str).collect();
    assert_eq!(ids, ["m1", "m2", "m3"], "epoch 7 waits for its commit");
}

//! The task that deletes Extended Client objects: DeleteObjects per bucket, up to 1000 keys a
//! call, a few calls at once, each retried with backoff a bounded number of times.
//!
//! Why a failure ends in a line and a count, never more: the message is already deleted, so
//! nothing is left to hold back or release; what remains is an object nobody will read, which a
//! person fixes by granting `s3:DeleteObject` (or an expiry rule on the bucket).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::cleanup::{KEYS_PER_CALL, calls};
use super::events::ObjectsLeft;
use super::pointer::Pointer;
use crate::aws::{describe, error_type};
use crate::process::backoff::backoff;
use crate::process::events::Event;
use crate::process::metrics::Metrics;

/// How long the first object of a call waits for others to join it.
const LINGER: Duration = Duration::from_millis(200);
/// Calls of one DeleteObjects batch, retries included, before its keys are given up.
const ATTEMPTS: u32 = 4;
const FIRST_RETRY: Duration = Duration::from_millis(200);
const LONGEST_RETRY: Duration = Duration::from_secs(5);
const CALLS_IN_FLIGHT: usize = 4;

/// Delete what arrives on `objects` until the queue is closed and drained.
pub(super) async fn run(
    client: aws_sdk_s3::Client,
    mut objects: mpsc::Receiver<Pointer>,
    metrics: Arc<Metrics>,
) {
    let mut running = JoinSet::new();
    while let Some(first) = objects.recv().await {
        let mut batch = vec![first];
        let until = tokio::time::Instant::now() + LINGER;
        while batch.len() < KEYS_PER_CALL {
            match tokio::time::timeout_at(until, objects.recv()).await {
                Ok(Some(object)) => batch.push(object),
                Ok(None) | Err(_) => break,
            }
        }
        for (bucket, keys) in calls(batch) {
            while running.len() >= CALLS_IN_FLIGHT {
                running.join_next().await;
            }
            let (client, metrics) = (client.clone(), metrics.clone());
            running.spawn(async move { delete_with_retries(&client, &metrics, &bucket, keys).await });
        }
        while running.try_join_next().is_some() {}
    }
    while running.join_next().await.is_some() {}
}

/// Why a key was not deleted: the AWS code and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub code: String,
    pub text: String,
}

async fn delete_with_retries(
    client: &aws_sdk_s3::Client,
    metrics: &Metrics,
    bucket: &str,
    mut keys: Vec<String>,
) {
    let mut delays = backoff(FIRST_RETRY, LONGEST_RETRY);
    let mut last = None;
    for attempt in 1..=ATTEMPTS {
        match delete_once(client, bucket, &keys).await {
            Ok(failed) => {
                let deleted = keys.len() - failed.len();
                metrics.payload.object_deletes("deleted", deleted as u64);
                if failed.is_empty() {
                    return;
                }
                keys.retain(|k| failed.iter().any(|(f, _)| f == k));
                last = failed.into_iter().next().map(|(_, why)| why);
            }
            Err(why) => last = Some(why),
        }
        if attempt < ATTEMPTS {
            tracing::debug!(bucket, keys = keys.len(), attempt, "DeleteObjects failed; retrying");
            tokio::time::sleep(delays.next().unwrap_or(LONGEST_RETRY)).await;
        }
    }
    let why = last.unwrap_or(Failure { code: "unknown".into(), text: "no answer".into() });
    let reason = given_up(bucket, &keys, &why);
    ObjectsLeft { kind: "failed", objects: keys.len() as u64, reason: &reason }.emit(metrics);
}

/// One DeleteObjects call: the keys S3 did not delete, each with why.
async fn delete_once(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    keys: &[String],
) -> Result<Vec<(String, Failure)>, Failure> {
    let objects = keys.iter().map(|k| ObjectIdentifier::builder().key(k).build());
    let objects = objects.collect::<Result<Vec<_>, _>>().map_err(|e| construction(&e))?;
    let delete =
        Delete::builder().set_objects(Some(objects)).quiet(true).build().map_err(|e| construction(&e))?;
    let answer = client.delete_objects().bucket(bucket).delete(delete).send().await;
    let output = answer.map_err(|e| Failure { code: error_type(&e), text: describe(&e) })?;
    Ok(output
        .errors()
        .iter()
        .map(|e| {
            let code = e.code().unwrap_or("unknown").to_owned();
            let text = e.message().map_or_else(|| code.clone(), |m| format!("{code}: {m}"));
            (e.key().unwrap_or_default().to_owned(), Failure { code, text })
        })
        .collect())
}

fn construction(e: &aws_sdk_s3::error::BuildError) -> Failure {
    Failure { code: "construction".into(), text: e.to_string() }
}

/// One line: which objects, the AWS code, what to do.
pub fn given_up(bucket: &str, keys: &[String], why: &Failure) -> String {
    let first = keys.first().map_or("", String::as_str);
    let more = match keys.len() {
        0 | 1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    let advice = match why.code.as_str() {
        "AccessDenied" | "Forbidden" | "AllAccessDisabled" => format!(
            "grant the reader's identity s3:DeleteObject on arn:aws:s3:::{bucket}/*, or set spec.payload.extendedClient.deleteObjects to false"
        ),
        "NoSuchBucket" => "the bucket is gone; nothing is left to delete".to_owned(),
        _ => "S3 did not take the delete; remove the object by hand or with a lifecycle rule".to_owned(),
    };
    format!(
        "DeleteObjects s3://{bucket}/{first}{more} answered {} after {ATTEMPTS} attempts ({}): {advice}; the object stays, its message is already deleted",
        why.code, why.text
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_delete_names_the_object_the_code_and_the_action_to_grant() {
        let why = Failure { code: "AccessDenied".into(), text: "AccessDenied: Access Denied".into() };
        let line = given_up("payloads", &["a/1".into(), "a/2".into()], &why);
        for part in [
            "s3://payloads/a/1 and 1 more",
            "answered AccessDenied",
            "s3:DeleteObject on arn:aws:s3:::payloads/*",
        ] {
            assert!(line.contains(part), "{part:?} missing in {line}");
        }
        assert!(!line.contains('\n'));
        let gone = given_up("old", &["k".into()], &Failure { code: "NoSuchBucket".into(), text: "x".into() });
        assert!(
            gone.contains("s3://old/k answered NoSuchBucket") && gone.contains("bucket is gone"),
            "{gone}"
        );
    }
}

//! The operator's target checks against LocalStack: every sqs sink queue, dead-letter queue and
//! s3 bucket a source names is looked up for real, and each missing or unreachable one becomes a
//! one-line problem naming its field (no SDK Debug dump), which `TargetsReachable` carries; and
//! each source queue's RedrivePolicy is read into `status.queueRedrive`.
//!
//! Needs LocalStack (SQS and S3) at `SLUICE_LOCALSTACK_ENDPOINT` (default http://127.0.0.1:4566),
//! as the workspace test command provides.

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};
use sluice_crds::SqsSourceSpec;
use sluice_operator::conditions::{Outcome, TARGETS_REACHABLE, compute};
use sluice_operator::queue_check::QueueError;
use sluice_operator::queue_check::sqs::SqsInspector;
use sluice_operator::queue_check::targets::check_all;

fn endpoint() -> String {
    std::env::var("SLUICE_LOCALSTACK_ENDPOINT")
        .ok()
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:4566".to_owned())
        .trim_end_matches('/')
        .to_owned()
}

fn aws() -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "test", "test", None, None, "test",
        )))
        .build()
}

fn suffix() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// The endpoint, the SDK configuration and an SQS client for LocalStack.
fn localstack() -> (String, aws_config::SdkConfig, aws_sdk_sqs::Client) {
    let (endpoint, base) = (endpoint(), aws());
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&base).endpoint_url(&endpoint).build(),
    );
    (endpoint, base, sqs)
}

/// A queue named `name`, encrypted with `kms_key` if given; answers its URL.
async fn create_queue(sqs: &aws_sdk_sqs::Client, name: &str, kms_key: Option<&str>) -> String {
    let mut create = sqs.create_queue().queue_name(name);
    if let Some(key) = kms_key {
        create = create.attributes(aws_sdk_sqs::types::QueueAttributeName::KmsMasterKeyId, key);
    }
    let out = create.send().await.expect("LocalStack answers CreateQueue");
    out.queue_url().expect("a queue url").to_owned()
}

#[tokio::test]
async fn every_target_is_checked_and_each_problem_names_its_field_in_one_line() {
    let (endpoint, base, sqs) = localstack();
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&base).endpoint_url(&endpoint).force_path_style(true).build(),
    );
    let name = format!("targets-{}", suffix());
    let queue_url = create_queue(&sqs, &name, None).await;
    s3.create_bucket().bucket(&name).send().await.expect("LocalStack answers CreateBucket");
    let missing_queue = queue_url.replace(&name, &format!("{name}-gone"));

    let spec: SqsSourceSpec = serde_json::from_value(serde_json::json!({
        "queues": [{ "url": queue_url.replace(&name, "source"), "endpoint": endpoint }],
        "sinks": [
            { "name": "copy", "sqs": { "queueUrl": queue_url, "endpoint": endpoint } },
            { "name": "lost", "sqs": { "queueUrl": missing_queue, "endpoint": endpoint } },
            { "name": "archive", "s3": { "bucket": name, "endpoint": endpoint } },
            { "name": "nowhere", "s3": { "bucket": format!("{name}-gone"), "endpoint": endpoint } },
            { "name": "down", "sqs": { "queueUrl": "http://127.0.0.1:9/queue/us-east-1/000000000000/q", "endpoint": "http://127.0.0.1:9" } },
        ],
        "deadLetterSink": { "name": "dead", "sqs": { "queueUrl": missing_queue, "endpoint": endpoint } },
    }))
    .expect("a spec");

    let inspector = SqsInspector::new(base);
    let seen = check_all(&inspector, &spec).await;
    let results: Vec<(&str, Result<(), String>)> = seen
        .iter()
        .map(|o| {
            let kind = match &o.result {
                Ok(()) => Ok(()),
                Err(QueueError::DoesNotExist) => Err("missing".to_owned()),
                Err(QueueError::Denied(_)) => Err("denied".to_owned()),
                Err(QueueError::Unavailable(_)) => Err("unavailable".to_owned()),
            };
            (o.target.field.as_str(), kind)
        })
        .collect();
    assert_eq!(
        results,
        vec![
            ("spec.sinks[0].sqs.queueUrl", Ok(())),
            ("spec.sinks[1].sqs.queueUrl", Err("missing".into())),
            ("spec.sinks[2].s3.bucket", Ok(())),
            ("spec.sinks[3].s3.bucket", Err("missing".into())),
            ("spec.sinks[4].sqs.queueUrl", Err("unavailable".into())),
            ("spec.deadLetterSink.sqs.queueUrl", Err("missing".into())),
        ]
    );
    for o in &seen {
        let Some(problem) = o.problem() else { continue };
        println!("{problem}");
        assert!(problem.starts_with(&o.target.field), "{problem}");
        assert!(!problem.contains('{') && !problem.contains('\n') && problem.len() < 300, "{problem}");
    }
    let down = seen[4].problem().unwrap_or_default();
    assert!(down.contains("GetQueueAttributes could not reach the endpoint"), "{down}");

    let deployment = k8s_openapi::api::apps::v1::Deployment::default();
    let computed =
        compute(Outcome::Applied { spec: &spec, queues: &[], targets: &seen, deployment: &deployment });
    let verdict = computed.verdicts.iter().find(|v| v.type_ == TARGETS_REACHABLE).expect("TargetsReachable");
    assert_eq!((verdict.status, verdict.reason.as_str()), ("False", "TargetDoesNotExist"));
    assert!(verdict.message.contains("spec.deadLetterSink.sqs.queueUrl: queue"), "{}", verdict.message);
    let ready = computed.verdicts.iter().find(|v| v.type_ == "Ready").expect("Ready");
    assert_eq!((ready.status, ready.reason.as_str()), ("False", "TargetDoesNotExist"));

    sqs.delete_queue().queue_url(&queue_url).send().await.expect("DeleteQueue");
    s3.delete_bucket().bucket(&name).send().await.expect("DeleteBucket");
}

/// A source queue encrypted with a customer-managed KMS key: the operator reads `KmsMasterKeyId`
/// and names the key and `kms:Decrypt` for the readers. LocalStack here runs without its KMS
/// service, so the key is only an attribute SQS stores; the readers' decrypt is not exercised.
#[tokio::test]
async fn a_kms_encrypted_source_queue_names_its_key_and_kms_decrypt() {
    use sluice_operator::queue_check::QueueInspector;
    let (endpoint, base, sqs) = localstack();
    let name = format!("kms-{}", suffix());
    let url = create_queue(&sqs, &name, Some("alias/sluice-orders")).await;
    let spec: SqsSourceSpec = serde_json::from_value(serde_json::json!({
        "queues": [{ "url": url, "endpoint": endpoint }],
        "sinks": [{ "name": "log", "log": {} }],
        "deadLetterSink": { "name": "dead", "sqs": { "queueUrl": url, "endpoint": endpoint } },
    }))
    .expect("a spec");
    let attrs = SqsInspector::new(base).inspect(&spec.queues[0]).await.expect("the queue answers");
    assert_eq!(attrs.kms_master_key_id.as_deref(), Some("alias/sluice-orders"));
    let findings = sluice_operator::queue_check::checks::check_queue(&spec, 0, &name, &attrs);
    let kms = findings.iter().find(|f| f.reason == "QueueEncryptedWithKmsKey").expect("a KMS finding");
    println!("{}", kms.message);
    assert!(kms.message.contains("alias/sluice-orders") && kms.message.contains("kms:Decrypt"));
    sqs.delete_queue().queue_url(&url).send().await.expect("DeleteQueue");
}

/// Two source queues with a RedrivePolicy into a real dead-letter queue, maxReceiveCount 5 and
/// 1: the status shows each count and the DLQ's ARN, and maxReceiveCount 1 is a warning (the
/// QueueConfigValid message and a Warning event) that names the queue and the DLQ.
#[tokio::test]
async fn the_status_shows_each_queues_max_receive_count_and_warns_on_one() {
    use aws_sdk_sqs::types::QueueAttributeName;
    use sluice_operator::conditions::{QUEUE_CONFIG_VALID, owned_status};
    use sluice_operator::queue_check::inspect_all;
    let (endpoint, base, sqs) = localstack();
    let name = format!("redrive-{}", suffix());
    let dlq = create_queue(&sqs, &format!("{name}-dlq"), None).await;
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("LocalStack answers GetQueueAttributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("a queue ARN");
    let mut urls = Vec::new();
    for count in [5, 1] {
        let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":{count}}}"#);
        let url = sqs
            .create_queue()
            .queue_name(format!("{name}-{count}"))
            .attributes(QueueAttributeName::RedrivePolicy, policy)
            .send()
            .await
            .expect("LocalStack answers CreateQueue")
            .queue_url()
            .expect("a queue url")
            .to_owned();
        urls.push(url);
    }
    let spec: SqsSourceSpec = serde_json::from_value(serde_json::json!({
        "queues": [{ "url": urls[0], "endpoint": endpoint }, { "url": urls[1], "endpoint": endpoint }],
        "sinks": [{ "name": "log", "log": {} }],
    }))
    .expect("a spec");
    let queues = inspect_all(&SqsInspector::new(base), &spec).await;
    let deployment = k8s_openapi::api::apps::v1::Deployment::default();
    let computed =
        compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &deployment });
    let status = owned_status(&computed, None, Some(1), k8s_openapi::jiff::Timestamp::now());
    let shown: Vec<(String, Option<u32>, Option<String>)> = status
        .queue_redrive
        .iter()
        .map(|r| (r.queue.clone(), r.max_receive_count, r.dead_letter_target_arn.clone()))
        .collect();
    assert_eq!(
        shown,
        [
            (urls[0].clone(), Some(5), Some(dlq_arn.clone())),
            (urls[1].clone(), Some(1), Some(dlq_arn.clone()))
        ]
    );
    let config = computed.verdicts.iter().find(|v| v.type_ == QUEUE_CONFIG_VALID).expect("QueueConfigValid");
    assert_eq!((config.status, config.reason.as_str()), ("True", "MaxReceiveCountOne"), "{}", config.message);
    assert!(
        config.message.contains("spec.queues[1]") && config.message.contains(&dlq_arn),
        "{}",
        config.message
    );
    assert!(computed.warnings.iter().any(|w| w.reason == "MaxReceiveCountOne"));
    println!("status.queueRedrive: {}", serde_json::to_string(&status.queue_redrive).unwrap_or_default());
    println!("QueueConfigValid: {} ({}): {}", config.status, config.reason, config.message);
}

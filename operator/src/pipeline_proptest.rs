//! Property test: any spec, valid or not, goes through validate → build → conditions → events
//! without a panic, and the pipeline's promises hold for it.
//!
//! Why mutate fixtures rather than generate from nothing: arbitrary values for the fields that
//! matter (counts, bounds, optional references, names) reach deep into the pipeline only when the
//! rest of the object is plausible; the JSON-level case covers objects that do not parse at all.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use sluice_crds::{CredentialSource, Guarantee, SecretCredentialsRef, SqsSource};

use crate::build::build;
use crate::conditions::{OWNED, Outcome, compute, owned_status};
use crate::events::{Happened, notices};
use crate::fixtures;
use crate::queue_check::{QueueAttributes, QueueError, QueueObservation};
use crate::validate::validate;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z0-9.-]{1,12}",
        "https?://[a-z0-9.:/-]{0,40}",
        "arn:aws:iam::[0-9]{12}:role/[a-z]{1,8}",
        "\\PC{0,80}",
    ]
}

#[derive(Clone, Debug)]
struct Mutation {
    fixture: usize,
    name: Option<String>,
    url: Option<Option<String>>,
    queue_name: Option<Option<String>>,
    region: Option<Option<String>>,
    endpoint: Option<Option<String>>,
    weight: Option<u32>,
    credentials: Option<(u8, Option<String>, Option<String>)>,
    max_messages: Option<i32>,
    wait: Option<i32>,
    visibility: Option<Option<i32>>,
    pollers: Option<i32>,
    exactly_once: Option<bool>,
    interval: Option<Option<i32>>,
    clear_sinks: bool,
    min_replicas: Option<i32>,
    max_replicas: Option<i32>,
    grace: Option<Option<i64>>,
    image: Option<Option<String>>,
    log_level: Option<Option<String>>,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    (
        (
            0..fixtures::ALL.len(),
            proptest::option::of(text()),
            proptest::option::of(proptest::option::of(text())),
        ),
        (
            proptest::option::of(proptest::option::of(text())),
            proptest::option::of(proptest::option::of(text())),
            proptest::option::of(proptest::option::of(text())),
            proptest::option::of(any::<u32>()),
        ),
        proptest::option::of((0u8..3, proptest::option::of(text()), proptest::option::of(text()))),
        (
            proptest::option::of(any::<i32>()),
            proptest::option::of(any::<i32>()),
            proptest::option::of(proptest::option::of(any::<i32>())),
            proptest::option::of(any::<i32>()),
        ),
        (
            proptest::option::of(any::<bool>()),
            proptest::option::of(proptest::option::of(any::<i32>())),
            any::<bool>(),
        ),
        (
            proptest::option::of(any::<i32>()),
            proptest::option::of(any::<i32>()),
            proptest::option::of(proptest::option::of(any::<i64>())),
            proptest::option::of(proptest::option::of(text())),
            proptest::option::of(proptest::option::of(text())),
        ),
    )
        .prop_map(
            |((fixture, name, url), (queue_name, region, endpoint, weight), credentials, r, d, s)| Mutation {
                fixture,
                name,
                url,
                queue_name,
                region,
                endpoint,
                weight,
                credentials,
                max_messages: r.0,
                wait: r.1,
                visibility: r.2,
                pollers: r.3,
                exactly_once: d.0,
                interval: d.1,
                clear_sinks: d.2,
                min_replicas: s.0,
                max_replicas: s.1,
                grace: s.2,
                image: s.3,
                log_level: s.4,
            },
        )
}

fn apply(m: &Mutation) -> SqsSource {
    let mut s = fixtures::source(fixtures::ALL[m.fixture]);
    if let Some(name) = &m.name {
        s.metadata.name = Some(name.clone());
    }
    if let Some(q) = s.spec.queues.first_mut() {
        if let Some(v) = &m.url {
            q.url = v.clone();
        }
        if let Some(v) = &m.queue_name {
            q.name = v.clone();
        }
        if let Some(v) = &m.region {
            q.region = v.clone();
        }
        if let Some(v) = &m.endpoint {
            q.endpoint = v.clone();
        }
        if let Some(v) = m.weight {
            q.weight = v;
        }
    }
    if let Some((kind, arn, secret)) = &m.credentials {
        let c = &mut s.spec.credentials;
        c.source = [CredentialSource::DefaultChain, CredentialSource::AssumeRole, CredentialSource::Secret]
            [usize::from(*kind)];
        c.role_arn = arn.clone();
        c.secret_ref = secret.clone().map(|name| SecretCredentialsRef {
            name,
            access_key_id_key: "AWS_ACCESS_KEY_ID".into(),
            secret_access_key_key: "AWS_SECRET_ACCESS_KEY".into(),
            session_token_key: None,
        });
    }
    let r = &mut s.spec.receive;
    r.max_messages = m.max_messages.unwrap_or(r.max_messages);
    r.wait_time_seconds = m.wait.unwrap_or(r.wait_time_seconds);
    r.visibility_timeout_seconds = m.visibility.unwrap_or(r.visibility_timeout_seconds);
    r.pollers = m.pollers.unwrap_or(r.pollers);
    if let Some(once) = m.exactly_once {
        s.spec.delivery.guarantee = if once { Guarantee::ExactlyOnce } else { Guarantee::AtLeastOnce };
    }
    if let Some(i) = m.interval {
        s.spec.delivery.checkpoint_interval_seconds = i;
    }
    if m.clear_sinks {
        s.spec.sinks.clear();
    }
    s.spec.scaling.min_replicas = m.min_replicas.unwrap_or(s.spec.scaling.min_replicas);
    s.spec.scaling.max_replicas = m.max_replicas.unwrap_or(s.spec.scaling.max_replicas);
    if let Some(g) = m.grace {
        s.spec.reader.termination_grace_period_seconds = g;
    }
    if let Some(i) = &m.image {
        s.spec.reader.image = i.clone();
    }
    if let Some(l) = &m.log_level {
        s.spec.reader.log_level = l.clone();
    }
    s
}

fn queue_result() -> impl Strategy<Value = Result<QueueAttributes, QueueError>> {
    prop_oneof![
        (any::<bool>(), any::<i64>(), proptest::option::of(text()), any::<i64>(), any::<i64>()).prop_map(
            |(fifo, visibility, redrive, size, visible)| Ok(QueueAttributes {
                url: "u".into(),
                fifo,
                visibility_timeout_seconds: visibility,
                redrive_policy: redrive,
                maximum_message_size: size,
                visible,
                in_flight: visible,
                delayed: visible,
                ..QueueAttributes::default()
            })
        ),
        Just(Err(QueueError::DoesNotExist)),
        text().prop_map(|t| Err(QueueError::Denied(t))),
        text().prop_map(|t| Err(QueueError::Unavailable(t))),
    ]
}

fn deployment() -> impl Strategy<Value = Deployment> {
    (
        proptest::option::of(any::<i32>()),
        proptest::option::of(any::<i32>()),
        proptest::option::of(any::<i32>()),
    )
        .prop_map(|(replicas, ready, updated)| Deployment {
            spec: Some(DeploymentSpec { replicas, ..DeploymentSpec::default() }),
            status: Some(DeploymentStatus {
                replicas,
                ready_replicas: ready,
                updated_replicas: updated,
                ..DeploymentStatus::default()
            }),
            ..Deployment::default()
        })
}

fn is_pascal_case(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && s.chars().all(|c| c.is_ascii_alphanumeric())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_spec_goes_through_the_pipeline_without_panicking(
        m in mutation(),
        queues in proptest::collection::vec(queue_result(), 0..3),
        d in deployment(),
        image in proptest::option::of(text()),
    ) {
        let source = apply(&m);
        let generation = source.metadata.generation;
        match validate(&source, image.as_deref()) {
            Err(problems) => {
                prop_assert!(!problems.is_empty());
                for p in &problems {
                    prop_assert!(is_pascal_case(p.reason), "{}", p.reason);
                    prop_assert!(!p.message.is_empty());
                }
                let computed = compute(Outcome::Invalid { problems: &problems });
                let events = notices(&Happened { previous: None, generation, computed: &computed, problems: &problems, config_hash: None });
                prop_assert!(events.len() >= problems.len());
                let status = owned_status(&computed, None, generation, Timestamp::UNIX_EPOCH);
                let types: Vec<_> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
                prop_assert_eq!(types, OWNED.to_vec());
            }
            Ok(valid) => {
                let children = build(&valid);
                prop_assert!(children.is_ok(), "{:?}", children.err());
                let children = children.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(children.deployment.spec.as_ref().and_then(|s| s.replicas).is_none());
                let observations: Vec<_> = queues
                    .into_iter()
                    .enumerate()
                    .map(|(index, result)| QueueObservation { index, label: format!("q{index}"), result })
                    .collect();
                let computed = compute(Outcome::Applied { spec: &source.spec, queues: &observations, targets: &[], deployment: &d });
                for v in &computed.verdicts {
                    prop_assert!(is_pascal_case(&v.reason), "{}", v.reason);
                }
                let status = owned_status(&computed, None, generation, Timestamp::UNIX_EPOCH);
                let _ = notices(&Happened { previous: Some(&status), generation: generation.map(|g| g + 1), computed: &computed, problems: &[], config_hash: Some(&children.config_hash) });
                let no_checkpoints = usize::from(source.spec.delivery.guarantee != sluice_crds::Guarantee::ExactlyOnce);
                prop_assert_eq!(status.conditions.len(), OWNED.len() + no_checkpoints);
            }
        }
    }

    #[test]
    fn any_json_either_fails_to_parse_or_validates(value in proptest::arbitrary::any::<(Option<String>, Option<i64>, Option<bool>)>()) {
        let (text, number, flag) = value;
        let json = serde_json::json!({
            "apiVersion": "sluice.dev/v1alpha1",
            "kind": "SqsSource",
            "metadata": {"name": text.clone(), "namespace": "ns", "uid": "u"},
            "spec": {
                "queues": [{"url": text, "weight": number}],
                "sinks": [{"name": "s", "log": {"body": flag}}],
                "receive": {"maxMessages": number},
            }
        });
        if let Ok(source) = serde_json::from_value::<SqsSource>(json) {
            let _ = validate(&source, Some("img")).map(|v| build(&v).map(|c| c.config_hash));
        }
    }
}

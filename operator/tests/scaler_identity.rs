//! The autoscaler reads a source's queue with the source's identity: a source that names a role
//! is read with credentials from sts:AssumeRole (the source's role, external id and session
//! name), assumed from the operator's own identity once and reused; any other source is read with
//! the operator's identity. A local HTTP server stands in for STS and SQS and records who signed
//! each request (the access key in the SigV4 `Credential=` scope, the session token header).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use aws_config::{BehaviorVersion, Region};
use aws_sdk_sqs::config::Credentials as AwsCredentials;
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use sluice_crds::{Credentials, QueueRef};
use sluice_operator::queue_check::sqs::SqsInspector;
use sluice_operator::scaler::{QueueAttributes, SqsQueueAttributes};

const OPERATOR_KEY: &str = "AKIAOPERATOR";
const ASSUMED_KEY: &str = "ASIAASSUMEDROLE";
const ASSUMED_TOKEN: &str = "session-token-of-the-source-role";

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    service: &'static str,
    access_key: String,
    session_token: Option<String>,
    body: String,
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn access_key(headers: &HeaderMap) -> String {
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    auth.split("Credential=").nth(1).and_then(|c| c.split('/').next()).unwrap_or_default().to_owned()
}

async fn answer(log: Log, headers: HeaderMap, body: Bytes) -> axum::response::Response {
    let body = String::from_utf8_lossy(&body).into_owned();
    let target = headers.get("x-amz-target").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let service = if target.starts_with("AmazonSQS.") { "sqs" } else { "sts" };
    let seen = Seen {
        service,
        access_key: access_key(&headers),
        session_token: headers.get("x-amz-security-token").and_then(|v| v.to_str().ok()).map(str::to_owned),
        body: body.clone(),
    };
    log.lock().expect("log").push(seen);
    if service == "sqs" {
        let figures = r#"{"Attributes":{"ApproximateNumberOfMessages":"3","ApproximateNumberOfMessagesNotVisible":"1","ApproximateNumberOfMessagesDelayed":"0"}}"#;
        return ([(header::CONTENT_TYPE, "application/x-amz-json-1.0")], figures).into_response();
    }
    if body.contains("denied") {
        let error = "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>not authorized to perform sts:AssumeRole</Message></Error><RequestId>1</RequestId></ErrorResponse>";
        return (StatusCode::FORBIDDEN, [(header::CONTENT_TYPE, "text/xml")], error).into_response();
    }
    let ok = format!(
        "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleResult><Credentials>\
         <AccessKeyId>{ASSUMED_KEY}</AccessKeyId><SecretAccessKey>secret</SecretAccessKey>\
         <SessionToken>{ASSUMED_TOKEN}</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials>\
         <AssumedRoleUser><Arn>arn:aws:sts::210987654321:assumed-role/data/s</Arn><AssumedRoleId>AROA1:s</AssumedRoleId></AssumedRoleUser>\
         </AssumeRoleResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleResponse>"
    );
    ([(header::CONTENT_TYPE, "text/xml")], ok).into_response()
}

/// Starts the stand-in on a loopback port; returns its URL and the request log.
async fn aws_stand_in() -> (String, Log) {
    let log: Log = Arc::default();
    let app = Router::new().fallback({
        let log = log.clone();
        move |headers: HeaderMap, body: Bytes| answer(log.clone(), headers, body)
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr: SocketAddr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (format!("http://{addr}"), log)
}

/// SQS clients with the operator's own identity, pointed at the stand-in.
async fn operator_clients(url: &str) -> SqsInspector {
    let own = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(AwsCredentials::new(OPERATOR_KEY, "secret", None, None, "operator"))
        .endpoint_url(url)
        .load()
        .await;
    SqsInspector::new(own)
}

async fn attributes(url: &str) -> SqsQueueAttributes {
    SqsQueueAttributes::new(operator_clients(url).await)
}

fn queue(url: &str) -> QueueRef {
    QueueRef {
        url: Some(format!("{url}/210987654321/events")),
        name: None,
        region: Some("us-east-1".into()),
        endpoint: Some(url.to_owned()),
        weight: 1,
    }
}

fn credentials(yaml: &str) -> Credentials {
    serde_yaml::from_str(yaml).expect("credentials")
}

#[tokio::test]
async fn a_source_naming_a_role_is_read_with_that_role_assumed_once() {
    let (url, log) = aws_stand_in().await;
    let attributes = attributes(&url).await;
    let role = credentials(
        "source: AssumeRole\nroleArn: arn:aws:iam::210987654321:role/events-data\nexternalId: analytics\nsessionName: sluice-events\n",
    );
    for _ in 0..3 {
        let figures = attributes.figures(&queue(&url), &role).await.expect("figures");
        assert_eq!((figures.visible, figures.in_flight, figures.delayed), (3, 1, 0));
    }
    let seen = log.lock().expect("log").clone();
    let sts: Vec<_> = seen.iter().filter(|s| s.service == "sts").collect();
    assert_eq!(sts.len(), 1, "one AssumeRole for three polls: {seen:?}");
    assert_eq!(sts[0].access_key, OPERATOR_KEY, "the role is assumed from the operator's identity");
    for part in [
        "Action=AssumeRole",
        "RoleArn=arn%3Aaws%3Aiam%3A%3A210987654321%3Arole%2Fevents-data",
        "ExternalId=analytics",
        "RoleSessionName=sluice-events",
    ] {
        assert!(sts[0].body.contains(part), "{part} missing from {}", sts[0].body);
    }
    let sqs: Vec<_> = seen.iter().filter(|s| s.service == "sqs").collect();
    assert_eq!(sqs.len(), 3);
    for call in sqs {
        assert_eq!(call.access_key, ASSUMED_KEY, "GetQueueAttributes signed by the source's role");
        assert_eq!(call.session_token.as_deref(), Some(ASSUMED_TOKEN));
    }
    assert_eq!(attributes.identities().assumed_roles(), 1);
}

#[tokio::test]
async fn a_source_on_the_default_chain_is_read_with_the_operators_identity() {
    let (url, log) = aws_stand_in().await;
    let attributes = attributes(&url).await;
    let figures = attributes.figures(&queue(&url), &Credentials::default()).await.expect("figures");
    assert_eq!(figures.visible, 3);
    let seen = log.lock().expect("log").clone();
    assert!(seen.iter().all(|s| s.service == "sqs" && s.access_key == OPERATOR_KEY), "{seen:?}");
    assert_eq!(attributes.identities().assumed_roles(), 0);
}

#[tokio::test]
async fn a_role_the_operator_may_not_assume_fails_with_a_readable_error() {
    let (url, log) = aws_stand_in().await;
    let attributes = attributes(&url).await;
    let role = credentials("source: AssumeRole\nroleArn: arn:aws:iam::210987654321:role/denied\n");
    let error = attributes.figures(&queue(&url), &role).await.expect_err("denied");
    let text = error.to_string();
    assert!(text.starts_with(&format!("queue {url}/210987654321/events: ")), "{text}");
    assert!(text.contains("AccessDenied") || text.contains("not authorized"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
    let seen = log.lock().expect("log").clone();
    assert!(seen.iter().all(|s| s.service == "sts"), "no SQS call without the role: {seen:?}");
    assert!(seen.iter().any(|s| s.body.contains("RoleSessionName=sluice-operator")), "{seen:?}");
}

#[tokio::test]
async fn the_reconcilers_queue_check_uses_the_source_role_too() {
    use sluice_operator::identity::Identities;
    use sluice_operator::queue_check::inspect_all;

    let (url, log) = aws_stand_in().await;
    let identities = Identities::new(operator_clients(&url).await);
    let mut spec: sluice_crds::SqsSourceSpec = serde_yaml::from_str(&format!(
        "queues: [{{url: '{url}/210987654321/events', endpoint: '{url}', region: us-east-1}}]\nsinks: [{{name: out, log: {{}}}}]\n"
    ))
    .expect("spec");
    spec.credentials =
        credentials("source: AssumeRole\nroleArn: arn:aws:iam::210987654321:role/events-data\n");
    let observed = inspect_all(&identities, &spec).await;
    assert!(observed[0].result.is_ok(), "{:?}", observed[0].result);
    let seen = log.lock().expect("log").clone();
    let sqs: Vec<_> = seen.iter().filter(|s| s.service == "sqs").collect();
    assert!(!sqs.is_empty() && sqs.iter().all(|s| s.access_key == ASSUMED_KEY), "{seen:?}");
}

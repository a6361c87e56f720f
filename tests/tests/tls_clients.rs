//! One HTTPS request through each client the binaries use (reqwest, the AWS SDK, kube) against a local
//! TLS server with a test certificate.
//!
//! Why: the workspace compiles one rustls crypto provider (aws-lc-rs) and no binary installs one by hand;
//! rustls picks the only one compiled in. If a feature change brought a second provider back (or left
//! none), building any of these clients would panic at run time, which no plain-HTTP test notices
//! (LocalStack and the local control plane are plain HTTP on loopback). Each client is given the test CA
//! the way a user gives theirs (kube: the kubeconfig's CA data; reqwest: an extra root; the AWS SDK: a
//! trust store), so each handshake also proves that certificate verification is on.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

const CA: &[u8] = include_bytes!("../fixtures/tls/ca.pem");
const SERVER_CERT: &[u8] = include_bytes!("../fixtures/tls/server.pem");
const SERVER_KEY: &[u8] = include_bytes!("../fixtures/tls/server.key");
const BOUND: Duration = Duration::from_secs(30);

/// Serves HTTP/1.1 over TLS on 127.0.0.1 until the test ends, answering by what the request asks for:
/// SQS's JSON protocol (`X-Amz-Target`), a ConfigMap GET (kube), anything else with `ok`.
async fn serve() -> String {
    let certs = vec![CertificateDer::from_pem_slice(SERVER_CERT).expect("server cert")];
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY).expect("server key");
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server TLS config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&request).to_ascii_lowercase();
                let (content_type, body) = if head.contains("x-amz-target: amazonsqs.listqueues") {
                    ("application/x-amz-json-1.0", r#"{"QueueUrls":["https://127.0.0.1/q"]}"#.to_owned())
                } else if head.starts_with("get /api/v1/namespaces/default/configmaps/probe") {
                    (
                        "application/json",
                        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"probe","namespace":"default"},"data":{"tls":"ok"}}"#
                            .to_owned(),
                    )
                } else {
                    ("text/plain", "ok".to_owned())
                };
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    format!("https://localhost:{}", addr.port())
}

#[tokio::test]
async fn reqwest_speaks_https_with_the_workspace_provider() {
    tokio::time::timeout(BOUND, async {
        let url = serve().await;
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(CA).expect("CA"))
            .build()
            .expect("reqwest client builds without a provider installed by hand");
        let response = client.get(format!("{url}/")).send().await.expect("HTTPS GET");
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.expect("body"), "ok");

        let untrusting = reqwest::Client::new();
        assert!(untrusting.get(format!("{url}/")).send().await.is_err(), "an unknown CA is refused");
    })
    .await
    .expect("within bound");
}

#[tokio::test]
async fn the_aws_sdk_speaks_https_with_the_workspace_provider() {
    use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};

    tokio::time::timeout(BOUND, async {
        let url = serve().await;
        let tls_context = TlsContext::builder()
            .with_trust_store(TrustStore::empty().with_pem_certificate(CA))
            .build()
            .expect("TLS context");
        let http_client = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::AwsLc))
            .tls_context(tls_context)
            .build_https();
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(http_client)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "test"))
            .endpoint_url(&url)
            .load()
            .await;
        let sqs = aws_sdk_sqs::Client::new(&config);
        let listed = sqs.list_queues().send().await.expect("ListQueues over HTTPS");
        assert_eq!(listed.queue_urls(), ["https://127.0.0.1/q"]);
    })
    .await
    .expect("within bound");
}

#[tokio::test]
async fn kube_speaks_https_with_the_workspace_provider() {
    use k8s_openapi::api::core::v1::ConfigMap;

    tokio::time::timeout(BOUND, async {
        let url = serve().await;
        let mut config = kube::Config::new(url.parse().expect("URL"));
        config.root_cert = Some(vec![CertificateDer::from_pem_slice(CA).expect("CA").to_vec()]);
        config.default_namespace = "default".into();
        let client =
            kube::Client::try_from(config).expect("kube client builds without a provider installed by hand");
        let api: kube::Api<ConfigMap> = kube::Api::default_namespaced(client);
        let probe = api.get("probe").await.expect("GET over HTTPS");
        assert_eq!(probe.data.and_then(|d| d.get("tls").cloned()).as_deref(), Some("ok"));
    })
    .await
    .expect("within bound");
}

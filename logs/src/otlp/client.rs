//! The HTTP client the OTLP exporter sends through: the workspace's reqwest (one HTTP stack, one
//! TLS provider), run on the binary's tokio runtime.
//!
//! Why not the exporter's own client: opentelemetry-otlp's reqwest feature pins another reqwest
//! major (a second HTTP client and TLS set-up in every binary). Why spawn: the SDK's batch
//! processor exports from its own thread, outside any runtime, and an async reqwest request needs
//! tokio's reactor; the request runs on the runtime and the batch thread only waits for it.

use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use tokio::runtime::Handle;

/// One request's bound: a collector that accepts the connection and never answers costs the
/// batch thread this long per attempt, never the data path.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The last request's failure with its causes, for the WARN line: the exporter's own error says
/// only "network error", not "connection refused" or which certificate was wrong.
pub type LastError = Arc<Mutex<Option<String>>>;

#[derive(Debug)]
pub struct OnRuntime {
    client: reqwest::Client,
    runtime: Handle,
    last_error: LastError,
}

impl OnRuntime {
    pub fn new(runtime: Handle, last_error: LastError) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot set up the OTLP HTTP client: {e}"))?;
        Ok(Self { client, runtime, last_error })
    }
}

async fn send(client: reqwest::Client, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
    let response = client.execute(reqwest::Request::try_from(request)?).await?;
    let mut answer = Response::builder().status(response.status());
    if let Some(headers) = answer.headers_mut() {
        *headers = response.headers().clone();
    }
    Ok(answer.body(response.bytes().await?)?)
}

impl HttpClient for OnRuntime {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        let task = self.runtime.spawn(send(self.client.clone(), request));
        let last_error = self.last_error.clone();
        Box::pin(async move {
            let answer = task.await?;
            // Cleared by an answer: a refusing collector's status is in the exporter's own error.
            let seen = answer.as_ref().err().map(|e| with_causes(&**e));
            *last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = seen;
            answer
        })
    }
}

/// `error: cause: cause`, each told once (reqwest repeats its source in its own text).
fn with_causes(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

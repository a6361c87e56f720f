//! A minimal in-memory SQS for this bench only: the SQS JSON protocol (what the Rust SDK speaks),
//! one process, no persistence, no IAM, no FIFO, no redrive. It exists because the round-trip
//! question ("does the reader keep `pollers x 10 / RTT` messages a second in flight?") needs an SQS
//! whose own time per call is far below the round trip, and neither LocalStack (40-85 ms a receive
//! under load on these machines) nor moto's server mode (5.2.5: about 170 ms a ReceiveMessage from
//! boto3, 48 ms a SendMessageBatch; BENCHMARKS.md) is. Real SQS answers in a few milliseconds.
//!
//! What it implements is exactly what the bench and the two consumers call: CreateQueue,
//! GetQueueUrl, ListQueues, DeleteQueue, GetQueueAttributes, SendMessage(Batch), ReceiveMessage
//! (long poll, visibility timeout, the system attributes a reader asks for), DeleteMessage(Batch),
//! ChangeMessageVisibility(Batch). Anything else answers `UnsupportedOperation`, so a consumer that
//! starts needing more fails loudly instead of being measured against a pretend answer. Never used
//! by the correctness suites: those run against LocalStack.
//!
//! Its own time per call (handler entry to answer, no network) is measured and printed beside every
//! result, so a reader can see it stayed small next to the RTT.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use md5::{Digest, Md5};
use serde_json::{Value, json};
use tokio::sync::Notify;

const ACCOUNT: &str = "000000000000";

/// A running stand-in; dropped with the bench process.
pub struct StandIn {
    pub url: String,
    state: Arc<Shared>,
}

impl StandIn {
    /// Handler time per call so far: (calls, mean microseconds, max microseconds).
    pub fn own_time(&self) -> (u64, f64, f64) {
        let calls = self.state.calls.load(Ordering::Relaxed);
        let total = self.state.busy_micros.load(Ordering::Relaxed) as f64;
        let max = self.state.max_micros.load(Ordering::Relaxed) as f64;
        (calls, if calls == 0 { 0.0 } else { total / calls as f64 }, max)
    }

    /// ReceiveMessage calls so far and their summed handler time (microseconds): a run's share is
    /// the difference of two readings.
    pub fn receive_time(&self) -> (u64, u64) {
        (self.state.receives.load(Ordering::Relaxed), self.state.receive_micros.load(Ordering::Relaxed))
    }
}

/// Binds 127.0.0.1 on a free port and serves, on `runtime`, until the process ends.
pub fn start_on(runtime: &tokio::runtime::Handle) -> Result<StandIn, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    let url = format!("http://{addr}");
    let state = Arc::new(Shared { base: url.clone(), ..Shared::default() });
    let app = axum::Router::new().fallback(handle).with_state(state.clone());
    runtime.spawn(async move {
        // Registered with the reactor of the runtime that serves it.
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
        // Answers go out at once (no Nagle wait behind an unacknowledged segment), as from SQS.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let _ = axum::serve(listener, app).await;
    });
    Ok(StandIn { url, state })
}

#[derive(Default)]
struct Shared {
    base: String,
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    next_id: AtomicU64,
    calls: AtomicU64,
    busy_micros: AtomicU64,
    max_micros: AtomicU64,
    /// The same for ReceiveMessage alone.
    receives: AtomicU64,
    receive_micros: AtomicU64,
}

struct Message {
    id: String,
    body: String,
    md5: String,
    sent_ms: u128,
    receives: u32,
    first_receive_ms: Option<u128>,
}

#[derive(Default)]
struct Messages {
    visible: VecDeque<Message>,
    /// Receipt handle -> (message, visible again at).
    in_flight: HashMap<String, (Message, Instant)>,
    /// In-flight receipts by when they become visible again, so expiry is not a scan.
    expiry: BTreeMap<(Instant, u64), String>,
}

struct Queue {
    visibility: Duration,
    messages: Mutex<Messages>,
    arrived: Notify,
}

impl Messages {
    fn expire(&mut self, now: Instant) {
        while let Some((&(at, seq), _)) = self.expiry.first_key_value() {
            if at > now {
                break;
            }
            let receipt = self.expiry.remove(&(at, seq)).expect("just seen");
            // A receipt whose visibility was changed has a newer entry; only the current one counts.
            if let Some((_, visible_at)) = self.in_flight.get(&receipt)
                && *visible_at == at
            {
                let (message, _) = self.in_flight.remove(&receipt).expect("just seen");
                self.visible.push_back(message);
            }
        }
    }
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

fn md5_hex(text: &str) -> String {
    Md5::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// An SQS JSON-protocol error: its code and message.
struct Fault(&'static str, String);

fn fault(code: &'static str, message: &str) -> Fault {
    Fault(code, message.to_owned())
}

impl IntoResponse for Fault {
    fn into_response(self) -> Response {
        let body = json!({ "__type": format!("com.amazonaws.sqs#{}", self.0), "message": self.1 });
        (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/x-amz-json-1.0")], body.to_string())
            .into_response()
    }
}

async fn handle(State(state): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let started = Instant::now();
    let action = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("AmazonSQS."))
        .unwrap_or("")
        .to_owned();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answer = match action.as_str() {
        // The long poll is waiting, not work: it is timed apart from the rest (below).
        "ReceiveMessage" => return receive(&state, &request, started).await,
        _ => act(&state, &action, &request),
    };
    state.record(started.elapsed());
    match answer {
        Ok(value) => {
            ([(header::CONTENT_TYPE, "application/x-amz-json-1.0")], value.to_string()).into_response()
        }
        Err(fault) => fault.into_response(),
    }
}

impl Shared {
    fn record(&self, took: Duration) {
        let micros = took.as_micros() as u64;
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.busy_micros.fetch_add(micros, Ordering::Relaxed);
        self.max_micros.fetch_max(micros, Ordering::Relaxed);
    }

    fn queue(&self, request: &Value) -> Result<Arc<Queue>, Fault> {
        let url = request["QueueUrl"].as_str().unwrap_or("");
        let name = url.rsplit('/').next().unwrap_or("");
        let queues = self.queues.lock().expect("queues lock");
        queues
            .get(name)
            .cloned()
            .ok_or_else(|| fault("QueueDoesNotExist", "The specified queue does not exist."))
    }

    fn url(&self, name: &str) -> String {
        format!("{}/{ACCOUNT}/{name}", self.base)
    }

    fn message_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("00000000-0000-4000-8000-{n:012x}")
    }
}

fn act(state: &Shared, action: &str, request: &Value) -> Result<Value, Fault> {
    match action {
        "CreateQueue" => create(state, request),
        "GetQueueUrl" => {
            let name = request["QueueName"].as_str().unwrap_or("");
            match state.queues.lock().expect("queues lock").contains_key(name) {
                true => Ok(json!({ "QueueUrl": state.url(name) })),
                false => Err(fault("QueueDoesNotExist", "The specified queue does not exist.")),
            }
        }
        "ListQueues" => {
            let prefix = request["QueueNamePrefix"].as_str().unwrap_or("");
            let queues = state.queues.lock().expect("queues lock");
            let urls: Vec<String> =
                queues.keys().filter(|n| n.starts_with(prefix)).map(|n| state.url(n)).collect();
            Ok(json!({ "QueueUrls": urls }))
        }
        "DeleteQueue" => {
            let url = request["QueueUrl"].as_str().unwrap_or("");
            state.queues.lock().expect("queues lock").remove(url.rsplit('/').next().unwrap_or(""));
            Ok(json!({}))
        }
        "GetQueueAttributes" => attributes(&*state.queue(request)?, request),
        "SendMessage" => {
            let queue = state.queue(request)?;
            let body = request["MessageBody"].as_str().unwrap_or("").to_owned();
            let (id, md5) = send(state, &queue, body);
            Ok(json!({ "MessageId": id, "MD5OfMessageBody": md5 }))
        }
        "SendMessageBatch" => {
            let queue = state.queue(request)?;
            let mut done = Vec::new();
            for entry in request["Entries"].as_array().into_iter().flatten() {
                let (id, md5) = send(state, &queue, entry["MessageBody"].as_str().unwrap_or("").to_owned());
                done.push(json!({ "Id": entry["Id"], "MessageId": id, "MD5OfMessageBody": md5 }));
            }
            Ok(json!({ "Successful": done, "Failed": [] }))
        }
        "DeleteMessage" => {
            let queue = state.queue(request)?;
            queue.settle(request["ReceiptHandle"].as_str().unwrap_or(""), None);
            Ok(json!({}))
        }
        "ChangeMessageVisibility" => {
            let queue = state.queue(request)?;
            let seconds = request["VisibilityTimeout"].as_u64().unwrap_or(0);
            queue.settle(request["ReceiptHandle"].as_str().unwrap_or(""), Some(Duration::from_secs(seconds)));
            Ok(json!({}))
        }
        "DeleteMessageBatch" | "ChangeMessageVisibilityBatch" => batch(state, action, request),
        _ => Err(fault(
            "UnsupportedOperation",
            &format!("the bench's SQS stand-in does not implement {action}"),
        )),
    }
}

fn create(state: &Shared, request: &Value) -> Result<Value, Fault> {
    let name = request["QueueName"].as_str().unwrap_or("").to_owned();
    let seconds =
        request["Attributes"]["VisibilityTimeout"].as_str().and_then(|s| s.parse().ok()).unwrap_or(30u64);
    let mut queues = state.queues.lock().expect("queues lock");
    queues.entry(name.clone()).or_insert_with(|| {
        Arc::new(Queue {
            visibility: Duration::from_secs(seconds),
            messages: Mutex::default(),
            arrived: Notify::new(),
        })
    });
    Ok(json!({ "QueueUrl": state.url(&name) }))
}

fn attributes(queue: &Queue, request: &Value) -> Result<Value, Fault> {
    let mut messages = queue.messages.lock().expect("messages lock");
    messages.expire(Instant::now());
    let name = request["QueueUrl"].as_str().unwrap_or("").rsplit('/').next().unwrap_or("").to_owned();
    let all = json!({
        "ApproximateNumberOfMessages": messages.visible.len().to_string(),
        "ApproximateNumberOfMessagesNotVisible": messages.in_flight.len().to_string(),
        "ApproximateNumberOfMessagesDelayed": "0",
        "VisibilityTimeout": queue.visibility.as_secs().to_string(),
        "QueueArn": format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{name}"),
        "DelaySeconds": "0",
        "ReceiveMessageWaitTimeSeconds": "0",
        "MessageRetentionPeriod": "345600",
        "MaximumMessageSize": "1048576",
    });
    // Only what was asked for, as SQS answers (a caller may sum what comes back).
    let asked: Vec<&str> =
        request["AttributeNames"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let Value::Object(mut attributes) = all else { unreachable!("a JSON object literal") };
    if !asked.contains(&"All") {
        attributes.retain(|name, _| asked.contains(&name.as_str()));
    }
    Ok(json!({ "Attributes": attributes }))
}

fn send(state: &Shared, queue: &Queue, body: String) -> (String, String) {
    let id = state.message_id();
    let md5 = md5_hex(&body);
    let message = Message {
        id: id.clone(),
        md5: md5.clone(),
        body,
        sent_ms: now_ms(),
        receives: 0,
        first_receive_ms: None,
    };
    queue.messages.lock().expect("messages lock").visible.push_back(message);
    queue.arrived.notify_waiters();
    (id, md5)
}

fn batch(state: &Shared, action: &str, request: &Value) -> Result<Value, Fault> {
    let queue = state.queue(request)?;
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for entry in request["Entries"].as_array().into_iter().flatten() {
        let receipt = entry["ReceiptHandle"].as_str().unwrap_or("");
        let visibility = match action {
            "ChangeMessageVisibilityBatch" => {
                Some(Duration::from_secs(entry["VisibilityTimeout"].as_u64().unwrap_or(0)))
            }
            _ => None,
        };
        match queue.settle(receipt, visibility) {
            true => done.push(json!({ "Id": entry["Id"] })),
            // Real SQS deletes a stale receipt silently but refuses a visibility change for it.
            false if visibility.is_none() => done.push(json!({ "Id": entry["Id"] })),
            false => failed.push(json!({
                "Id": entry["Id"], "SenderFault": true, "Code": "ReceiptHandleIsInvalid",
                "Message": "The receipt handle is not in flight.",
            })),
        }
    }
    Ok(json!({ "Successful": done, "Failed": failed }))
}

impl Queue {
    /// Deletes the receipt's message (`None`) or moves its visibility; false if it is not in flight.
    fn settle(&self, receipt: &str, visibility: Option<Duration>) -> bool {
        let mut messages = self.messages.lock().expect("messages lock");
        let Some((message, _)) = messages.in_flight.remove(receipt) else { return false };
        if let Some(after) = visibility {
            let at = Instant::now() + after;
            messages.expiry.insert((at, fastrand::u64(..)), receipt.to_owned());
            messages.in_flight.insert(receipt.to_owned(), (message, at));
            if after.is_zero() {
                messages.expire(Instant::now());
                drop(messages);
                self.arrived.notify_waiters();
            }
        }
        true
    }

    fn take(&self, max: usize, visibility: Duration) -> Vec<Value> {
        let mut messages = self.messages.lock().expect("messages lock");
        let now = Instant::now();
        messages.expire(now);
        let count = max.min(messages.visible.len());
        let mut out = Vec::with_capacity(count);
        for message in messages.visible.drain(..count).collect::<Vec<_>>() {
            let mut message = message;
            message.receives += 1;
            let first = *message.first_receive_ms.get_or_insert_with(now_ms);
            let receipt = format!("{}#{}", message.id, fastrand::u64(..));
            out.push(json!({
                "MessageId": message.id, "ReceiptHandle": receipt, "MD5OfBody": message.md5,
                "Body": message.body,
                "Attributes": {
                    "SentTimestamp": message.sent_ms.to_string(),
                    "ApproximateReceiveCount": message.receives.to_string(),
                    "ApproximateFirstReceiveTimestamp": first.to_string(),
                    "SenderId": ACCOUNT,
                },
            }));
            let at = now + visibility;
            messages.expiry.insert((at, fastrand::u64(..)), receipt.clone());
            messages.in_flight.insert(receipt, (message, at));
        }
        out
    }
}

/// ReceiveMessage: take what is visible; if nothing is, wait (up to WaitTimeSeconds) for a send or
/// an expiry. Only the taking is timed as the stand-in's own work.
async fn receive(state: &Shared, request: &Value, started: Instant) -> Response {
    let queue = match state.queue(request) {
        Ok(q) => q,
        Err(fault) => return fault.into_response(),
    };
    let max = request["MaxNumberOfMessages"].as_u64().unwrap_or(1).clamp(1, 10) as usize;
    let wait = Duration::from_secs(request["WaitTimeSeconds"].as_u64().unwrap_or(0).min(20));
    let visibility = request["VisibilityTimeout"].as_u64().map_or(queue.visibility, Duration::from_secs);
    let deadline = Instant::now() + wait;
    let mut busy = Duration::ZERO;
    let mut lap = started;
    let messages = loop {
        let arrived = queue.arrived.notified();
        let taken = queue.take(max, visibility);
        let now = Instant::now();
        busy += now - lap;
        if !taken.is_empty() || now >= deadline {
            break taken;
        }
        // Wake for a send, or re-check every 100 ms for visibility expiries.
        let _ = tokio::time::timeout((deadline - now).min(Duration::from_millis(100)), arrived).await;
        lap = Instant::now();
    };
    let answering = Instant::now();
    let answer = json!({ "Messages": messages }).to_string();
    let own = busy + answering.elapsed();
    state.record(own);
    state.receives.fetch_add(1, Ordering::Relaxed);
    state.receive_micros.fetch_add(own.as_micros() as u64, Ordering::Relaxed);
    ([(header::CONTENT_TYPE, "application/x-amz-json-1.0")], answer).into_response()
}

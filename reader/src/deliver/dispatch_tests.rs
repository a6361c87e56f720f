//! Dispatch against scripted sinks: combining, dead-lettering, failOnError, FIFO groups, routes.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use sluice_crds::RouteSpec;

use super::*;
use crate::sink::testing::record;
use crate::sink::{DeadLetter, RoutedSink, Sink};

/// Answers by body: `reject` => Rejected, `fail` => Failed, else Delivered (or always Delivered
/// when `takes_all`); remembers what it saw.
struct Scripted {
    name: &'static str,
    takes_all: bool,
    seen: Mutex<Vec<String>>,
}

impl Scripted {
    fn new(name: &'static str) -> Arc<Self> {
        Arc::new(Self { name, takes_all: false, seen: Mutex::new(Vec::new()) })
    }
    fn taking_all(name: &'static str) -> Arc<Self> {
        Arc::new(Self { name, takes_all: true, seen: Mutex::new(Vec::new()) })
    }
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Sink for Scripted {
    fn name(&self) -> &str {
        self.name
    }
    fn deliver<'a>(&'a self, records: &'a [Arc<Record>]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            records
                .iter()
                .map(|r| {
                    self.seen.lock().unwrap().push(r.message_id.clone());
                    let body = String::from_utf8_lossy(&r.body);
                    if self.takes_all {
                        Outcome::Delivered
                    } else if body.contains("reject") {
                        Outcome::Rejected { reason: "HTTP 400".into() }
                    } else if body.contains("fail") {
                        Outcome::Failed { reason: "HTTP 503".into() }
                    } else {
                        Outcome::Delivered
                    }
                })
                .collect()
        })
    }
}

fn item(id: &str, body: &str, group: Option<&str>) -> Item {
    let mut r = record(id);
    r.body = bytes::Bytes::from(body.to_owned());
    r.group_id = group.map(str::to_owned);
    Item::new(r, None)
}

/// Held with no sink having taken it.
fn held() -> Verdict {
    Verdict::Hold { acknowledged: Vec::new() }
}

fn poison(id: &str) -> Item {
    Item::new(record(id), Some("payload is not valid JSON".into()))
}

fn dispatcher(sink: Arc<Scripted>, dead_letter: Option<Arc<Scripted>>, fail_on_error: bool) -> Dispatcher {
    dispatcher_on(Arc::new(Metrics::new()), sink, dead_letter, fail_on_error)
}

/// A dispatcher that reports into `metrics` (and the reader health they carry).
fn dispatcher_on(
    metrics: Arc<Metrics>,
    sink: Arc<Scripted>,
    dead_letter: Option<Arc<Scripted>>,
    fail_on_error: bool,
) -> Dispatcher {
    let sinks = Sinks {
        sinks: vec![RoutedSink { sink, route: None }],
        dead_letter: dead_letter.map(|d| DeadLetter::new(d as Arc<dyn Sink>)),
        circuits: Arc::default(),
    };
    Dispatcher::new(sinks, fail_on_error, metrics)
}

#[test]
fn rejection_beats_failure_beats_delivery() {
    let d = Outcome::Delivered;
    let f = Outcome::Failed { reason: "f".into() };
    let r = Outcome::Rejected { reason: "r".into() };
    assert_eq!(combine([&d, &d]), d);
    assert_eq!(combine([&d, &f]), f);
    assert_eq!(combine([&f, &r, &d]), r);
    let n = Outcome::NotStarted;
    assert_eq!(combine([&d, &f, &n]), n, "a stop hands the record back whatever else failed");
    assert_eq!(combine([&n, &r]), r);
    assert_eq!(combine([] as [&Outcome; 0]), d, "a record no sink takes is delivered to nothing");
}

#[tokio::test]
async fn without_a_dead_letter_sink_rejected_records_go_back_and_failed_ones_are_held() {
    let sink = Scripted::new("web");
    let items = [item("a", "ok", None), item("b", "fail", None), item("c", "reject", None), poison("p")];
    let verdicts = dispatcher(sink.clone(), None, false).dispatch(&items, false).await;
    assert_eq!(verdicts, vec![Verdict::Delete, held(), Verdict::Release, Verdict::Release]);
    assert_eq!(sink.seen(), vec!["a", "b", "c"], "poison never reaches a sink");
}

#[tokio::test]
async fn the_dead_letter_sink_settles_rejected_and_poison_records() {
    let (sink, dlq) = (Scripted::new("web"), Scripted::taking_all("dlq"));
    let items = [item("a", "ok", None), item("b", "fail", None), item("c", "reject", None), poison("p")];
    let verdicts = dispatcher(sink, Some(dlq.clone()), false).dispatch(&items, false).await;
    assert_eq!(verdicts, vec![Verdict::Delete, held(), Verdict::Delete, Verdict::Delete]);
    // Poison is settled on its own, so it may reach the dead-letter sink first.
    let mut seen = dlq.seen();
    seen.sort();
    assert_eq!(seen, vec!["c", "p"]);
}

#[tokio::test]
async fn a_dead_letter_sink_that_fails_leaves_the_record_held() {
    let (sink, dlq) = (Scripted::new("web"), Scripted::new("dlq"));
    // The dead-letter copy keeps the body, so the scripted dead-letter sink rejects it too.
    let verdicts = dispatcher(sink, Some(dlq), false).dispatch(&[item("c", "reject", None)], false).await;
    assert_eq!(verdicts, vec![held()]);
}

/// A sink refusing a poison record that the dead-letter sink takes is not failing (a quiet queue
/// after one bad message must not leave the reader unready); with no dead-letter sink it is.
#[tokio::test]
async fn a_refusal_counts_against_the_sink_only_while_the_record_stays_unsettled() {
    let metrics = Arc::new(Metrics::new());
    let (settled, dlq) = (Scripted::new("refuses-settled"), Scripted::taking_all("dlq-settled"));
    dispatcher_on(metrics.clone(), settled, Some(dlq), false)
        .dispatch(&[item("c", "reject", None)], false)
        .await;
    let unsettled = Scripted::new("refuses-unsettled");
    dispatcher_on(metrics.clone(), unsettled, None, false)
        .dispatch(&[item("d", "reject", None)], false)
        .await;
    let report = metrics.health.sink_report();
    assert_eq!(report["refuses-unsettled"].failures_since, 1);
    assert_eq!(report["refuses-unsettled"].last_error.as_deref(), Some("HTTP 400"));
    assert!(
        report.get("refuses-settled").is_none_or(|r| r.failures_since == 0),
        "{:?}",
        report.get("refuses-settled")
    );
    assert_eq!(report["dlq-settled"].failures_since, 0);
}

/// A stopping reader's http sink starts no delivery: each record is handed back (released, and
/// at once, since the reader stops), and the sink's failures, health and circuit do not count it;
/// more than the circuit's five failures in a row would have opened it.
#[tokio::test]
async fn a_delivery_not_started_at_a_stop_is_no_failure_of_the_sink() {
    let spec = sluice_crds::HttpSinkSpec {
        // Nothing is sent: the sink sees the stop before its first request.
        url: "http://127.0.0.1:9/".into(),
        timeout_ms: 1_000,
        concurrency: 1,
        headers: Default::default(),
        event_type: "dev.sluice.test".into(),
        secret_refs: None,
        batch: None,
    };
    let stopping = tokio_util::sync::CancellationToken::new();
    stopping.cancel();
    let policy = crate::sink::retry::RetryPolicy::from_spec(&sluice_crds::RetrySpec::default());
    let http = crate::sink::http::HttpSink::new("web", &spec, policy).unwrap().stopping(stopping);
    let circuits: Arc<crate::sink::circuit::Circuits> = Arc::default();
    let sinks = Sinks {
        sinks: vec![RoutedSink { sink: Arc::new(http), route: None }],
        dead_letter: None,
        circuits: circuits.clone(),
    };
    let metrics = Arc::new(Metrics::new());
    let dispatcher = Dispatcher::new(sinks, false, metrics.clone());
    let items: Vec<Item> = (0..8).map(|i| item(&format!("m{i}"), "ok", None)).collect();
    let verdicts = dispatcher.dispatch(&items, false).await;
    assert_eq!(verdicts, vec![Verdict::Release; 8]);
    let text = metrics.encode();
    for line in [
        "sink_errors_total{sink=\"web\",kind=\"failed\"} 0",
        "errors_total{stage=\"deliver\",error_type=\"failed\"} 0",
    ] {
        assert!(text.contains(&format!("sluice_reader_{line}\n")), "{line}:\n{text}");
    }
    assert!(metrics.health.sink_report().get("web").is_none_or(|r| r.failures_since == 0));
    assert!(!circuits.blocks_receiving(["web"]), "the circuit stays closed");
    assert!(circuits.states().values().all(|s| *s == crate::sink::breaker::State::Closed));
}

#[tokio::test]
async fn fail_on_error_stops_instead_of_dead_lettering() {
    let (sink, dlq) = (Scripted::new("web"), Scripted::new("dlq"));
    let items = [item("a", "ok", None), item("c", "reject", None), poison("p")];
    let verdicts = dispatcher(sink, Some(dlq.clone()), true).dispatch(&items, false).await;
    assert_eq!(verdicts[0], Verdict::Delete);
    assert_eq!(verdicts[1], Verdict::Stop { reason: "HTTP 400".into() });
    assert!(matches!(&verdicts[2], Verdict::Stop { reason } if reason.contains("JSON")));
    assert!(dlq.seen().is_empty());
}

#[tokio::test]
async fn fifo_holds_the_rest_of_a_group_with_a_failure_and_runs_groups_apart() {
    let sink = Scripted::new("web");
    let items = [
        item("a1", "ok", Some("a")),
        item("b1", "ok", Some("b")),
        item("a2", "fail", Some("a")),
        item("b2", "ok", Some("b")),
        item("a3", "ok", Some("a")),
    ];
    let verdicts = dispatcher(sink.clone(), None, false).dispatch(&items, true).await;
    assert_eq!(verdicts, vec![Verdict::Delete, Verdict::Delete, held(), Verdict::Delete, held()]);
    let seen = sink.seen();
    assert!(!seen.contains(&"a3".to_string()), "a3 must not overtake the next delivery of a2: {seen:?}");
    let pos = |id: &str| seen.iter().position(|s| s == id).unwrap();
    assert!(pos("a1") < pos("a2") && pos("b1") < pos("b2"), "{seen:?}");
}

/// `all` takes every record, `orders` those whose attribute `kind` is `order`.
fn all_and_orders(all: &Arc<Scripted>, orders: &Arc<Scripted>) -> Sinks {
    let route = RouteSpec { attribute: "kind".into(), values: vec!["order".into()] };
    Sinks {
        sinks: vec![
            RoutedSink { sink: all.clone(), route: None },
            RoutedSink { sink: orders.clone(), route: Some(route) },
        ],
        dead_letter: None,
        circuits: Arc::default(),
    }
}

#[tokio::test]
async fn routes_pick_the_sinks_and_every_target_must_deliver() {
    let (all, orders) = (Scripted::new("all"), Scripted::new("orders"));
    let metrics = Arc::new(Metrics::new());
    let dispatcher = Dispatcher::new(all_and_orders(&all, &orders), false, metrics.clone());
    let mut order = record("o");
    order.message_attributes.insert("kind".into(), "order".into());
    let items = [Item::new(order, None), item("x", "ok", None)];
    assert_eq!(dispatcher.dispatch(&items, false).await, vec![Verdict::Delete, Verdict::Delete]);
    assert_eq!(all.seen(), vec!["o", "x"]);
    assert_eq!(orders.seen(), vec!["o"]);
    let text = metrics.encode();
    assert!(text.contains("sluice_reader_delivered_messages_total{sink=\"all\"} 2"), "{text}");
    assert!(text.contains("sluice_reader_delivered_messages_total{sink=\"orders\"} 1"), "{text}");
}

/// A record two sinks take, one of them failing: held with the sink that took it named, and the
/// next delivery of it goes to the failing sink only.
#[tokio::test]
async fn a_held_record_goes_again_only_to_the_sinks_that_did_not_take_it() {
    let (all, orders) = (Scripted::taking_all("all"), Scripted::new("orders"));
    let dispatcher = Dispatcher::new(all_and_orders(&all, &orders), false, Arc::new(Metrics::new()));
    let mut order = record("o");
    order.body = bytes::Bytes::from_static(b"fail");
    order.message_attributes.insert("kind".into(), "order".into());
    let mut items = [Item::new(order, None)];
    let verdict = dispatcher.dispatch(&items, false).await.remove(0);
    assert_eq!(verdict, Verdict::Hold { acknowledged: vec![0] }, "`all` took it, `orders` failed");
    items[0].acknowledged = vec![0];
    assert_eq!(dispatcher.target_names(&items), vec!["orders"], "only its circuit decides the next round");
    assert_eq!(dispatcher.dispatch(&items, false).await, vec![held()]);
    assert_eq!(all.seen(), vec!["o"], "the sink that took it is not given it again");
    assert_eq!(orders.seen(), vec!["o", "o"]);
}

/// A one-request-a-record sink whose `held` records wait until `release` is notified.
struct Held {
    release: tokio::sync::Notify,
}

impl Sink for Held {
    fn name(&self) -> &str {
        "held"
    }
    fn per_record(&self) -> bool {
        true
    }
    fn deliver<'a>(&'a self, records: &'a [Arc<Record>]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            for r in records {
                if r.body.starts_with(b"held") {
                    self.release.notified().await;
                }
            }
            vec![Outcome::Delivered; records.len()]
        })
    }
}

#[tokio::test]
async fn per_record_sinks_settle_each_message_without_waiting_for_the_slowest() {
    use futures::StreamExt;
    let held = Arc::new(Held { release: tokio::sync::Notify::new() });
    let sinks = Sinks {
        sinks: vec![RoutedSink { sink: held.clone(), route: None }],
        dead_letter: None,
        circuits: Arc::default(),
    };
    let dispatcher = Dispatcher::new(sinks, false, Arc::new(Metrics::new()));
    let items = [item("slow", "held", None), item("a", "ok", None), item("b", "ok", None)];
    let mut settled = dispatcher.settle_as_done(&items, false);
    let mut first = Vec::new();
    while first.len() < 2 {
        first.extend(settled.next().await.unwrap());
    }
    first.sort_by_key(|(i, _)| *i);
    assert_eq!(first, vec![(1, Verdict::Delete), (2, Verdict::Delete)], "settled while `slow` is held");
    held.release.notify_one();
    assert_eq!(settled.next().await.unwrap(), vec![(0, Verdict::Delete)]);
    assert!(settled.next().await.is_none());
}

//! CPU per message of `spec.filter`, side by side with the path without it.
//!
//! Not a test: it prints figures. It judges N realistic messages (a few message attributes, the
//! system attributes SQS returns, a 300-byte JSON body) with the compiled filter the reader uses
//! (`intake::filter::Filter`), and the same messages through the identity path (what the reader
//! does without a filter: nothing), plus one reference the reader already pays per message with
//! `payload: json` (parsing the body). CPU time is this thread's, from
//! `/proc/thread-self/schedstat`; each figure is the median of 5 rounds, all in one run.
//!
//! `cargo run --release -p sluice-reader --example bench_filter [N]` (default N = 100000); in the
//! dev profile the figures are those of unoptimized code (BENCHMARKS.md says which it printed).

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use sluice_crds::{FilterErrorFate, FilterFate, FilterSpec};
use sluice_reader::intake::filter::{Filter, Judgement};
use sluice_reader::record::{Payload, Record};

const ROUNDS: usize = 5;

fn record(seq: u64) -> Record {
    let region = if seq.is_multiple_of(2) { "eu" } else { "us" };
    let kind = if seq.is_multiple_of(3) { "refund" } else { "order" };
    let body = format!(
        r#"{{"seq":{seq},"region":"{region}","order":{{"id":"o-{seq}","total":{},"currency":"EUR","items":[{{"sku":"A-1","qty":2}},{{"sku":"B-7","qty":1}}]}},"customer":{{"id":"c-{}","tier":"gold","email":"someone@example.com"}},"note":"a realistic body of about three hundred bytes"}}"#,
        seq % 500,
        seq % 97
    );
    let attributes: BTreeMap<String, String> = [
        ("SentTimestamp", "1764680000000"),
        ("ApproximateReceiveCount", "1"),
        ("ApproximateFirstReceiveTimestamp", "1764680000100"),
        ("SenderId", "AIDAEXAMPLE"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let message_attributes: BTreeMap<String, String> = [("kind", kind), ("tenant", "acme"), ("schema", "v3")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Record {
        message_id: format!("0f6c0e1c-{seq:012}"),
        queue_url: Arc::from("http://127.0.0.1:4566/queue/us-east-1/000000000000/orders"),
        body: Bytes::from(body),
        payload: Payload::Raw,
        attributes,
        message_attributes,
        attribute_types: BTreeMap::new(),
        sent_timestamp_ms: Some(1_764_680_000_000),
        receive_count: 1,
        group_id: None,
        dedup_id: None,
        epoch: 0,
        incarnation: 0,
        trace: None,
        object: None,
    }
}

/// This thread's CPU time so far, in nanoseconds.
fn cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Median CPU nanoseconds per message of `work` over `records`.
fn per_message(records: &[Record], mut work: impl FnMut(&Record) -> bool) -> f64 {
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let started = cpu_ns();
            let mut kept = 0usize;
            for r in records {
                kept += usize::from(work(r));
            }
            black_box(kept);
            (cpu_ns() - started) as f64 / records.len() as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn compile(expression: &str) -> Filter {
    let spec = FilterSpec {
        expression: expression.into(),
        on_mismatch: FilterFate::Delete,
        route_to: None,
        release_delay_seconds: None,
        on_error: FilterErrorFate::DeadLetter,
    };
    Filter::compile(&spec).unwrap_or_else(|e| panic!("{expression}: {e}"))
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let raw: Vec<Record> = (0..n).map(record).collect();
    let parsed: Vec<Record> = raw
        .iter()
        .cloned()
        .map(|mut r| {
            r.payload = Payload::Json(serde_json::from_slice(&r.body).unwrap_or_default());
            r
        })
        .collect();
    let attribute = compile("attributes.kind == 'order'");
    let both = compile("attributes.kind == 'order' && body.region == 'eu'");

    let identity = per_message(&raw, |r| black_box(r).receive_count > 0);
    let parse = per_message(&raw, |r| serde_json::from_slice::<serde_json::Value>(&r.body).is_ok());
    let on_attribute = per_message(&raw, |r| attribute.judge(r) == Judgement::Match);
    let raw_both = per_message(&raw, |r| both.judge(r) == Judgement::Match);
    let json_both = per_message(&parsed, |r| both.judge(r) == Judgement::Match);
    println!("CPU per message over {n} messages (median of {ROUNDS} rounds, this thread):");
    println!("  no filter (identity path)                           {identity:>9.0} ns");
    println!("  reference: parse the JSON body (payload: json)      {parse:>9.0} ns");
    println!("  filter on one attribute                             {on_attribute:>9.0} ns");
    println!(
        "  filter on an attribute AND a JSON field, raw body   {raw_both:>9.0} ns  (body parsed for the filter)"
    );
    println!("  the same, payload: json (body already parsed)       {json_both:>9.0} ns");
    println!(
        "  filter (attribute AND JSON field, payload json) / body parse: {:.2}x",
        json_both / parse.max(1.0)
    );
}

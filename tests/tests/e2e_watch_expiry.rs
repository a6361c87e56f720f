//! Watches that end with 410 Gone: etcd compacts its history every 2 s, the suite drives writes
//! past the resourceVersions the operator's watches hold, then restarts the API server, whose new
//! watch cache starts at the current revision. A watch resumed from an older resourceVersion is
//! answered 410 (the suite's own watch shows it), and each reflector of the operator told so must
//! list again once, not in a loop, and go on reconciling; a reflector whose resourceVersion is still
//! served resumes without a list. The readers hold no watch (they poll their checkpoint and rate
//! share with GETs): their list and watch calls are counted too.
//!
//! The counter is the API server's audit log (`sluice_cluster::controlplane::audit`): every
//! `list` by user and request, before and after the restart, printed. The sources are the two of
//! `sluice_tests::side_by_side`, which also shows that both still deliver afterwards.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use sluice_crds::SqsSource;
use sluice_tests::cluster::Options;
use sluice_tests::controlplane::audit::{self, AuditLog};
use sluice_tests::controlplane::flags::Tuning;
use sluice_tests::install;
use sluice_tests::side_by_side::{Progress, SideBySide};

/// etcd's compaction interval (the API server's `--etcd-compaction-interval`).
const COMPACTION: Duration = Duration::from_secs(2);
/// Writes that move the revision past what the watches hold.
const CHURN: usize = 100;
/// How long each counting window is, before and after the restart.
const WINDOW: Duration = Duration::from_secs(25);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_answered_410_gone_are_listed_again_once_not_in_a_loop() -> Result<()> {
    let began = Instant::now();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-watch-expiry");
    let _ = std::fs::remove_dir_all(&dir);
    let audit = AuditLog::in_dir(&dir.join("audit"))?;
    let tuning = Tuning { compaction: Some(COMPACTION), apiserver_args: audit.apiserver_args() };
    let mut run = SideBySide::start(&dir.join("run"), Options { tuning, ..Options::default() }).await?;
    run.feed(200).await?;
    run.wait_flowing(Progress::default(), Duration::from_secs(90)).await?;
    // Steady state: the window before the restart.
    tokio::time::sleep(WINDOW).await;

    let sources: Api<SqsSource> = Api::namespaced(run.system.client.clone(), &run.system.namespace);
    let held = sources.list(&ListParams::default()).await?.metadata.resource_version.unwrap_or_default();
    let config_maps: Api<ConfigMap> = Api::namespaced(run.system.client.clone(), &run.system.namespace);
    for n in 0..CHURN {
        let cm: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": format!("churn-{n}")}}))?;
        config_maps.create(&PostParams::default(), &cm).await?;
        config_maps.delete(&format!("churn-{n}"), &DeleteParams::default()).await?;
    }
    tokio::time::sleep(COMPACTION * 3).await;
    run.say(&format!("{} writes past resourceVersion {held}, compacted every {COMPACTION:?}", 2 * CHURN));

    let restarted_at = Timestamp::now();
    let restart = Instant::now();
    run.cluster.control_plane().expect("a private cluster").restart_apiserver().await?;
    run.say(&format!("API server restarted: ready {:.1} s after its stop", restart.elapsed().as_secs_f64()));

    // The suite's own watch from the old resourceVersion: what every resumed watch was told.
    let first = tokio::time::timeout(
        Duration::from_secs(10),
        sources.watch(&WatchParams::default(), &held).await?.boxed().try_next(),
    )
    .await;
    let told = match first {
        Ok(Ok(Some(WatchEvent::Error(e)))) => format!("{} {}: {}", e.code, e.reason, e.message),
        Ok(Ok(Some(_))) => "an event (not expired)".to_owned(),
        Ok(Ok(None)) => "the end of the stream".to_owned(),
        Ok(Err(e)) => format!("error: {e}"),
        Err(_) => "nothing in 10 s".to_owned(),
    };
    run.say(&format!("a watch of SqsSources from resourceVersion {held} now: {told}"));
    assert!(told.starts_with("410"), "the old resourceVersion must have expired (410 Gone): {told}");

    let after = run.progress().await?;
    run.feed(200).await?;
    run.wait_flowing(after, Duration::from_secs(90)).await?;
    let elapsed = Instant::now().duration_since(restart);
    tokio::time::sleep(WINDOW.saturating_sub(elapsed)).await;
    run.say("both sources deliver after the restart");

    let events = audit.events()?;
    let window = SignedDuration::try_from(WINDOW)?;
    let namespace = format!("system:serviceaccount:{}:", run.system.namespace);
    let operator = format!("{namespace}{}", install::operator_service_account()?);
    let mut relisted = 0;
    // Each reflector lists once when it starts: the lists of a request before the restart (the
    // operator started 30-60 s before it, far inside the hour) count the reflectors that share it
    // (the controller, the autoscaler and three follower tasks all watch SqsSources).
    let reflectors =
        audit::count(&events, "list", restarted_at - SignedDuration::from_hours(1), restarted_at);
    for verb in ["list", "watch"] {
        let before = audit::count(&events, verb, restarted_at - window, restarted_at);
        let after = audit::count(&events, verb, restarted_at, restarted_at + window);
        println!(
            "{verb} calls per client and request, {} s before the restart -> {} s after:",
            WINDOW.as_secs(),
            WINDOW.as_secs()
        );
        let keys: BTreeSet<&(String, String)> = before.keys().chain(after.keys()).collect();
        for key @ (user, request) in keys.into_iter().filter(|(u, _)| u.starts_with(&namespace)) {
            let (b, a) = (before.get(key).copied().unwrap_or(0), after.get(key).copied().unwrap_or(0));
            let who = user.trim_start_matches(&namespace);
            // kube's watcher lists in pages of 500: that is a watch's (re-)list.
            let reflector = verb == "list" && request.contains("limit=500");
            println!(
                "  {who:<16} {b:>3} -> {a:>3}  {}{request}",
                if reflector { "(a watch's list) " } else { "" }
            );
            if *user == operator && reflector {
                relisted += a;
                let sharing = reflectors.get(key).copied().unwrap_or(0).max(1);
                if a > sharing {
                    bail!(
                        "{who} listed {request} {a} times after the restart, with {sharing} reflectors on it: a re-list loop"
                    );
                }
            }
        }
    }
    let started: u64 = reflectors
        .iter()
        .filter(|((u, r), _)| *u == operator && r.contains("limit=500"))
        .map(|(_, n)| n)
        .sum();
    println!(
        "the operator's watches listed again {relisted} times in all after the restart ({started} reflectors listed at their start)"
    );
    // The readers hold no watch; they list their source's leases only to classify a redelivery.
    for reader in ["alo-reader", "eo-reader"] {
        let user = format!("{namespace}{reader}");
        let calls = |verb: &str| {
            audit::count(&events, verb, restarted_at - window, restarted_at + window)
                .into_iter()
                .filter(|((u, _), _)| *u == user)
                .map(|(_, n)| n)
                .sum::<u64>()
        };
        println!(
            "  {reader}s: {} lists, {} watches in the {} s around the restart",
            calls("list"),
            calls("watch"),
            2 * WINDOW.as_secs()
        );
    }
    assert!(relisted >= 1, "no watch of the operator listed again: the 410 did not reach it");
    run.check_no_reader_restarted()?;
    run.shutdown().await?;
    println!("wall time {:.1} s", began.elapsed().as_secs_f64());
    Ok(())
}

//! The API server restarted mid-stream, then away for 30 s (what an EKS control-plane upgrade does to
//! a tenant), under two sources side by side (`sluice_tests::side_by_side`): at-least-once to HTTP
//! and exactly-once to S3, three readers each, the operator running.
//!
//! At-least-once readers keep delivering while the API is away (their data path needs no API
//! call); exactly-once readers pause their commits (the operator commits epochs through the API)
//! and resume without a duplicate. Nothing is lost, no reader is restarted for the outage, the
//! operator and readers say it in WARN lines and in `/readyz`'s text, the exactly-once source's
//! conditions say what the outage did to its readers' leases, and both sources move again within
//! seconds of the API server's return. Every figure is printed; docs/control-plane-faults.md
//! keeps the last ones.
//!
//! A private cluster: the suite stops the API server, which the shared cluster's other suites need.

use std::time::{Duration, Instant};

use anyhow::Result;
use sluice_tests::cluster::Options;
use sluice_tests::side_by_side::{Part, Progress, SideBySide};

const OUTAGE: Duration = Duration::from_secs(30);
/// Messages per source per phase (before the restart, between, during the outage).
const BATCH: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_guarantees_ride_out_an_api_server_restart_and_a_30_s_outage() -> Result<()> {
    let began = Instant::now();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-apiserver-outage");
    let mut run = SideBySide::start(&dir, Options::default()).await?;
    run.feed(BATCH).await?;
    run.wait_flowing(Progress::default(), Duration::from_secs(90)).await?;

    // A restart mid-stream: SIGTERM, started again on the same port.
    run.feed(BATCH).await?;
    let before = run.progress().await?;
    let restart = Instant::now();
    run.cluster.control_plane().expect("a private cluster").restart_apiserver().await?;
    run.say(&format!(
        "API server restarted: ready again {:.1} s after its stop",
        restart.elapsed().as_secs_f64()
    ));
    run.wait_flowing(before, Duration::from_secs(90)).await?;

    // Away for 30 s, from the SIGTERM (it stops listening at once; killed if it lingers).
    run.outage(Part::ApiServer, BATCH, (OUTAGE, Duration::from_secs(20)), async |_| {}).await?;

    run.conclude(Duration::from_secs(180), true).await?;
    run.shutdown().await?;
    println!("wall time {:.1} s", began.elapsed().as_secs_f64());
    Ok(())
}

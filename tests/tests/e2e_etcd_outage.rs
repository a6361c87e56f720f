//! etcd stopped for 30 s while the API server stays up and answers every request with an error or
//! a timeout (a managed control plane whose storage fails), under two sources side by side
//! (`sluice_tests::side_by_side`): at-least-once to HTTP and exactly-once to S3, three readers
//! each, the operator running.
//!
//! The same figures as the API server outage (e2e_apiserver_outage): at-least-once delivers
//! throughout, exactly-once pauses its commits and resumes without a duplicate, nothing is lost, no
//! reader restarted, WARN lines and `/readyz`'s text say it, and both sources move within seconds
//! of etcd's return. What differs: the clients' connections stay up and their calls fail slowly
//! (the API server waits for etcd before it answers), where a stopped API server refuses at once.
//!
//! A private cluster: the suite stops etcd, which the shared cluster's other suites need.

use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use sluice_tests::cluster::Options;
use sluice_tests::side_by_side::{Part, Progress, SideBySide};

const OUTAGE: Duration = Duration::from_secs(30);
const BATCH: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_guarantees_ride_out_etcd_away_for_30_s_behind_a_running_api_server() -> Result<()> {
    let began = Instant::now();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-etcd-outage");
    let mut run = SideBySide::start(&dir, Options::default()).await?;
    run.feed(BATCH).await?;
    run.wait_flowing(Progress::default(), Duration::from_secs(90)).await?;

    // What a client sees meanwhile: the API server answers, with an error.
    let probe = async |run: &SideBySide| {
        let asked = Instant::now();
        let configmaps = Api::<ConfigMap>::namespaced(run.system.client.clone(), &run.system.namespace);
        let answer = tokio::time::timeout(Duration::from_secs(10), configmaps.get_opt("probe")).await;
        let said = match answer {
            Ok(Ok(_)) => "an answer (etcd not yet missed)".to_owned(),
            Ok(Err(e)) => format!("error: {e}"),
            Err(_) => "no answer in 10 s".to_owned(),
        };
        run.say(&format!(
            "a GET through the API server with etcd away: {said} after {:.1} s",
            asked.elapsed().as_secs_f64()
        ));
    };
    run.outage(Part::Etcd, BATCH, (OUTAGE, Duration::from_secs(22)), probe).await?;

    // The operator's client waits for the API server's own timeout (60 s) on every call, so through
    // a 30 s etcd outage it has nothing to warn of yet: its lines are counted, not required.
    run.conclude(Duration::from_secs(180), false).await?;
    run.shutdown().await?;
    println!("wall time {:.1} s", began.elapsed().as_secs_f64());
    Ok(())
}

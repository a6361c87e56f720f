//! Where the harness's parts run, and how its proxies delay: the latency proxies, the stand-in SQS
//! and the sink either share the bench process's runtime, or the proxies and the stand-in get a
//! runtime (one worker thread) of their own, each (`split`) or together (`far`, the default).
//!
//! Why not shared: a consumer at 5 ms posts thousands of messages a second to the sink, and on a
//! shared runtime a proxy chunk whose moment has come, or a receive the stand-in should answer,
//! waits in the same queues as those requests: time the consumer is charged for a round trip that
//! a real network and a real SQS (neither of which shares a scheduler with the sink) would not
//! add. Why together: every hand-over between threads is a wake-up, a few tenths of a millisecond
//! each on two loaded cores; the proxy and the stand-in on one thread pass a request and its answer
//! over loopback without waking anything. The other placements are kept to show the difference
//! side by side.

use tokio::runtime::{Builder, Handle};

use crate::rtt::Delay;

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Placement {
    /// Everything on the bench process's runtime.
    Shared,
    /// The proxies and the stand-in each on a runtime of their own; the sink on the main one.
    Split,
    /// The proxies and the stand-in together on one runtime of their own; the sink on the main one.
    Far,
}

/// How a proxy spreads its round trip (`rtt::latency_proxy::Delay`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Shape {
    /// Half each way, each chunk waking the timer thread and then the proxy's runtime.
    Even,
    /// All of it on the answers, each wait started early by the proxy's own lateness.
    Answers,
}

/// The runtimes the proxies and the backend are started on, and the proxies' delay.
pub struct Runtimes {
    pub proxy: Handle,
    pub backend: Handle,
    pub shape: Shape,
}

impl Runtimes {
    pub fn new(placement: Placement, shape: Shape) -> Result<Self, String> {
        let (proxy, backend) = match placement {
            Placement::Shared => (Handle::current(), Handle::current()),
            Placement::Split => (dedicated("bench-proxy")?, dedicated("bench-sqs")?),
            Placement::Far => {
                let far = dedicated("bench-far")?;
                (far.clone(), far)
            }
        };
        Ok(Self { proxy, backend, shape })
    }

    /// The delay of a proxy adding `rtt`, 10 % jitter.
    pub fn delay(&self, rtt: std::time::Duration) -> Delay {
        match self.shape {
            Shape::Even => Delay::round_trip(rtt, 10),
            Shape::Answers => Delay::on_answers(rtt, 10),
        }
    }
}

/// A one-worker runtime that lives as long as the bench process.
fn dedicated(name: &str) -> Result<Handle, String> {
    let runtime = Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| format!("{name} runtime: {e}"))?;
    Ok(Box::leak(Box::new(runtime)).handle().clone())
}

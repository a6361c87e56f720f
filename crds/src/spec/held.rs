//! How much a reader may hold: messages received from SQS and not yet settled (delivered and
//! deleted, or released).
//!
//! Why a bound: a message a reader holds but cannot deliver soon is invisible to every other
//! replica, costs visibility extensions, lengthens exactly-once epochs and is redelivered after a
//! crash. The reader holds what it can deliver within `horizonMilliseconds` (its rate-limit
//! share, and the drain its sinks have shown), never more than these ceilings.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Ceilings on what one reader holds. Default: 1000 messages, 64 MiB, a 2 s horizon.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeldSpec {
    /// Most messages one reader holds at once, 1-100000. Below one receive batch per poller, a
    /// poller still takes a batch when nothing is held. Default 1000.
    #[serde(default = "default_max_messages")]
    #[schemars(range(min = 1, max = 100_000))]
    pub max_messages: u32,
    /// Most message body bytes one reader holds at once, 1 KiB to 4 GiB. A poller receives while
    /// the bytes held are under it, so a reader may go over by one receive batch per poller (up to
    /// 10 messages of up to 1 MiB each, SQS's largest); a batch is still taken when nothing is
    /// held. Default 67108864 (64 MiB): with the default four pollers and 1 MiB messages, up to
    /// 104 MiB of bodies, which the reader's default 512Mi memory limit leaves room for.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 1024, max = 4_294_967_296u64))]
    pub max_bytes: u64,
    /// How far ahead a reader takes work, in milliseconds, 100-60000: it holds what it can deliver
    /// in this long at its measured drain and its rate-limit share. Under exactlyOnce at most half
    /// the checkpoint interval is used, so an epoch runs little past its interval. Default 2000.
    #[serde(default = "default_horizon_milliseconds")]
    #[schemars(range(min = 100, max = 60_000))]
    pub horizon_milliseconds: u32,
}

fn default_max_messages() -> u32 {
    1000
}
fn default_max_bytes() -> u64 {
    64 << 20
}
fn default_horizon_milliseconds() -> u32 {
    2000
}

impl Default for HeldSpec {
    fn default() -> Self {
        Self {
            max_messages: default_max_messages(),
            max_bytes: default_max_bytes(),
            horizon_milliseconds: default_horizon_milliseconds(),
        }
    }
}

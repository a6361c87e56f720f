//! How this process runs, besides the spec: from the command line (see `cli`).

use std::path::PathBuf;
use std::time::Duration;

/// Where the checkpoint protocol's state lives under exactlyOnce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coordination {
    /// In-process: this reader is the whole barrier.
    Standalone,
    /// Lease ConfigMaps and the operator's checkpoint ConfigMap (needs the `cluster` feature).
    Kubernetes,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub admin_addr: String,
    pub admin_addr_file: Option<PathBuf>,
    pub shutdown_deadline: Duration,
    /// Not ready while deliveries fail and none has succeeded for this long.
    pub unready_after: Duration,
    /// Pod name in a cluster; any stable name standalone.
    pub reader_id: String,
    pub coordination: Coordination,
}

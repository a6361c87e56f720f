//! The Kubernetes API server's throttling, as this operator sees it: API priority and fairness
//! answers a flow over its share with 429 Too Many Requests and a `Retry-After`.
//!
//! Why a layer of its own: kube's client already retries a 429 after the server's `Retry-After`
//! (`kube::client::retry::RetryPolicy`), but silently. The operator wraps that policy
//! (`retry.rs`) so that every throttled answer is counted, the seconds waited are summed, one WARN
//! line marks the start of an episode and one INFO line its end (`episode.rs`, pure), and the
//! admin server reports not ready while the episode lasts. The waiting itself stays kube's.

pub mod episode;
pub mod metrics;
pub mod retry;

pub use episode::{Episode, Throttling};
pub use retry::{ApiThrottle, ObservedRetry};

#![forbid(unsafe_code)]
//! The checkpoint protocol (`protocol/PROTOCOL.md`): the data of
//! the checkpoint and lease ConfigMaps, and the pure state machines of the operator's coordinator
//! and of a reader's epochs.
//!
//! Why a crate of its own, on std alone: the operator and the readers must agree on these bytes
//! and on these decisions, and they never depend on each other; kept apart from the API crate, the
//! protocol compiles and is model-checked without kube or serde. Nothing here does I/O: the
//! operator's task and the reader's exactly-once layer feed in what they read and carry out what
//! comes back. The model check (`protocol/tests/model_check.rs`) drives the same code.

mod checkpoint_data;
mod clock;
pub mod coordinator;
mod fate;
pub mod ids;
mod lease_data;
pub mod reader_epoch;
mod types;

pub use checkpoint_data::{Checkpoint, Member};
pub use clock::now_ms;
pub use fate::{Fate, Redelivery, can_rejoin, classify, committed_ids, fate, rejoin};
pub use ids::{IdSet, LEASE_ID_BUDGET};
pub use lease_data::Lease;
pub use types::{
    DataError, Epoch, EpochKey, Incarnation, ROLE_LABEL, SOURCE_LABEL, checkpoint_configmap_name,
    lease_configmap_name,
};

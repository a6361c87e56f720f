//! From verdicts to SQS: the ledger of receipts, the acker's deletes and releases, the visibility
//! heartbeat, and the gate through which the checkpoint protocol (if any) is asked.

pub mod acker;
pub mod gate;
pub mod heartbeat;
pub mod held;
pub mod held_report;
pub mod ledger;
pub mod pipeline;
pub mod wait_quantiles;

pub use gate::{Gate, Open};
pub use pipeline::{Arrival, Pipeline};

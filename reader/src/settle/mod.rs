//! From verdicts to SQS: the ledger of receipts, the acker's deletes and releases, the visibility
//! heartbeat, and the gate through which the checkpoint protocol (if any) is asked.

pub mod acker;
mod epoch_steps;
pub mod events;
pub mod gate;
pub mod heartbeat;
pub mod held;
pub mod held_report;
pub mod ledger;
pub mod pipeline;
mod sorted;

pub use epoch_steps::{Deleted, EpochSettle};
pub use gate::{Decision, Gate, Open};
pub use ledger::Tag;
pub use pipeline::{Arrival, Pipeline};

//! From records to sink verdicts: routing, FIFO runs, dead-lettering.

pub mod dispatch;
pub mod events;
pub mod fair;
pub mod fifo;
mod message_span;

//! What the reader is told: the `SqsSource` (from a file), checked into typed settings, and the
//! command line.

pub mod cli;
pub mod operator_only;
pub mod options;
pub mod payload;
pub mod queue_url;
pub mod settings;
pub mod source_file;

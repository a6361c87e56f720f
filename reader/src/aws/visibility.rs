//! SQS's cap on how long a message stays invisible, and how long the reader holds one within it.

use std::time::Duration;

/// How long a message may be held since its receive before it is handed back: SQS refuses to
/// keep a message invisible past 12 h from its receive, so the reader gives it back while it can
/// still choose when (with a 30 min margin for the extensions and the hand-back itself). Both
/// holds use it: a sink's (`settle::pipeline`) and a payload fetch's (`payload::hold`).
pub const HOLD_LIMIT: Duration = Duration::from_secs(11 * 3600 + 30 * 60);

//! Whose fault a failed delivery is: the sink's (or the way to it), or the record's.
//!
//! Why this matters more than "transient or not": SQS counts every receive against the message,
//! and most production queues carry a RedrivePolicy that moves a message to the queue's
//! dead-letter queue after `maxReceiveCount` receives. A record handed back because its sink was
//! down would be spent by an outage it did not cause. So a sink fault keeps the record in the
//! reader (held, invisible, retried in-process: `settle::pipeline`) and only a fault of the
//! record itself takes the dead-letter route. Every sink's error maps to this one enum, and the
//! sinks turn it into [`Outcome`](super::Outcome): `Fault::Sink` is `Outcome::Failed`,
//! `Fault::Record` is `Outcome::Rejected`. A failed AWS call (`aws_error::AwsFailure`) is always
//! the sink's, whether it passes (throttling, 5xx, dropped connections) or not (a missing bucket
//! or queue, denied permissions: the start and operator target checks report those); a record's
//! own AWS faults (an SQS sender fault on its entry) are settled by the sinks as rejected.

use super::retry::AttemptError;

/// Who is at fault when a delivery did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The sink or the way to it: refused or reset connections, timeouts, HTTP 5xx, 408 and 429,
    /// AWS throttling and service faults, a missing bucket or queue, denied permissions. The
    /// record is held and tried again; it never costs the message a receive.
    Sink,
    /// The record itself: HTTP 4xx other than 408 and 429, an SQS sender fault, an object that
    /// is gone, a body too large. Retrying cannot help: the dead-letter route.
    Record,
}

impl AttemptError {
    /// Whose fault this attempt's failure is, whatever the retry policy says about retrying it
    /// now: a 501 the policy does not retry is still the server's answer, not the record's.
    pub fn fault(&self) -> Fault {
        match self {
            AttemptError::Connect | AttemptError::Timeout | AttemptError::Io | AttemptError::ServiceFault => {
                Fault::Sink
            }
            AttemptError::SenderFault => Fault::Record,
            AttemptError::Status { code, .. } => status_fault(*code),
        }
    }
}

/// An HTTP status: 408 (the server timed out waiting), 429 (too many requests) and every 5xx are
/// the server's; every other 4xx says the request (so the record) was refused. Anything else
/// (1xx, 3xx: a redirect the client did not follow) is the endpoint's configuration.
pub fn status_fault(code: u16) -> Fault {
    match code {
        408 | 429 => Fault::Sink,
        400..=499 => Fault::Record,
        _ => Fault::Sink,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn statuses_the_server_owns_are_the_sinks_fault() {
        for code in [408, 429, 500, 501, 502, 503, 504, 599, 301, 100] {
            assert_eq!(status_fault(code), Fault::Sink, "{code}");
        }
        for code in [400, 401, 403, 404, 409, 413, 422, 451] {
            assert_eq!(status_fault(code), Fault::Record, "{code}");
        }
    }

    #[test]
    fn connection_faults_are_the_sinks_and_sender_faults_the_records() {
        for e in [AttemptError::Connect, AttemptError::Timeout, AttemptError::Io, AttemptError::ServiceFault]
        {
            assert_eq!(e.fault(), Fault::Sink, "{e:?}");
        }
        assert_eq!(AttemptError::SenderFault.fault(), Fault::Record);
        let retry_after = Some(Duration::from_secs(1));
        assert_eq!(AttemptError::Status { code: 503, retry_after }.fault(), Fault::Sink);
        assert_eq!(AttemptError::Status { code: 400, retry_after: None }.fault(), Fault::Record);
    }
}

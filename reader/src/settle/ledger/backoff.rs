//! How long a message whose delivery failed stays invisible before SQS offers it again.
//!
//! Why a schedule keyed by the receive count: releasing a failed message with visibility 0 makes
//! SQS hand it straight back, so a fault that lasts (a missing bucket, a sink that refuses
//! everything) turns into a hot loop that users pay for per request. SQS counts receives for us
//! (ApproximateReceiveCount), so the delay grows across receives, across pods and across restarts
//! with no state of our own: 1 s after the first receive, doubling, capped at
//! [`LONGEST_REDELIVERY_DELAY`]. Within 30 s a message is therefore received at most 5 times
//! (1 + 2 + 4 + 8 + 16 s of waiting), whatever the fault.
//!
//! Messages that were never tried (received while stopping, left at a drain) are released at
//! once instead: nothing is wrong with them.

use std::time::Duration;

/// The delay after the first failed receive.
pub const FIRST_REDELIVERY_DELAY: Duration = Duration::from_secs(1);
/// The largest delay: a message keeps coming back at least this often while the fault lasts.
pub const LONGEST_REDELIVERY_DELAY: Duration = Duration::from_secs(300);

/// The visibility to set on a message that failed on its `receive_count`-th receive.
pub fn redelivery_delay(receive_count: u32) -> Duration {
    let doublings = receive_count.saturating_sub(1).min(31);
    FIRST_REDELIVERY_DELAY.saturating_mul(1u32 << doublings).min(LONGEST_REDELIVERY_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_with_each_receive_up_to_the_cap() {
        let secs: Vec<u64> = (0..=12).map(|n| redelivery_delay(n).as_secs()).collect();
        assert_eq!(secs, vec![1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(redelivery_delay(u32::MAX), LONGEST_REDELIVERY_DELAY);
    }

    #[test]
    fn at_most_five_receives_fit_in_thirty_seconds() {
        let mut waited = Duration::ZERO;
        let mut receives = 0;
        while waited < Duration::from_secs(30) {
            receives += 1;
            waited += redelivery_delay(receives);
        }
        assert_eq!(receives, 5);
    }
}

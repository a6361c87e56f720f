//! Quantiles of the delivery wait over one report interval, in constant memory.
//!
//! Why log buckets and not samples: a busy reader hands off thousands of messages per interval,
//! and the report needs only a median and a 99th percentile. Eight buckets per power of two keep
//! each answer within about 7% of the true value (the bucket's midpoint stands for it) whatever
//! the count, with a fixed table that is cleared when a report takes it.

/// Exact buckets below this many milliseconds.
const LINEAR: u64 = 16;
/// Buckets per power of two above [`LINEAR`].
const SUB: u64 = 8;
const BUCKETS: usize = (LINEAR + (64 - 4) * SUB) as usize;

/// Counts of waits (milliseconds) per log bucket.
#[derive(Clone)]
pub struct Quantiles {
    counts: [u64; BUCKETS],
    total: u64,
}

impl Default for Quantiles {
    fn default() -> Self {
        Self { counts: [0; BUCKETS], total: 0 }
    }
}

fn bucket(ms: u64) -> usize {
    if ms < LINEAR {
        return ms as usize;
    }
    let exponent = u64::from(ms.ilog2());
    let mantissa = (ms >> (exponent - 3)) & (SUB - 1);
    (LINEAR + (exponent - 4) * SUB + mantissa) as usize
}

/// The midpoint of bucket `index`.
fn value(index: usize) -> u64 {
    let index = index as u64;
    if index < LINEAR {
        return index;
    }
    let exponent = (index - LINEAR) / SUB + 4;
    let mantissa = (index - LINEAR) % SUB;
    let low = (SUB + mantissa) << (exponent - 3);
    let width = 1u64 << (exponent - 3);
    low.saturating_add(width / 2)
}

impl Quantiles {
    /// `messages` messages waited `ms` milliseconds each.
    pub fn add(&mut self, ms: u64, messages: u64) {
        self.counts[bucket(ms)] += messages;
        self.total += messages;
    }

    /// The `q` quantile (0 < q <= 1) in milliseconds; `None` when nothing was added.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(value(index));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_the_bucket_precision() {
        let mut q = Quantiles::default();
        assert_eq!(q.quantile(0.5), None, "nothing added, no quantile");
        for ms in 1..=10_000u64 {
            q.add(ms, 1);
        }
        let p50 = q.quantile(0.5).unwrap() as f64;
        let p99 = q.quantile(0.99).unwrap() as f64;
        assert!((p50 / 5_000.0 - 1.0).abs() < 0.07, "p50 {p50}");
        assert!((p99 / 9_900.0 - 1.0).abs() < 0.07, "p99 {p99}");
        let mut small = Quantiles::default();
        small.add(3, 99);
        small.add(u64::MAX, 1);
        assert_eq!(small.quantile(0.5), Some(3), "exact below 16 ms");
        assert!(small.quantile(1.0).unwrap() > 1 << 62, "the largest wait lands in the last bucket");
    }
}

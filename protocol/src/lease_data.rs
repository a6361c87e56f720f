//! The data of a reader's lease ConfigMap `<source>-lease-<pod>`, written only by that reader
//! (every write a compare-and-swap on resourceVersion).
//!
//! Why the ids are here: once an epoch is committed, its messages must be deleted even if the
//! reader that holds them dies first. Recording the ids with the ack, before the commit, means
//! every committed id is already durable and visible to the other readers, which delete a
//! redelivered committed message instead of delivering it again.
//!
//! Why the key of an id entry names an incarnation: a restarted reader keeps the committed entries
//! of its previous life (they are still to be deleted) next to its own, and must not confuse the
//! two.

use std::collections::BTreeMap;

use super::ids::{self, IdSet};
use super::types::{DataError, Epoch, Incarnation, required};

/// A reader's lease and its checkpoint progress.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The pod name; also the member name in the checkpoint ConfigMap.
    pub holder: String,
    pub incarnation: Incarnation,
    /// The reader's clock when it last renewed, taken before it extended the visibility of the
    /// messages it holds (see PROTOCOL.md, "lease and visibility").
    pub renewed_at_ms: i64,
    pub lease_duration_seconds: u32,
    /// Every epoch up to this one is closed and acked by this incarnation (0: none).
    pub acked_epoch: Epoch,
    /// Message ids of acked epochs, by (incarnation, epoch), until their delete is confirmed.
    /// Entries of an older incarnation are committed ones carried over on rejoin.
    pub ids: BTreeMap<(Incarnation, Epoch), IdSet>,
    /// Measured delete rate, thousandths of a message per second (the autoscaler reads it).
    pub drain_millis_per_second: u64,
    /// Messages received and not yet deleted or released.
    pub in_flight: u64,
    /// The reader is shutting down: it receives nothing new and leaves after its last commit.
    pub draining: bool,
}

const HOLDER: &str = "holder";
const INCARNATION: &str = "incarnation";
const RENEWED_AT: &str = "renewedAtMs";
const DURATION: &str = "leaseDurationSeconds";
const ACKED: &str = "ackedEpoch";
const DRAIN: &str = "drainPerSecond";
const IN_FLIGHT: &str = "inFlight";
const DRAINING: &str = "draining";
const IDS_PREFIX: &str = "ids.";

impl Lease {
    /// A fresh lease for a reader incarnation that has acked nothing.
    pub fn new(holder: &str, incarnation: Incarnation, now_ms: i64, lease_duration_seconds: u32) -> Self {
        Lease {
            holder: holder.to_owned(),
            incarnation,
            renewed_at_ms: now_ms,
            lease_duration_seconds,
            acked_epoch: 0,
            ids: BTreeMap::new(),
            drain_millis_per_second: 0,
            in_flight: 0,
            draining: false,
        }
    }

    /// When the lease runs out, on the clock of whoever wrote `renewed_at_ms`.
    pub fn expires_at_ms(&self) -> i64 {
        self.renewed_at_ms + i64::from(self.lease_duration_seconds) * 1000
    }

    /// Expired at `now_ms` allowing `skew_ms` of clock difference in the reader's favour: the
    /// operator fences only leases that are expired on every clock within the skew.
    pub fn is_expired(&self, now_ms: i64, skew_ms: i64) -> bool {
        now_ms >= self.expires_at_ms() + skew_ms
    }

    /// Ids recorded across all entries: what counts against [`ids::LEASE_ID_BUDGET`].
    pub fn pending_id_count(&self) -> usize {
        self.ids.values().map(IdSet::len).sum()
    }

    /// The ConfigMap data. Id entries are keys `ids.<incarnation>.<epoch>`.
    pub fn to_data(&self) -> Result<BTreeMap<String, String>, DataError> {
        let mut data = BTreeMap::new();
        data.insert(HOLDER.into(), self.holder.clone());
        data.insert(INCARNATION.into(), self.incarnation.to_string());
        data.insert(RENEWED_AT.into(), self.renewed_at_ms.to_string());
        data.insert(DURATION.into(), self.lease_duration_seconds.to_string());
        data.insert(ACKED.into(), self.acked_epoch.to_string());
        data.insert(
            DRAIN.into(),
            format!("{}.{:03}", self.drain_millis_per_second / 1000, self.drain_millis_per_second % 1000),
        );
        data.insert(IN_FLIGHT.into(), self.in_flight.to_string());
        data.insert(DRAINING.into(), self.draining.to_string());
        for ((inc, epoch), set) in &self.ids {
            let key = format!("{IDS_PREFIX}{inc}.{epoch}");
            let value = ids::encode(set).map_err(|e| DataError::invalid(&key, "", e))?;
            data.insert(key, value);
        }
        Ok(data)
    }

    /// Reads the ConfigMap data; the error names the key that is wrong.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Self, DataError> {
        let mut lease = Lease {
            holder: data.get(HOLDER).cloned().ok_or(DataError::Missing(HOLDER))?,
            incarnation: required(data, INCARNATION)?,
            renewed_at_ms: required(data, RENEWED_AT)?,
            lease_duration_seconds: required(data, DURATION)?,
            acked_epoch: required(data, ACKED)?,
            ids: BTreeMap::new(),
            drain_millis_per_second: match data.get(DRAIN) {
                Some(v) => parse_millis(v)
                    .ok_or_else(|| DataError::invalid(DRAIN, v, "expected a non-negative decimal number"))?,
                None => 0,
            },
            in_flight: match data.get(IN_FLIGHT) {
                Some(_) => required(data, IN_FLIGHT)?,
                None => 0,
            },
            draining: match data.get(DRAINING) {
                Some(_) => required(data, DRAINING)?,
                None => false,
            },
        };
        for (key, value) in data.range(IDS_PREFIX.to_owned()..) {
            let Some(rest) = key.strip_prefix(IDS_PREFIX) else { break };
            let entry = rest
                .split_once('.')
                .and_then(|(inc, epoch)| Some((inc.parse().ok()?, epoch.parse().ok()?)))
                .ok_or_else(|| DataError::invalid(key, "", "expected ids.<incarnation>.<epoch>"))?;
            let set = ids::decode(value).map_err(|e| DataError::invalid(key, value, e))?;
            lease.ids.insert(entry, set);
        }
        Ok(lease)
    }
}

/// "12.5" -> 12500. At most three decimals are kept.
fn parse_millis(value: &str) -> Option<u64> {
    let (whole, frac) = value.split_once('.').unwrap_or((value, ""));
    if whole.is_empty() || !whole.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut frac = frac.chars().take(3).collect::<String>();
    while frac.len() < 3 {
        frac.push('0');
    }
    whole.parse::<u64>().ok()?.checked_mul(1000)?.checked_add(frac.parse().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Lease {
        let mut lease = Lease::new("r-a", Incarnation(9), 1_000, 15);
        lease.acked_epoch = 4;
        lease.drain_millis_per_second = 12_500;
        lease.in_flight = 30;
        lease.draining = true;
        lease.ids.insert(
            (Incarnation(9), 4),
            ["0f8fad5b-d9cb-469f-a165-70867728950e".to_string(), "m2".to_string()].into(),
        );
        lease.ids.insert((Incarnation(3), 2), ["m1".to_string()].into());
        lease
    }

    #[test]
    fn round_trips_through_configmap_data() {
        let lease = sample();
        let data = lease.to_data().unwrap();
        assert_eq!(data["drainPerSecond"], "12.500");
        assert!(data.contains_key("ids.0000000000000009.4"));
        assert_eq!(Lease::from_data(&data).unwrap(), lease);
        assert_eq!(lease.pending_id_count(), 3);
    }

    #[test]
    fn expiry_allows_for_clock_skew() {
        let lease = sample();
        assert_eq!(lease.expires_at_ms(), 16_000);
        assert!(!lease.is_expired(15_999, 0));
        assert!(lease.is_expired(16_000, 0));
        assert!(!lease.is_expired(16_500, 1_000));
    }

    #[test]
    fn optional_keys_default() {
        let mut data = sample().to_data().unwrap();
        for key in ["drainPerSecond", "inFlight", "draining"] {
            data.remove(key);
        }
        let lease = Lease::from_data(&data).unwrap();
        assert_eq!((lease.drain_millis_per_second, lease.in_flight, lease.draining), (0, 0, false));
    }

    #[test]
    fn errors_name_the_key() {
        let mut data = sample().to_data().unwrap();
        data.remove("incarnation");
        assert_eq!(Lease::from_data(&data), Err(DataError::Missing("incarnation")));

        let mut data = sample().to_data().unwrap();
        data.insert("drainPerSecond".into(), "-1".into());
        assert!(Lease::from_data(&data).unwrap_err().to_string().contains("drainPerSecond"));

        let mut data = sample().to_data().unwrap();
        data.insert("ids.zz.4".into(), "=m".into());
        assert!(Lease::from_data(&data).unwrap_err().to_string().contains("ids.zz.4"));

        let mut data = sample().to_data().unwrap();
        data.insert("ids.0000000000000009.5".into(), "short".into());
        let err = Lease::from_data(&data).unwrap_err().to_string();
        assert!(err.contains("ids.0000000000000009.5") && err.contains("short"), "{err}");
    }

    #[test]
    fn decimal_rates_parse_to_millis() {
        assert_eq!(parse_millis("3"), Some(3000));
        assert_eq!(parse_millis("0.25"), Some(250));
        assert_eq!(parse_millis("1.23456"), Some(1234));
        assert_eq!(parse_millis(".5"), None);
        assert_eq!(parse_millis("1e3"), None);
    }
}

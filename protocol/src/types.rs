//! The vocabulary shared by the operator and the readers: epochs, incarnations, the names of the
//! ConfigMaps, and the error that says which ConfigMap key is wrong.
//!
//! Why a separate file: the checkpoint ConfigMap and the lease ConfigMaps are written by different
//! processes (operator, every reader) that never link each other, so the words they share live here.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

/// A checkpoint epoch. Epoch 0 is "before the first epoch": `committed = 0` means nothing committed.
pub type Epoch = u64;

/// One start of one reader process. A restarted (or fenced and rejoined) reader gets a new one, so
/// that the operator, and every other reader, can tell its writes from those of a previous life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Incarnation(pub u64);

impl Incarnation {
    /// A fresh incarnation: the clock mixed with the process's random hash seed, so two processes
    /// started in the same nanosecond still differ.
    pub fn generate() -> Self {
        let nanos =
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or_default();
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(nanos);
        hasher.write_u32(std::process::id());
        Incarnation(hasher.finish() ^ nanos.rotate_left(32))
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl FromStr for Incarnation {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(s, 16).map(Incarnation)
    }
}

/// Names one reader incarnation's output of one epoch: what a transactional sink stages, and what
/// commit makes visible. The incarnation is part of it so that a restarted pod's staged output of
/// the same epoch number never merges with its previous life's aborted output.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpochKey {
    pub pod: String,
    pub incarnation: Incarnation,
    pub epoch: Epoch,
}

/// Name of the operator-owned checkpoint ConfigMap of a source.
pub fn checkpoint_configmap_name(source: &str) -> String {
    format!("{source}-checkpoint")
}

/// Name of the lease ConfigMap of one reader pod.
pub fn lease_configmap_name(source: &str, pod: &str) -> String {
    format!("{source}-lease-{pod}")
}

/// Label on every lease ConfigMap, value `lease`, so that the operator and readers list them.
pub const ROLE_LABEL: &str = "sluice.dev/checkpoint-role";
/// Label naming the source a checkpoint or lease ConfigMap belongs to.
pub const SOURCE_LABEL: &str = "sluice.dev/source";

/// A ConfigMap's data could not be read as checkpoint or lease data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataError {
    Missing(&'static str),
    Invalid { key: String, value: String, reason: String },
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Missing(key) => write!(f, "key {key:?} is missing"),
            DataError::Invalid { key, value, reason } => {
                write!(f, "key {key:?} has value {value:?}: {reason}")
            }
        }
    }
}

impl std::error::Error for DataError {}

impl DataError {
    pub(crate) fn invalid(key: &str, value: &str, reason: impl fmt::Display) -> Self {
        DataError::Invalid { key: key.to_owned(), value: truncate(value), reason: reason.to_string() }
    }
}

/// Error messages quote at most 80 characters of a value (an id list can be a megabyte).
fn truncate(value: &str) -> String {
    match value.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &value[..i]),
        None => value.to_owned(),
    }
}

/// Reads a required key and parses it.
pub(crate) fn required<T>(
    data: &std::collections::BTreeMap<String, String>,
    key: &'static str,
) -> Result<T, DataError>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    let value = data.get(key).ok_or(DataError::Missing(key))?;
    value.parse().map_err(|e| DataError::invalid(key, value, e))
}

/// Reads an optional key and parses it.
pub(crate) fn optional<T>(
    data: &std::collections::BTreeMap<String, String>,
    key: &'static str,
) -> Result<Option<T>, DataError>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    data.get(key).map(|value| value.parse().map_err(|e| DataError::invalid(key, value, e))).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incarnations_print_as_fixed_width_hex_and_parse_back() {
        let inc = Incarnation(0xab);
        assert_eq!(inc.to_string(), "00000000000000ab");
        assert_eq!("00000000000000ab".parse::<Incarnation>().unwrap(), inc);
    }

    #[test]
    fn generated_incarnations_differ() {
        assert_ne!(Incarnation::generate(), Incarnation::generate());
    }

    #[test]
    fn long_values_are_cut_in_errors() {
        let err = DataError::invalid("k", &"x".repeat(500), "bad");
        assert!(err.to_string().len() < 150, "{err}");
    }

    #[test]
    fn names_follow_the_contract() {
        assert_eq!(checkpoint_configmap_name("orders"), "orders-checkpoint");
        assert_eq!(lease_configmap_name("orders", "orders-reader-x"), "orders-lease-orders-reader-x");
    }
}

//! The data of the checkpoint ConfigMap `<source>-checkpoint`, written only by the operator.
//!
//! Why the members live here and not only in the leases: the checkpoint ConfigMap is the one place
//! where "which reader incarnations take part in which epochs", "which are fenced" and "which epoch
//! is committed" change together, in one compare-and-swap. A reader decides whether its epoch is
//! committed from one version of this map alone, so it can never combine a commit with a stale
//! membership.

use std::collections::BTreeMap;

use super::types::{DataError, Epoch, Incarnation, optional, required};

/// A reader incarnation the operator has admitted to the barrier.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    pub incarnation: Incarnation,
    /// The epoch that was open when the operator admitted it: the first epoch it may tag messages
    /// with, and the first whose barrier waits for it.
    pub admitted: Epoch,
    /// `Some(c)`: fenced when the committed epoch was `c`. Its epochs up to `c` are committed (it
    /// acked them while live); every later epoch of this incarnation is aborted forever.
    pub fenced: Option<Epoch>,
}

/// The checkpoint ConfigMap's data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Checkpoint {
    /// `E`: the epoch readers tag newly received messages with.
    pub open: Epoch,
    /// `C`: every epoch up to this one is committed. Always `C < E`.
    pub committed: Epoch,
    /// When `open` was opened, milliseconds since the Unix epoch (operator clock).
    pub opened_at_ms: i64,
    /// Admitted reader incarnations by pod name, fenced ones included until their pod rejoins or
    /// its lease is deleted.
    pub members: BTreeMap<String, Member>,
    /// Reader replicas the autoscaler last asked for; readers divide the source-wide rate limit by
    /// it. Absent until the autoscaler writes it.
    pub replicas: Option<u32>,
}

const OPEN: &str = "openEpoch";
const COMMITTED: &str = "committedEpoch";
const OPENED_AT: &str = "openedAtMs";
const MEMBERS: &str = "members";
const REPLICAS: &str = "replicas";

impl Checkpoint {
    /// The state the operator creates: epoch 1 open, nothing committed, no members.
    pub fn initial(now_ms: i64) -> Self {
        Checkpoint { open: 1, committed: 0, opened_at_ms: now_ms, members: BTreeMap::new(), replicas: None }
    }

    /// Members that are neither fenced nor replaced: the readers whose acks a barrier waits for.
    pub fn live_members(&self) -> impl Iterator<Item = (&String, &Member)> {
        self.members.iter().filter(|(_, m)| m.fenced.is_none())
    }

    /// The ConfigMap data. Members are one line each: `<pod> <incarnation> <admitted>`, followed by
    /// ` fenced <committedThrough>` for a fenced one.
    pub fn to_data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        data.insert(OPEN.into(), self.open.to_string());
        data.insert(COMMITTED.into(), self.committed.to_string());
        data.insert(OPENED_AT.into(), self.opened_at_ms.to_string());
        let members: Vec<String> = self
            .members
            .iter()
            .map(|(pod, m)| match m.fenced {
                None => format!("{pod} {} {}", m.incarnation, m.admitted),
                Some(c) => format!("{pod} {} {} fenced {c}", m.incarnation, m.admitted),
            })
            .collect();
        data.insert(MEMBERS.into(), members.join("\n"));
        if let Some(r) = self.replicas {
            data.insert(REPLICAS.into(), r.to_string());
        }
        data
    }

    /// Reads the ConfigMap data; the error names the key that is wrong.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Self, DataError> {
        let open: Epoch = required(data, OPEN)?;
        let committed: Epoch = required(data, COMMITTED)?;
        if committed >= open {
            return Err(DataError::invalid(
                COMMITTED,
                &committed.to_string(),
                format!("must be below {OPEN} ({open})"),
            ));
        }
        let mut members = BTreeMap::new();
        let text = data.get(MEMBERS).map(String::as_str).unwrap_or("");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (pod, member) = parse_member(line).ok_or_else(|| {
                DataError::invalid(
                    MEMBERS,
                    line,
                    "expected `<pod> <incarnation> <admitted> [fenced <epoch>]`",
                )
            })?;
            members.insert(pod, member);
        }
        Ok(Checkpoint {
            open,
            committed,
            opened_at_ms: required(data, OPENED_AT)?,
            members,
            replicas: optional(data, REPLICAS)?,
        })
    }
}

fn parse_member(line: &str) -> Option<(String, Member)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let fenced = match words.as_slice() {
        [_, _, _] => None,
        [_, _, _, "fenced", c] => Some(c.parse().ok()?),
        _ => return None,
    };
    Some((
        words[0].to_owned(),
        Member { incarnation: words[1].parse().ok()?, admitted: words[2].parse().ok()?, fenced },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        let mut cp = Checkpoint::initial(1_700_000_000_000);
        cp.open = 7;
        cp.committed = 5;
        cp.replicas = Some(3);
        cp.members.insert("r-a".into(), Member { incarnation: Incarnation(1), admitted: 2, fenced: None });
        cp.members
            .insert("r-b".into(), Member { incarnation: Incarnation(0xff), admitted: 3, fenced: Some(4) });
        cp
    }

    #[test]
    fn round_trips_through_configmap_data() {
        let cp = sample();
        let data = cp.to_data();
        assert_eq!(data["members"], "r-a 0000000000000001 2\nr-b 00000000000000ff 3 fenced 4");
        assert_eq!(Checkpoint::from_data(&data).unwrap(), cp);
    }

    #[test]
    fn initial_state_round_trips_without_members_or_replicas() {
        let cp = Checkpoint::initial(0);
        assert_eq!(Checkpoint::from_data(&cp.to_data()).unwrap(), cp);
        assert_eq!(cp.live_members().count(), 0);
    }

    #[test]
    fn live_members_leave_out_fenced_ones() {
        let cp = sample();
        let live: Vec<&String> = cp.live_members().map(|(p, _)| p).collect();
        assert_eq!(live, ["r-a"]);
    }

    #[test]
    fn errors_name_the_key() {
        let mut data = sample().to_data();
        data.remove("openEpoch");
        assert_eq!(Checkpoint::from_data(&data), Err(DataError::Missing("openEpoch")));

        let mut data = sample().to_data();
        data.insert("committedEpoch".into(), "seven".into());
        let err = Checkpoint::from_data(&data).unwrap_err().to_string();
        assert!(err.contains("committedEpoch") && err.contains("seven"), "{err}");

        let mut data = sample().to_data();
        data.insert("committedEpoch".into(), "7".into());
        let err = Checkpoint::from_data(&data).unwrap_err().to_string();
        assert!(err.contains("must be below openEpoch"), "{err}");

        let mut data = sample().to_data();
        data.insert("members".into(), "r-a 1 2 retired".into());
        let err = Checkpoint::from_data(&data).unwrap_err().to_string();
        assert!(err.contains("members") && err.contains("retired"), "{err}");
    }
}

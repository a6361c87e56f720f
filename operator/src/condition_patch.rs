//! One condition written beside the reconciler's, by a task that owns that condition alone.
//!
//! Why a JSON patch and not an apply: the condition belongs in the one `conditions` list the
//! reconciler applies, and a patch of one entry leaves every other entry alone whatever the API
//! server's list handling (an apply replaces what its manager owned; a server that treats the
//! list as one field would let each writer erase the other's conditions).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

/// A JSON patch that replaces the entry of `conditions` of `condition`'s type (guarded by a test
/// of its type at that index, so a stale list fails the patch rather than overwriting another
/// entry) or appends one; `None` while `conditions` is empty.
///
/// Why nothing for an empty list: the only patch that creates the list (`add` at
/// `/status/conditions`) replaces whatever list the server holds by then, and the copy a task
/// reads can be older than the reconciler's first status write (the autoscaler's status fields
/// alone make a status). A thousand new sources showed it: a source's Ready and every other
/// reconciler condition were erased, and nothing wrote them again for half an hour. The
/// reconciler writes its conditions on every source's first reconcile, so the task's next pass
/// appends to them.
pub fn condition_patch(conditions: &[Condition], condition: &Condition) -> Option<serde_json::Value> {
    let type_ = &condition.type_;
    match conditions.iter().position(|c| &c.type_ == type_) {
        Some(i) => Some(json!([
            { "op": "test", "path": format!("/status/conditions/{i}/type"), "value": type_ },
            { "op": "replace", "path": format!("/status/conditions/{i}"), "value": condition },
        ])),
        None if conditions.is_empty() => None,
        // Appended to the server's list as it is; a copy that missed an entry of this type
        // makes a duplicate key, which the schema's list-map refuses.
        None => Some(json!([{ "op": "add", "path": "/status/conditions/-", "value": condition }])),
    }
}

/// The transition time for a condition about to be written with `status`: kept from `previous`
/// when the status is the same, else `now`.
pub fn since(previous: Option<&Condition>, status: &str, now: Timestamp) -> Time {
    match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: "R".into(),
            message: "m".into(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn the_patch_replaces_only_its_own_entry_or_appends_it() {
        let ours = condition("SinksHealthy");
        let patch = condition_patch(&[condition("Ready"), condition("SinksHealthy")], &ours).unwrap();
        assert_eq!(
            patch[0],
            json!({"op": "test", "path": "/status/conditions/1/type", "value": "SinksHealthy"})
        );
        assert_eq!(patch[1]["path"], "/status/conditions/1");
        let appended = condition_patch(&[condition("Ready")], &ours).unwrap();
        assert_eq!(appended[0]["path"], "/status/conditions/-");
    }

    #[test]
    fn nothing_is_written_before_the_reconcilers_conditions() {
        assert_eq!(condition_patch(&[], &condition("SinksHealthy")), None);
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let before = condition("Fallback");
        let now = Timestamp::from_second(1_800_000_000).expect("in range");
        assert_eq!(since(Some(&before), "True", now), Time(Timestamp::UNIX_EPOCH));
        assert_eq!(since(Some(&before), "False", now), Time(now));
        assert_eq!(since(None, "True", now), Time(now));
    }
}

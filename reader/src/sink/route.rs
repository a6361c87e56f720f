//! Which sinks a record goes to.
//!
//! Why apart from the sinks: routing is a decision about the record, not about delivery, and the
//! pipeline needs it before it fans out (to know how many acknowledgements a record waits for).
//! A sink without a route takes every record; a routed sink takes a record whose message attribute
//! `route.attribute` has one of `route.values`. A record no sink takes is the pipeline's call
//! (the reader treats it as delivered to nothing); this module only answers the question.

use sluice_crds::RouteSpec;

use crate::record::Record;

/// Whether a sink with this route takes `record`.
pub fn selects(route: Option<&RouteSpec>, record: &Record) -> bool {
    match route {
        None => true,
        Some(route) => record
            .message_attributes
            .get(&route.attribute)
            .is_some_and(|value| route.values.iter().any(|v| v == value)),
    }
}

/// Indexes (into `routes`, one per sink in spec order) of the sinks that take `record`.
pub fn targets<'a>(routes: impl IntoIterator<Item = Option<&'a RouteSpec>>, record: &Record) -> Vec<usize> {
    routes.into_iter().enumerate().filter(|(_, route)| selects(*route, record)).map(|(i, _)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::testing::record;

    fn route(attribute: &str, values: &[&str]) -> RouteSpec {
        RouteSpec { attribute: attribute.into(), values: values.iter().map(|v| v.to_string()).collect() }
    }

    fn with_attr(name: &str, value: &str) -> Record {
        let mut r = record("m");
        r.message_attributes.insert(name.into(), value.into());
        r
    }

    #[test]
    fn no_route_takes_everything() {
        assert!(selects(None, &record("m")));
    }

    #[test]
    fn a_route_matches_on_one_of_its_values() {
        let eu = route("region", &["eu-west-1", "eu-central-1"]);
        assert!(selects(Some(&eu), &with_attr("region", "eu-central-1")));
        assert!(!selects(Some(&eu), &with_attr("region", "us-east-1")));
        assert!(!selects(Some(&eu), &with_attr("Region", "eu-west-1")), "attribute names are case-sensitive");
        assert!(!selects(Some(&eu), &record("m")), "a missing attribute matches nothing");
        assert!(!selects(Some(&route("region", &[])), &with_attr("region", "")));
    }

    #[test]
    fn fan_out_lists_every_matching_sink_in_order() {
        let orders = route("kind", &["order"]);
        let refunds = route("kind", &["refund"]);
        let routes = [None, Some(&orders), Some(&refunds), Some(&orders)];
        assert_eq!(targets(routes, &with_attr("kind", "order")), vec![0, 1, 3]);
        assert_eq!(targets(routes, &with_attr("kind", "refund")), vec![0, 2]);
        assert_eq!(targets([Some(&orders)], &with_attr("kind", "other")), Vec::<usize>::new());
    }
}

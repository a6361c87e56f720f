//! One line about a Kubernetes API call that failed, for the WARN lines and errors a person reads.
//!
//! Why not kube's Display: for a refusal it appends a Debug dump of the whole `Status` (every
//! `Option`, the empty `ListMeta`), which says nothing the message, code and reason do not.

/// The refusal's message, code and reason, or kube's own words for an error without an answer
/// (no connection, a timeout), which carry no dump.
pub fn api_line(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} (HTTP {} {})", status.message.trim(), status.code, status.reason)
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    #[test]
    fn a_refusal_is_its_message_code_and_reason_without_a_dump() {
        let refused = kube::Error::Api(Box::new(
            Status::failure("configmaps \"s-lease-p\" is forbidden: User \"u\" cannot update", "Forbidden")
                .with_code(403),
        ));
        let line = api_line(&refused);
        assert_eq!(
            line,
            "configmaps \"s-lease-p\" is forbidden: User \"u\" cannot update (HTTP 403 Forbidden)"
        );
        assert!(!refused.to_string().starts_with(&line), "kube's own Display is what this replaces");
    }
}

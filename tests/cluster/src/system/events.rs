//! The Events the operator records about a source, as the suites read them.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use super::System;
use crate::poll::{self, Check};

impl System {
    /// The events about `source` in the suite's namespace, as (reason, note), oldest first as the
    /// API server lists them.
    pub async fn source_events(&self, source: &str) -> Result<Vec<(String, String)>> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(source))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect())
    }

    /// The note of the first event about `source` with `reason`, waited for up to `within`.
    pub async fn wait_source_event(&self, source: &str, reason: &str, within: Duration) -> Result<String> {
        poll::until(within, Duration::from_millis(250), || async {
            let found = self.source_events(source).await?.into_iter().find(|(r, _)| r == reason);
            Ok(match found {
                Some((_, note)) => Check::Met(note),
                None => Check::NotYet(format!("no {reason} event about {source} yet")),
            })
        })
        .await
    }
}

//! Whose AWS identity reads a source's queue attributes (the reconciler's queue checks and the
//! autoscaler's metrics).
//!
//! Why not always the operator's own: on a shared cluster one operator identity able to read
//! every team's queues is a broad grant. A source that names a role (`credentials.source:
//! AssumeRole`) is read with that role: the operator assumes it (with the source's external id
//! and session name, default `sluice-operator`) on top of its own identity, so the operator's own
//! policy needs only `sts:AssumeRole` on those roles. Sources on the default chain or static
//! keys are read with the operator's identity: the operator never reads Secrets, and a reader's
//! IRSA or Pod Identity role is bound to the reader's ServiceAccount, not to the operator.
//!
//! Each distinct (role, external id, session name) gets one SQS client set, cached for the life
//! of the process, so its temporary credentials are cached and refreshed by the SDK instead of
//! an sts:AssumeRole call per poll.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use aws_config::sts::AssumeRoleProvider;
use aws_sdk_sqs::config::SharedCredentialsProvider;
use futures::FutureExt;
use futures::future::BoxFuture;
use sluice_crds::{CredentialSource, Credentials, QueueRef};

use crate::queue_check::sqs::SqsInspector;
use crate::queue_check::targets::{Target, TargetInspector};
use crate::queue_check::{QueueAttributes, QueueError, QueueInspector};

/// Session name when the source names none: CloudTrail then shows the operator as the caller.
pub const DEFAULT_SESSION_NAME: &str = "sluice-operator";

/// (role ARN, external id, session name).
type RoleKey = (String, Option<String>, String);

/// SQS client sets by identity: the operator's own, and one per assumed role.
#[derive(Clone)]
pub struct Identities {
    own: SqsInspector,
    assumed: Arc<Mutex<HashMap<RoleKey, SqsInspector>>>,
}

impl Identities {
    /// `own` carries the operator's identity (its default chain) and is the base for assuming.
    pub fn new(own: SqsInspector) -> Self {
        Self { own, assumed: Arc::default() }
    }

    /// The clients that read a source with these credentials.
    pub async fn for_source(&self, credentials: &Credentials) -> SqsInspector {
        let Some(key) = role_key(credentials) else {
            return self.own.clone();
        };
        if let Some(found) = self.assumed.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return found.clone();
        }
        let (role_arn, external_id, session_name) = key.clone();
        let mut builder = AssumeRoleProvider::builder(role_arn).session_name(session_name);
        if let Some(id) = external_id {
            builder = builder.external_id(id);
        }
        let provider = builder.configure(self.own.base()).build().await;
        let config = self
            .own
            .base()
            .clone()
            .into_builder()
            .credentials_provider(SharedCredentialsProvider::new(crate::aws_requests::counted_credentials(
                provider,
            )))
            .build();
        let inspector = SqsInspector::new(config);
        // Two first polls racing build twice; one of the equal entries is kept.
        self.assumed.lock().unwrap_or_else(PoisonError::into_inner).entry(key).or_insert(inspector).clone()
    }

    /// How many assumed-role client sets are cached.
    pub fn assumed_roles(&self) -> usize {
        self.assumed.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// The reconciler's target checks (dead-letter and sink queues, buckets), with the source's identity.
impl TargetInspector for Identities {
    fn check<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<(), QueueError>> {
        self.own.check(target)
    }

    fn check_as<'a>(
        &'a self,
        target: &'a Target,
        credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<(), QueueError>> {
        async move { self.for_source(credentials).await.check(target).await }.boxed()
    }
}

/// The reconciler's queue checks, with the source's identity.
impl QueueInspector for Identities {
    fn inspect<'a>(&'a self, queue: &'a QueueRef) -> BoxFuture<'a, Result<QueueAttributes, QueueError>> {
        self.own.inspect(queue)
    }

    fn inspect_as<'a>(
        &'a self,
        queue: &'a QueueRef,
        credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<QueueAttributes, QueueError>> {
        async move { self.for_source(credentials).await.inspect(queue).await }.boxed()
    }
}

/// The role a source names, if it assumes one.
pub fn role_key(credentials: &Credentials) -> Option<RoleKey> {
    if credentials.source != CredentialSource::AssumeRole {
        return None;
    }
    let role_arn = credentials.role_arn.clone()?;
    let session = credentials.session_name.clone().unwrap_or_else(|| DEFAULT_SESSION_NAME.to_owned());
    Some((role_arn, credentials.external_id.clone(), session))
}

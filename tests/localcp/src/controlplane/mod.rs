//! A local Kubernetes control plane for tests and demos.
//!
//! No kube-apiserver, etcd, kind or container engine can run on the project's machines, yet the operator
//! and the readers must be proven as separate processes talking to a Kubernetes API. This module serves
//! the subset of the API they (and kube-runtime, and kubectl for inspection) use, over plain HTTP on
//! 127.0.0.1, for built-in and custom resources alike.
//!
//! Why not an existing emulator: `kube-fake-client` (crates.io) is an in-process fake `kube::Client`
//! modelled on controller-runtime's fake client, so other processes (the operator and reader binaries)
//! cannot reach it and it has no watch history or 410 semantics; kmock (PyPI) is a scriptable HTTP mock
//! for Kopf operators whose Kubernetes emulation is a convenience layer without server-side apply
//! ownership, status subresources, garbage collection or CRD registration, and it would add a Python
//! runtime to every Rust test. Writing the store here keeps it small, in Rust, and testable.
//!
//! Layout: [`store`] is the pure state machine (objects, resourceVersions, history, apply, GC);
//! [`names`] and [`schema`] are what it checks and shapes on every write (object names per kind; CRD
//! defaulting and pruning); [`events`] makes core/v1 and events.k8s.io/v1 two views of one event store;
//! [`http`] maps URLs and verbs onto it, authenticates callers, streams watches, and serves what kubectl
//! reads besides objects (OpenAPI v2/v3 documents, `Table` output, pod logs); [`admission`]
//! evaluates ValidatingAdmissionPolicies; [`server`] starts and stops it; [`kubeconfig`] writes the
//! file `kube::Client::try_default()` and kubectl read; [`sluice`] wires the SqsSource validator and
//! installs the reader policy of deploy/policy/.
//!
//! Who is asking: a request without a token is the administrator (the kubeconfig it writes has no
//! user); a bearer token issued through the TokenRequest API (`serviceaccounts/<name>/token`, which
//! the process runner calls for each pod, as a kubelet does) is that ServiceAccount, with the bound
//! pod in `userInfo.extra` ([`http::auth`]). ValidatingAdmissionPolicies and their bindings are
//! stored like any object and evaluated with CEL on every create, update and delete of any served
//! kind, after patches are applied and before the write is stored ([`admission`]), so the
//! end-to-end suites run with the reader policy in force.
//!
//! Behaviours it does NOT reproduce:
//! - authorization (RBAC objects are stored but never enforced: a ServiceAccount may read and, as
//!   far as admission lets it, write everything), token expiry and JWTs, admission webhooks,
//!   mutating policies, policy `params` and selectors (see [`admission`]), quotas, limit ranges, pod
//!   security, and the OpenAPI schema validation (types, enums, ranges) and CEL rules of CRDs (a per-kind
//!   Rust hook, [`validate`], stands in for them; defaulting and pruning by the CRD's structural schema
//!   are done, and `fieldValidation=Strict` refuses fields a CRD does not declare);
//! - defaulting of built-in kinds (no `replicas: 1`, `strategy`, `imagePullPolicy`… filled in), unknown
//!   fields in built-in kinds (kept, never refused: their schemas are not carried; the OpenAPI documents
//!   describe them as objects with any fields, so `kubectl explain deployment.spec` lists nothing), and
//!   version conversion (one stored version per resource; other served versions only relabel
//!   `apiVersion`);
//! - object names are checked on create only as a cluster does (RFC 1123 subdomain for most kinds, label
//!   for Namespaces and Services, path segment for RBAC), but not generateName's prefix length rules;
//! - namespaces are not required to exist, and deleting a namespace does not delete its contents;
//! - list `limit`/`continue` paging (everything comes in one page), `resourceVersion`/
//!   `resourceVersionMatch` on lists (always the latest state); `Table` output (gets, lists and
//!   watches) has a CRD's printer columns and the usual columns of pods, deployments, configmaps,
//!   events and namespaces, but only Name and Created At for other built-in kinds;
//! - protobuf bodies except ConfigMap and TokenRequest, and CBOR bodies (415): `kubectl create
//!   configmap` and `kubectl create token` work (see [`http`]'s `protobuf`), other imperative
//!   commands that send protobuf for built-in types (`kubectl create deployment`, `kubectl scale`)
//!   fail; `kubectl apply` (validation on), `patch`, `get`, `describe`, `explain`, `logs`, `delete`
//!   work;
//! - the `fieldValidation=Warn` default (no warning headers) and dry runs;
//! - request bodies over 3 MiB are refused with a 413 Status, as by the API server, but there is no
//!   limit on the size of a stored object beyond that;
//! - watches with a selector do not send a synthetic DELETED when an object stops matching;
//! - strategic merge patch is approximated (maps merge, name-keyed lists merge, `$patch` directives are
//!   ignored), and server-side apply tracks ownership per map key with lists atomic; `Update` operations
//!   record no managed fields;
//! - the garbage collector runs synchronously (after a removal, and after a create or an update that
//!   leaves an object whose owner references all name absent uids, as the real collector eventually
//!   does); foreground deletion has no `foregroundDeletion` finalizer phase, and `blockOwnerDeletion`
//!   is ignored;
//! - no controllers at all (Deployments do not create ReplicaSets or Pods: the [`crate::kubelet`] runner
//!   plays that part), no scheduling, no `exec`/`port-forward`/`attach`, no aggregation, protobuf only as above, no
//!   HTTP/2 or TLS; `logs` returns the process runner's log file as it is (`tailLines` honoured; `follow`,
//!   `previous`, `sinceSeconds` and `timestamps` are not);
//! - events through the events.k8s.io/v1 view are filtered and watched in the core shape (see
//!   [`events`]).

pub mod admission;
pub mod clock;
pub mod error;
pub mod events;
pub mod fields;
pub mod http;
pub mod kubeconfig;
pub mod names;
pub mod patch;
pub mod registry;
pub mod schema;
pub mod selector;
pub mod server;
pub mod sluice;
pub mod store;
pub mod validate;

pub use server::{Config, ControlPlane};

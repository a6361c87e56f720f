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
//! [`http`] maps URLs and verbs onto it, authenticates callers and streams watches; [`admission`]
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
//!   security, and the OpenAPI schema / CEL validation of CRDs (a per-kind Rust hook, [`validate`],
//!   stands in for validation);
//! - defaulting (no `replicas: 1`, `strategy`, `imagePullPolicy`… filled in) and version conversion
//!   (one stored version per resource; other served versions only relabel `apiVersion`);
//! - namespaces are not required to exist, and deleting a namespace does not delete its contents;
//! - list `limit`/`continue` paging (everything comes in one page), `resourceVersion`/
//!   `resourceVersionMatch` on lists (always the latest state), and `Table` output for kubectl
//!   (`kubectl get` shows NAME and AGE only);
//! - protobuf and CBOR bodies (415): kubectl's imperative commands that send protobuf for built-in
//!   types (`kubectl create deployment`, `kubectl scale`) fail; `kubectl apply`, `patch`, `get`, `delete`
//!   work. No OpenAPI schemas are served, so kubectl needs `--validate=false`;
//! - watches with a selector do not send a synthetic DELETED when an object stops matching;
//! - strategic merge patch is approximated (maps merge, name-keyed lists merge, `$patch` directives are
//!   ignored), and server-side apply tracks ownership per map key with lists atomic; `Update` operations
//!   record no managed fields;
//! - the garbage collector runs synchronously; foreground deletion has no `foregroundDeletion` finalizer
//!   phase, and `blockOwnerDeletion` is ignored;
//! - no controllers at all (Deployments do not create ReplicaSets or Pods: the [`crate::kubelet`] runner
//!   plays that part), no scheduling, no `exec`/`logs`/`port-forward`, no aggregation, no protobuf, no HTTP/2
//!   or TLS.

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

//go:build tools

// Package tools pins the Kubernetes control-plane commands that tests/controlplane/build.sh builds.
// The module exists only to name k8s.io/kubernetes at one version with its staging modules at the
// matching v0.x.y (k8s.io/kubernetes itself replaces them with local paths, so `go install` refuses it).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)

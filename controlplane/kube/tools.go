//go:build tools

// Package tools records the Kubernetes commands that controlplane/build compiles, so that go.mod and go.sum
// pin every module they need.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)

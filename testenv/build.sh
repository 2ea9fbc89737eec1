#!/usr/bin/env bash
# Builds the test control plane into target/testenv/: kube-apiserver, kube-scheduler and
# kube-controller-manager from the Kubernetes release pinned in go.mod, and kestrel-testenv
# (embedded etcd + supervisor).
# Go's build cache makes a rebuild take seconds.
set -euo pipefail
cd "$(dirname "$0")"
out="$(cd .. && pwd)/target/testenv"
mkdir -p "$out"
export GOFLAGS="${GOFLAGS:--mod=mod}"
go build -ldflags "-s -w" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    ./cmd/kestrel-testenv
echo "test control plane built in $out: $(cd "$out" && ls | tr '\n' ' ')"

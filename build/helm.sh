#!/usr/bin/env bash
# Helm for CI and for checking the chart, built from its released Go module (no binary
# download, no container image): needs Go and the Go module proxy the first time only.
#
#   build/helm.sh install   build helm $HELM_VERSION into target/tools/helm-$HELM_VERSION/
#                           (skipped when already there) and print its path
#   build/helm.sh lint      helm lint --strict charts/kestrel, and check that a value of
#                           the wrong type is refused with its name
#   build/helm.sh render    helm template charts/kestrel (CRDs included, namespace
#                           kube-system) into target/helm-rendered.yaml, the objects that
#                           a server-side dry-run apply or `kubectl apply` takes
#
# Environment: HELM_VERSION (default below), HELM (use this helm binary instead),
# HELM_RENDERED (output of `render`, default target/helm-rendered.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
TOOLS="$PWD/target/tools/helm-$HELM_VERSION"
RENDERED="${HELM_RENDERED:-$PWD/target/helm-rendered.yaml}"

install_helm() {
    if [[ -n "${HELM:-}" ]]; then
        echo "$HELM"
        return
    fi
    if [[ ! -x "$TOOLS/helm" ]]; then
        command -v go >/dev/null || { echo "build/helm.sh: needs Go to build helm" >&2; exit 1; }
        mkdir -p "$TOOLS"
        echo "building helm $HELM_VERSION from helm.sh/helm/v3 into $TOOLS (once)" >&2
        # -X sets what `helm version` reports (a module build leaves it unset).
        GOBIN="$TOOLS" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath \
            -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
            "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
    fi
    echo "$TOOLS/helm"
}

lint_chart() {
    local helm
    helm="$(install_helm)"
    "$helm" lint --strict charts/kestrel
    # Bad input: a value of the wrong type is refused, naming the value.
    local out
    if out="$("$helm" lint --strict charts/kestrel --set-string replicas=two 2>&1)"; then
        echo "build/helm.sh: helm lint accepted replicas=two" >&2
        exit 1
    fi
    grep -q "replicas" <<<"$out" || {
        echo "build/helm.sh: helm lint refused replicas=two without naming it:" >&2
        echo "$out" >&2
        exit 1
    }
    echo "helm lint refuses replicas=two: $(grep -m1 -i "replicas" <<<"$out" | sed 's/^ *//')"
    # A tracking URI Kestrel cannot use (https) is refused before anything is installed.
    if out="$("$helm" lint --strict charts/kestrel --set mlflowTrackingUri=https://mlflow:5000 2>&1)"; then
        echo "build/helm.sh: helm lint accepted mlflowTrackingUri=https://mlflow:5000" >&2
        exit 1
    fi
    grep -q "mlflowTrackingUri" <<<"$out" || {
        echo "build/helm.sh: helm lint refused mlflowTrackingUri without naming it:" >&2
        echo "$out" >&2
        exit 1
    }
    "$helm" lint --strict charts/kestrel --set mlflowTrackingUri=http://mlflow.mlflow:5000 >/dev/null
}

render_chart() {
    local helm
    helm="$(install_helm)"
    mkdir -p "$(dirname "$RENDERED")"
    "$helm" template kestrel charts/kestrel --namespace kube-system --include-crds >"$RENDERED"
    echo "rendered the chart into $RENDERED" >&2
}

case "${1:-}" in
    install) install_helm ;;
    lint) lint_chart ;;
    render) render_chart ;;
    *)
        echo "usage: build/helm.sh install|lint|render" >&2
        exit 2
        ;;
esac

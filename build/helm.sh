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

# lint_refuses HELM NAME ARGS...: helm lint must refuse the chart with ARGS, naming NAME.
lint_refuses() {
    local helm="$1" name="$2" out
    shift 2
    if out="$("$helm" lint --strict charts/kestrel "$@" 2>&1)"; then
        echo "build/helm.sh: helm lint accepted $*" >&2
        exit 1
    fi
    grep -q "$name" <<<"$out" || {
        echo "build/helm.sh: helm lint refused $* without naming $name:" >&2
        echo "$out" >&2
        exit 1
    }
    echo "helm lint refuses $*: $(grep -m1 "$name" <<<"$out" | sed 's/^ *//')"
}

lint_chart() {
    local helm
    helm="$(install_helm)"
    "$helm" lint --strict charts/kestrel
    # Bad input: a value of the wrong type is refused, naming the value; so is a tracking
    # URI Kestrel cannot use (https), before anything is installed.
    lint_refuses "$helm" replicas --set-string replicas=two
    lint_refuses "$helm" mlflowTrackingUri --set mlflowTrackingUri=https://mlflow:5000
    lint_refuses "$helm" /agent/image/tag --set agent.enabled=true --set agent.image.tag=2
    # The agent's template, which renders only when enabled, on its own image.
    "$helm" lint --strict charts/kestrel --set agent.enabled=true \
        --set agent.image.repository=registry.example.com/gpu/kestrel-agent >/dev/null
    "$helm" lint --strict charts/kestrel --set mlflowTrackingUri=http://mlflow.mlflow:5000 >/dev/null
    # The dashboard and its NetworkPolicy; a policy whose dashboard rule admits everyone
    # (no peers) or an address that is not one of the pod's is refused.
    "$helm" lint --strict charts/kestrel --set dashboard.enabled=true --set dashboard.address=0.0.0.0 \
        --set dashboard.networkPolicy.enabled=true >/dev/null
    lint_refuses "$helm" /dashboard/networkPolicy/from --set-json 'dashboard.networkPolicy.from=[]'
    lint_refuses "$helm" /dashboard/address --set dashboard.address=10.0.0.1
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

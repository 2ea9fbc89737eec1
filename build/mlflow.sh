#!/usr/bin/env bash
# MLflow for the TrainingJob tests: PyPI's `mlflow` in a virtual environment under
# target/tools/ (once; about 40 s and 850 MB), which the tests start on loopback with a
# SQLite backend. Prints the path of the `mlflow` command.
#
# Environment: MLFLOW_VERSION (default below), MLFLOW_VENV (where to install, default
# target/tools/mlflow-venv; the tests read the same variable), PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

MLFLOW_VERSION="${MLFLOW_VERSION:-3.17.2}"
VENV="${MLFLOW_VENV:-$PWD/target/tools/mlflow-venv}"
PYTHON="${PYTHON:-python3}"

if [[ ! -x "$VENV/bin/mlflow" ]] || ! "$VENV/bin/python" -c "import mlflow, sys; sys.exit(mlflow.__version__ != '$MLFLOW_VERSION')" 2>/dev/null; then
    command -v "$PYTHON" >/dev/null || { echo "build/mlflow.sh: needs $PYTHON (3.10 or later)" >&2; exit 1; }
    echo "installing mlflow $MLFLOW_VERSION into $VENV (once)" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "mlflow==$MLFLOW_VERSION" >&2
fi
echo "$VENV/bin/mlflow"

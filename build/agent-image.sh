#!/usr/bin/env bash
# The node agent's image, kestrel-agent:VERSION: a dynamically linked (glibc) `kestrel`,
# which can load NVIDIA's management library (libnvidia-ml.so.1) that the NVIDIA container
# runtime mounts into the container, plus exactly the shared libraries it and NVML need,
# taken from this machine. No base image, registry or container daemon: the Rust
# toolchain, binutils (readelf), ldd and python3.
#
#   build/agent-image.sh                  release build, then the image
#   build/agent-image.sh --binary PATH    the image of a `kestrel` built already (CI packs
#                                         the one its test build made, stripped, so that
#                                         the dependencies compile once)
#
# Writes target/image/kestrel-glibc (the binary), target/image/kestrel-agent-oci/ (an OCI
# image layout) and target/image/kestrel-agent-VERSION.oci.tar (under $CARGO_TARGET_DIR
# when set). IMAGE_NAME overrides the name, e.g. registry.example.com/platform/kestrel-agent.
#
# The image: /kestrel; the dynamic loader at the path the binary names (PT_INTERP); the
# libraries ldd finds for it (libc, libm, libgcc_s); the glibc objects NVML links against
# (libc, libm, libdl, libpthread, librt); /etc/ld.so.conf naming /usr/lib/x86_64-linux-gnu
# and /usr/lib64; LD_LIBRARY_PATH naming both. No shell, no package manager. The libraries
# come from the machine that built the binary, so the two always match.
set -euo pipefail
cd "$(dirname "$0")/.."
source build/common.sh

# Where the NVIDIA container runtime mounts libnvidia-ml.so.1: the multiarch directory in
# a Debian-like container (libnvidia-container checks for /etc/debian_version), /usr/lib64
# in any other (this image), the host's own directory with CDI. The runtime's ldcache
# hook (ldconfig in the container) is not run in every mode, and the image's loader
# searches only its own build's directories without a cache: LD_LIBRARY_PATH names both,
# and /etc/ld.so.conf.d does for a runtime that does run ldconfig.
nvidia_dirs=(/usr/lib/x86_64-linux-gnu /usr/lib64)
# What libnvidia-ml.so.1 itself links against (its DT_NEEDED), all part of glibc.
nvml_needs=(libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1)

bin="$out/kestrel-glibc"
if [[ "${1:-}" == "--binary" ]]; then
    [[ -f "${2:-}" ]] || {
        echo "agent-image.sh: --binary needs the path of a built kestrel (got '${2:-}')" >&2
        exit 2
    }
    cp "$2" "$bin"
    # The image ships no symbols, as a release build's.
    strip --strip-all "$bin"
else
    # Dynamically linked: a RUSTFLAGS with crt-static would make an agent that cannot dlopen.
    release_build
    cp "$tdir/release/kestrel" "$bin"
fi

interp="$(readelf -lW "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')"
if [[ -z "$interp" ]]; then
    echo "agent-image.sh: $bin is statically linked (RUSTFLAGS=${RUSTFLAGS:-}); the agent needs a dynamic loader to load NVML" >&2
    exit 1
fi
ldd_out="$(ldd "$bin")"
if grep -q "not found" <<<"$ldd_out"; then
    echo "agent-image.sh: $bin needs libraries this machine lacks:" >&2
    grep "not found" <<<"$ldd_out" >&2
    exit 1
fi
mapfile -t libs < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 }' <<<"$ldd_out")
libc="$(printf '%s\n' "${libs[@]}" | grep '/libc\.so\.6$' || true)"
if [[ -z "$libc" ]]; then
    echo "agent-image.sh: ldd names no libc.so.6 for $bin (a glibc build is needed)" >&2
    exit 1
fi
# glibc installs its compatibility objects beside libc.so.6.
for lib in "${nvml_needs[@]}"; do
    path="$(dirname "$libc")/$lib"
    [[ -f "$path" ]] || {
        echo "agent-image.sh: $path is missing: NVML links against it" >&2
        exit 1
    }
    libs+=("$path")
done
mapfile -t libs < <(printf '%s\n' "${libs[@]}" | sort -u)
"$bin" --version
echo "dynamic binary: $bin ($(stat -c %s "$bin") bytes), loader $interp, libraries: ${libs[*]}"

etc="$(mktemp -d)"
trap 'rm -rf "$etc"' EXIT
mkdir -p "$etc/etc/ld.so.conf.d"
printf 'include /etc/ld.so.conf.d/*.conf\n' >"$etc/etc/ld.so.conf"
{
    echo "# Where the NVIDIA container runtime mounts libnvidia-ml.so.1."
    printf '%s\n' "${nvidia_dirs[@]}"
} >"$etc/etc/ld.so.conf.d/nvidia.conf"
# Both exist in the image, whichever the runtime mounts into.
for dir in "${nvidia_dirs[@]}"; do
    mkdir -p "$etc$dir"
done

host_files=()
for path in "$interp" "${libs[@]}"; do
    host_files+=(--host-file "$path")
done
library_path="$(IFS=:; echo "${nvidia_dirs[*]}")"
pack_image "${IMAGE_NAME:-kestrel-agent}" --binary "$bin" --tree "$etc" "${host_files[@]}" \
    --env "LD_LIBRARY_PATH=$library_path" \
    --description "Kestrel's node agent (kestrel agent): the dynamically linked kestrel that loads NVIDIA's management library"

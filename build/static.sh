#!/usr/bin/env bash
# A statically linked `kestrel` (rustls + ring, no OpenSSL, no libc at run time) and a
# `FROM scratch` container image of it, built with no base image, registry or container
# daemon: only the Rust toolchain, a C compiler (ring's assembly) and python3.
#
#   build/static.sh            binary and image
#   build/static.sh --binary   the binary only
#
# Writes target/image/kestrel (the binary), target/image/kestrel-oci/ (an OCI image
# layout) and target/image/kestrel-VERSION.oci.tar (under $CARGO_TARGET_DIR when set) (the same as one archive, which
# `docker load`, `podman load`, `skopeo copy oci-archive:...` and `kind load image-archive`
# take). The image is named kestrel:VERSION (VERSION from Cargo.toml; IMAGE_NAME overrides
# the name, e.g. registry.example.com/platform/kestrel).
#
# Target: x86_64-unknown-linux-musl where rustup has it (or can add it) and a musl C
# compiler exists (musl-gcc, Debian's musl-tools), else glibc with
# `-C target-feature=+crt-static` (KESTREL_STATIC_TARGET picks one).
set -euo pipefail
cd "$(dirname "$0")/.."
source build/common.sh

binary_only=false
[[ "${1:-}" == "--binary" ]] && binary_only=true

musl=x86_64-unknown-linux-musl
gnu=x86_64-unknown-linux-gnu
target="${KESTREL_STATIC_TARGET:-}"
if [[ -z "$target" ]]; then
    if rustup target list --installed 2>/dev/null | grep -qx "$musl" \
        || rustup target add "$musl" >/dev/null 2>&1; then
        target=$musl
    else
        echo "static.sh: the musl target is not available; glibc with crt-static" >&2
        target=$gnu
    fi
fi

# ring compiles C and assembly: for musl with a musl C compiler (Debian: musl-tools).
if [[ "$target" == "$musl" ]] && ! command -v x86_64-linux-musl-gcc >/dev/null; then
    if command -v musl-gcc >/dev/null; then
        export CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-musl-gcc}"
    elif [[ -z "${CC_x86_64_unknown_linux_musl:-}" ]]; then
        echo "static.sh: no musl C compiler (apt-get install musl-tools); glibc with crt-static" >&2
        target=$gnu
    fi
fi

# crt-static: libc linked in (musl's default; glibc needs the flag).
if [[ "$target" == "$gnu" ]]; then
    export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static"
fi
release_build --target "$target"

cp "$tdir/$target/release/kestrel" "$out/kestrel"

# Static: no program interpreter, no shared libraries.
if readelf -lW "$out/kestrel" | grep -q "Requesting program interpreter" \
    || readelf -dW "$out/kestrel" | grep -q "(NEEDED)"; then
    echo "static.sh: $out/kestrel is dynamically linked" >&2
    readelf -dW "$out/kestrel" | grep NEEDED >&2 || true
    exit 1
fi
"$out/kestrel" --version
echo "static binary: $out/kestrel ($(stat -c %s "$out/kestrel") bytes, $target)"

$binary_only && exit 0

pack_image "${IMAGE_NAME:-kestrel}" --binary "$out/kestrel"

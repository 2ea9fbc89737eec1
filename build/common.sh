# Sourced by build/static.sh and build/agent-image.sh (from the repository root): the
# version and commit that name a release, where its images go, the release build and the
# image packer.

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
commit="${KESTREL_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
# build.rs embeds it for `kestrel --version`.
export KESTREL_GIT_COMMIT="$commit"

tdir="${CARGO_TARGET_DIR:-target}"
out="$tdir/image"
mkdir -p "$out"

# release_build [CARGO ARGS...]: the release `kestrel`, stripped: the images ship no
# symbols (panics still name the message and location).
release_build() {
    CARGO_PROFILE_RELEASE_STRIP=symbols \
        CARGO_PROFILE_RELEASE_DEBUG=false \
        cargo build --release --locked -p kestrel "$@"
}

# pack_image NAME [build/oci-image.py ARGS...]: the image NAME:VERSION as an OCI layout
# and archive in $out.
pack_image() {
    local name="$1"
    shift
    python3 build/oci-image.py --name "$name" --tag "$version" --revision "$commit" \
        --out "$out" "$@"
}

# syntax=docker/dockerfile:1
# Kestrel's image for builders with registry access (docker build / podman build / buildah).
# Without a registry or a daemon, build/static.sh makes the same image from the same static
# binary (see docs/tasks/install.md).
#
#   docker build -t kestrel:0.1.0 --build-arg KESTREL_GIT_COMMIT=$(git rev-parse --short=12 HEAD) .
#
# The final image is `scratch` plus one statically linked binary (musl, rustls + ring: no
# OpenSSL, no libc, no shell) and a passwd naming the non-root user 65532 it runs as. It
# writes nothing to its filesystem, so it runs with readOnlyRootFilesystem; the API server's
# CA comes from the service account mount, so it carries no CA bundle.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# .git is not in the build context: the commit that `kestrel --version` prints comes in here.
ARG KESTREL_GIT_COMMIT=unknown
ENV KESTREL_GIT_COMMIT=${KESTREL_GIT_COMMIT}
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    KESTREL_STATIC_TARGET=x86_64-unknown-linux-musl build/static.sh --binary \
    && cp target/image/kestrel /kestrel \
    && printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >/passwd \
    && printf 'root:x:0:\nnonroot:x:65532:\n' >/group

FROM scratch
ARG KESTREL_GIT_COMMIT=unknown
LABEL org.opencontainers.image.title="kestrel" \
      org.opencontainers.image.description="Kestrel, a GPU scheduler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${KESTREL_GIT_COMMIT}"
COPY --from=build /passwd /etc/passwd
COPY --from=build /group /etc/group
COPY --from=build /kestrel /kestrel
USER 65532:65532
ENTRYPOINT ["/kestrel"]

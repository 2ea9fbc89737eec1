#!/usr/bin/env python3
"""Packs a static binary into a `FROM scratch` container image, with no base image, no
registry and no container daemon: the Python standard library writes the layer tar, the
image config, the manifest and the index.

    build/oci-image.py --binary target/image/kestrel --name kestrel --tag 0.1.0 \
        --revision abc123 --out target/image

writes
    OUT/kestrel-oci/                  an OCI image layout (skopeo copy oci:DIR:TAG ...)
    OUT/kestrel-TAG.oci.tar           the same layout as one tar, which also carries
                                      Docker's manifest.json, so that `docker load`,
                                      `podman load`, `skopeo copy oci-archive:...` and
                                      `ctr images import` (kind load image-archive) take it

The image holds /kestrel (mode 0755), /etc/passwd and /etc/group naming the user
nonroot (65532), and nothing else: no shell, no libc, no CA bundle (in a cluster the API
server's CA comes from the service account mount). It runs as 65532:65532 with entrypoint
/kestrel. Every timestamp is SOURCE_DATE_EPOCH (default 0) and entries are sorted, so the
same binary always gives the same digests.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import time

USER = "65532:65532"
PASSWD = b"root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n"
GROUP = b"root:x:0:\nnonroot:x:65532:\n"

MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"


def tar_entry(tar, name, mtime, data=None, mode=0o644, directory=False):
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
    else:
        info.mode = mode
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def layer_tar(binary, mtime):
    with open(binary, "rb") as f:
        exe = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar_entry(tar, "etc", mtime, directory=True)
        tar_entry(tar, "etc/group", mtime, GROUP)
        tar_entry(tar, "etc/passwd", mtime, PASSWD)
        tar_entry(tar, "kestrel", mtime, exe, mode=0o755)
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def build(args):
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    plain = layer_tar(args.binary, mtime)
    # gzip with no name and a fixed mtime: the same tar always compresses the same.
    layer = gzip.compress(plain, compresslevel=9, mtime=0)
    labels = {
        "org.opencontainers.image.title": args.name,
        "org.opencontainers.image.version": args.tag,
        "org.opencontainers.image.revision": args.revision,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.description": "Kestrel, a GPU scheduler for Kubernetes",
    }
    config = canonical(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": created,
            "config": {
                "User": USER,
                "Entrypoint": ["/kestrel"],
                "Env": ["PATH=/"],
                "WorkingDir": "/",
                "Labels": labels,
            },
            "rootfs": {"type": "layers", "diff_ids": [digest(plain)]},
            "history": [{"created": created, "created_by": "build/oci-image.py: /kestrel"}],
        }
    )
    manifest = canonical(
        {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": digest(config), "size": len(config)},
            "layers": [{"mediaType": MT_LAYER, "digest": digest(layer), "size": len(layer)}],
            "annotations": {k: v for k, v in labels.items() if "description" not in k},
        }
    )
    ref = f"{args.name}:{args.tag}"
    full_ref = ref if "/" in args.name else f"docker.io/library/{ref}"
    index = canonical(
        {
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [
                {
                    "mediaType": MT_MANIFEST,
                    "digest": digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "org.opencontainers.image.ref.name": args.tag,
                        "io.containerd.image.name": full_ref,
                    },
                }
            ],
        }
    )
    blob = lambda data: "blobs/sha256/" + digest(data).split(":")[1]
    # Docker's `docker load` reads manifest.json; OCI tools read oci-layout and index.json.
    docker_manifest = canonical(
        [{"Config": blob(config), "RepoTags": [ref], "Layers": [blob(layer)]}]
    )
    files = {
        "oci-layout": canonical({"imageLayoutVersion": "1.0.0"}),
        "index.json": index,
        "manifest.json": docker_manifest,
        blob(layer): layer,
        blob(config): config,
        blob(manifest): manifest,
    }

    layout = os.path.join(args.out, f"{args.name.rsplit('/', 1)[-1]}-oci")
    shutil.rmtree(layout, ignore_errors=True)
    for path, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(layout, path)), exist_ok=True)
        with open(os.path.join(layout, path), "wb") as f:
            f.write(data)

    archive = os.path.join(args.out, f"{args.name.rsplit('/', 1)[-1]}-{args.tag}.oci.tar")
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ["blobs", "blobs/sha256"]:
            tar_entry(tar, d, mtime, directory=True)
        for path in sorted(files):
            tar_entry(tar, path, mtime, files[path])

    print(f"image {ref}: manifest {digest(manifest)}")
    print(f"  layer {len(layer)} bytes gzipped ({len(plain)} bytes), config {digest(config)}")
    print(f"  OCI layout  {layout}")
    print(f"  archive     {archive} ({os.path.getsize(archive)} bytes)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True, help="the static kestrel binary")
    p.add_argument("--name", default="kestrel", help="image name (repository)")
    p.add_argument("--tag", required=True, help="image tag (the version)")
    p.add_argument("--revision", default="unknown", help="git commit, for the labels")
    p.add_argument("--out", required=True, help="output directory")
    build(p.parse_args())


if __name__ == "__main__":
    main()

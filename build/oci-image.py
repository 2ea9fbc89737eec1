#!/usr/bin/env python3
"""Packs kestrel into a container image with no base image, no registry and no container
daemon: the Python standard library writes the layer tar, the image config, the manifest
and the index.

    build/oci-image.py --binary target/image/kestrel --name kestrel --tag 0.1.0 \
        --revision abc123 --out target/image

writes
    OUT/kestrel-oci/                  an OCI image layout (skopeo copy oci:DIR:TAG ...)
    OUT/kestrel-TAG.oci.tar           the same layout as one tar, which also carries
                                      Docker's manifest.json, so that `docker load`,
                                      `podman load`, `skopeo copy oci-archive:...` and
                                      `ctr images import` (kind load image-archive) take it

(named after the last part of --name). With --binary alone (build/static.sh) the image is
`FROM scratch`: /kestrel (mode 0755), /etc/passwd and /etc/group naming the user nonroot
(65532), and nothing else: no shell, no libc, no CA bundle (in a cluster the API server's
CA comes from the service account mount). More goes in with
    --tree DIR        DIR's files, directories and symlinks, at the same paths under /
    --host-file PATH  the build machine's file PATH at the same path (build/agent-image.sh:
                      the dynamic loader and the shared libraries); a directory on the way
                      that is a symlink here (merged /usr: /lib -> usr/lib) is the same
                      symlink in the image, so PATH resolves there as it does here
    --env KEY=VALUE   in the image's environment, after PATH=/
It runs as 65532:65532 with entrypoint /kestrel. Every timestamp is SOURCE_DATE_EPOCH
(default 0), owners are root and entries are sorted, so the same inputs always give the
same digests.
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


def tar_entry(tar, name, mtime, data=None, mode=0o644, directory=False, link=None):
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
    elif link is not None:
        info.type = tarfile.SYMTYPE
        info.mode = 0o777
        info.linkname = link
        tar.addfile(info)
    else:
        info.mode = mode
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


# A layer entry: ("dir",), ("file", data, mode) or ("link", target).
DIR = ("dir",)


def file_entry(path):
    with open(path, "rb") as f:
        data = f.read()
    # Executable or not; the rest of the host's mode (owner, group bits) is not carried.
    return ("file", data, 0o755 if os.stat(path).st_mode & 0o111 else 0o644)


def add(entries, name, entry):
    """Puts ENTRY at NAME (relative, no leading /), its parents as directories; the same
    entry twice is one, two different ones at a path are an error."""
    parts = name.split("/")
    for i in range(1, len(parts)):
        parent = "/".join(parts[:i])
        if entries.setdefault(parent, DIR) != DIR:
            raise SystemExit(f"oci-image.py: /{parent} is a {entries[parent][0]}, not a directory (for /{name})")
    if entries.setdefault(name, entry) != entry:
        raise SystemExit(f"oci-image.py: /{name} is given twice, differently")


def add_tree(entries, root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        for name in dirnames + sorted(filenames):
            path = os.path.join(dirpath, name)
            image_path = os.path.normpath(os.path.join(rel, name))
            if os.path.islink(path):
                add(entries, image_path, ("link", os.readlink(path)))
            elif os.path.isdir(path):
                add(entries, image_path, DIR)
            elif os.path.isfile(path):
                add(entries, image_path, file_entry(path))
            else:
                raise SystemExit(f"oci-image.py: {path} is neither a file, a directory nor a symlink")


def add_host_file(entries, path, depth=0):
    """The build machine's PATH at the same path; symlinked directories on the way stay
    symlinks (made relative, so they resolve inside the image), the file's content is
    read through any symlink."""
    if not os.path.isabs(path):
        raise SystemExit(f"oci-image.py: --host-file {path}: not an absolute path")
    if depth > 40:
        raise SystemExit(f"oci-image.py: --host-file {path}: too many levels of symlinks")
    parts = os.path.normpath(path).strip("/").split("/")
    here = "/"
    for i, part in enumerate(parts[:-1]):
        step = os.path.join(here, part)
        if os.path.islink(step):
            target = os.path.normpath(os.path.join(here, os.readlink(step)))
            add(entries, step[1:], ("link", os.path.relpath(target, here)))
            add_host_file(entries, os.path.join(target, *parts[i + 1 :]), depth + 1)
            return
        here = step
    if not os.path.isfile(path):
        raise SystemExit(f"oci-image.py: --host-file {path}: no such file")
    add(entries, "/".join(parts), file_entry(path))


def layer_tar(args, mtime):
    entries = {}
    add(entries, "etc", DIR)
    add(entries, "etc/group", ("file", GROUP, 0o644))
    add(entries, "etc/passwd", ("file", PASSWD, 0o644))
    with open(args.binary, "rb") as f:
        add(entries, "kestrel", ("file", f.read(), 0o755))
    if args.tree:
        add_tree(entries, args.tree)
    for path in args.host_file:
        add_host_file(entries, path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            entry = entries[name]
            if entry == DIR:
                tar_entry(tar, name, mtime, directory=True)
            elif entry[0] == "link":
                tar_entry(tar, name, mtime, link=entry[1])
            else:
                tar_entry(tar, name, mtime, entry[1], mode=entry[2])
    return buf.getvalue(), len(entries)


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def build(args):
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    plain, count = layer_tar(args, mtime)
    # gzip with no name and a fixed mtime: the same tar always compresses the same.
    layer = gzip.compress(plain, compresslevel=9, mtime=0)
    labels = {
        "org.opencontainers.image.title": args.name,
        "org.opencontainers.image.version": args.tag,
        "org.opencontainers.image.revision": args.revision,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.description": args.description,
    }
    # Beyond the four entries of the scratch image (/etc, its passwd and group, /kestrel).
    extra = count - 4
    created_by = "build/oci-image.py: /kestrel" + (f" and {extra} more entries" if extra else "")
    config = canonical(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": created,
            "config": {
                "User": USER,
                "Entrypoint": ["/kestrel"],
                "Env": ["PATH=/"] + args.env,
                "WorkingDir": "/",
                "Labels": labels,
            },
            "rootfs": {"type": "layers", "diff_ids": [digest(plain)]},
            "history": [{"created": created, "created_by": created_by}],
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
    p.add_argument("--binary", required=True, help="the kestrel binary, /kestrel in the image")
    p.add_argument("--tree", help="a directory whose contents go under / as they are")
    p.add_argument("--host-file", action="append", default=[], metavar="PATH",
                   help="a file of this machine, at the same path (repeatable)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="an environment variable of the image (repeatable)")
    p.add_argument("--description", default="Kestrel, a GPU scheduler for Kubernetes",
                   help="the image's description label")
    p.add_argument("--name", default="kestrel", help="image name (repository)")
    p.add_argument("--tag", required=True, help="image tag (the version)")
    p.add_argument("--revision", default="unknown", help="git commit, for the labels")
    p.add_argument("--out", required=True, help="output directory")
    args = p.parse_args()
    for env in args.env:
        if "=" not in env or env.startswith("PATH="):
            p.error(f"--env {env}: want KEY=VALUE, and not PATH (the image's PATH is /)")
    build(args)


if __name__ == "__main__":
    main()

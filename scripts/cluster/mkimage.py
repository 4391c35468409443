#!/usr/bin/env python3
"""Write a single-layer OCI image archive (an OCI layout in a tar) without a registry.

    mkimage.py --name kae-e2e.local/busybox:1 --out busybox.tar \
        --file /bin/busybox=bin/busybox --link bin/sh=busybox ... --cmd /bin/sh

`ctr -n k8s.io images import` reads the archive; the image is named by the
`io.containerd.image.name` annotation. Everything is written with fixed times and owners, so the
same inputs give the same digests.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import tarfile

EPOCH = 0


def _dir(tar: tarfile.TarFile, path: str, seen: set[str]) -> None:
    parts = path.split("/")
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d and d not in seen:
            seen.add(d)
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            info.mtime = EPOCH
            tar.addfile(info)


def _layer(files: list[tuple[str, str]], links: list[tuple[str, str]], dirs: list[str]) -> bytes:
    raw = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            _dir(tar, d, seen)
        for src, dest in files:
            _dir(tar, dest.rpartition("/")[0], seen)
            with open(src, "rb") as fh:
                data = fh.read()
            info = tarfile.TarInfo(dest)
            info.size = len(data)
            info.mode = 0o755
            info.mtime = EPOCH
            tar.addfile(info, io.BytesIO(data))
        for dest, target in links:
            _dir(tar, dest.rpartition("/")[0], seen)
            info = tarfile.TarInfo(dest)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            info.mode = 0o777
            info.mtime = EPOCH
            tar.addfile(info)
    return raw.getvalue()


def _blob(out: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    info.mode = 0o644
    info.mtime = EPOCH
    out.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="full image name, e.g. kae-e2e.local/x:1")
    ap.add_argument("--out", required=True)
    ap.add_argument("--file", action="append", default=[], help="HOSTPATH=PATH_IN_IMAGE")
    ap.add_argument("--link", action="append", default=[], help="PATH_IN_IMAGE=TARGET")
    ap.add_argument("--dir", action="append", default=[], help="an empty directory")
    ap.add_argument("--cmd", action="append", default=[], help="one argument of the command")
    args = ap.parse_args()

    files = [tuple(f.split("=", 1)) for f in args.file]
    links = [tuple(link.split("=", 1)) for link in args.link]
    tar_bytes = _layer(
        [(s, d.lstrip("/")) for s, d in files],
        [(d.lstrip("/"), t) for d, t in links],
        [d.strip("/") for d in args.dir],
    )
    layer = gzip.compress(tar_bytes, mtime=EPOCH)
    diff_id = "sha256:" + hashlib.sha256(tar_bytes).hexdigest()

    with tarfile.open(args.out, mode="w") as out:
        config = _json(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Cmd": args.cmd, "Env": ["PATH=/bin"]},
                "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            }
        )
        config_digest = _blob(out, config)
        layer_digest = _blob(out, layer)
        manifest = _json(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest,
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": layer_digest,
                        "size": len(layer),
                    }
                ],
            }
        )
        manifest_digest = _blob(out, manifest)
        index = _json(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "platform": {"architecture": "amd64", "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": args.name,
                            "org.opencontainers.image.ref.name": args.name.rpartition(":")[2],
                        },
                    }
                ],
            }
        )
        for name, data in (
            ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
            ("index.json", index),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = EPOCH
            out.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()

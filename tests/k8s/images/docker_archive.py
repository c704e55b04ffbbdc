#!/usr/bin/env python3
"""Writes a docker-archive image tarball (the `docker save` layout that
`ctr images import` and `podman load` read) from local files only.

    docker_archive.py OUT.tar --tag REF [--tag REF...] [--layer-tar T.tar]...
        [--file SRC:DEST[:MODE]]... [--symlink TARGET:DEST]... [--dir DEST[:MODE]]...
        [--entrypoint JSON] [--cmd JSON] [--user U] [--env K=V]... [--workdir D]

Each --layer-tar is one layer as it is (an uncompressed tar, e.g. a root
filesystem made by mmdebstrap); the --file/--symlink/--dir entries form one
more layer on top, written deterministically (mtime 0, root-owned), so the same
inputs give the same bytes and the same image ID. linux/amd64 (the host's
architecture) is the platform, so the CRI's platform match finds it.
Scripted by scripts/k8s-images.sh (docs/cluster.md, "Images").
"""
import argparse
import hashlib
import io
import json
import os
import platform
import sys
import tarfile
import tempfile

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def add_parents(tf, seen, path):
    parts = path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d in seen:
            continue
        seen.add(d)
        ti = tarfile.TarInfo(d)
        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 0
        tf.addfile(ti)


def extra_layer(args, out):
    seen = set()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for spec in args.dir:
            d, _, mode = spec.partition(":")
            d = d.strip("/")
            add_parents(tf, seen, d)
            seen.add(d)
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, int(mode or "755", 8), 0
            tf.addfile(ti)
        for spec in args.file:
            parts = spec.split(":")
            if len(parts) not in (2, 3):
                sys.exit(f"docker_archive: --file {spec}: want SRC:DEST[:MODE]")
            src, dest = parts[0], parts[1].strip("/")
            mode = int(parts[2], 8) if len(parts) == 3 else 0o755
            add_parents(tf, seen, dest)
            ti = tarfile.TarInfo(dest)
            ti.size, ti.mode, ti.mtime = os.path.getsize(src), mode, 0
            with open(src, "rb") as f:
                tf.addfile(ti, f)
        for spec in args.symlink:
            target, dest = spec.split(":", 1)
            dest = dest.strip("/")
            add_parents(tf, seen, dest)
            ti = tarfile.TarInfo(dest)
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, target, 0o777, 0
            tf.addfile(ti)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--tag", action="append", required=True)
    p.add_argument("--layer-tar", action="append", default=[])
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--symlink", action="append", default=[])
    p.add_argument("--dir", action="append", default=[])
    p.add_argument("--entrypoint")
    p.add_argument("--cmd")
    p.add_argument("--user")
    p.add_argument("--workdir")
    p.add_argument("--env", action="append",
                   default=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    args = p.parse_args()
    for t in args.tag:
        if ":" not in t.rsplit("/", 1)[-1]:
            sys.exit(f"docker_archive: --tag {t}: no :version")

    outdir = os.path.dirname(os.path.abspath(args.out))
    with tempfile.TemporaryDirectory(dir=outdir, prefix=".docker-archive-") as tmp:
        layers = list(args.layer_tar)
        if args.file or args.symlink or args.dir:
            extra = os.path.join(tmp, "extra.tar")
            extra_layer(args, extra)
            layers.append(extra)
        diff_ids = [sha256_file(l) for l in layers]
        cfg = {}
        if args.entrypoint:
            cfg["Entrypoint"] = json.loads(args.entrypoint)
        if args.cmd:
            cfg["Cmd"] = json.loads(args.cmd)
        if args.user:
            cfg["User"] = args.user
        if args.workdir:
            cfg["WorkingDir"] = args.workdir
        cfg["Env"] = args.env
        config = {
            "architecture": ARCH,
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + d for d in diff_ids]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "weft scripts/k8s-images.sh"}
                        for _ in layers],
        }
        config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
        config_id = hashlib.sha256(config_bytes).hexdigest()
        manifest = [{"Config": config_id + ".json", "RepoTags": args.tag,
                     "Layers": [d + "/layer.tar" for d in diff_ids]}]
        partial = args.out + ".partial"
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tf:
            def add_bytes(name, data):
                ti = tarfile.TarInfo(name)
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
                tf.addfile(ti, io.BytesIO(data))
            for d, l in zip(diff_ids, layers):
                ti = tarfile.TarInfo(d)
                ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 0
                tf.addfile(ti)
                ti = tarfile.TarInfo(d + "/layer.tar")
                ti.size, ti.mode, ti.mtime = os.path.getsize(l), 0o644, 0
                with open(l, "rb") as f:
                    tf.addfile(ti, f)
            add_bytes(config_id + ".json", config_bytes)
            add_bytes("manifest.json", json.dumps(manifest, separators=(",", ":")).encode())
        os.replace(partial, args.out)
    print(f"{args.out}: {' '.join(args.tag)} (image id sha256:{config_id[:12]}, {len(layers)} layers)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The SBOM of meshhub's image, as CycloneDX 1.5 JSON on stdout.

Called by deploy/image/build.sh. Lists what the image holds:

* the three binaries (SHA-256 of each);
* every crate linked into them: `cargo tree -e normal` of the binaries'
  packages for the image's target (build scripts' and dev dependencies are
  not in the binaries and are left out; proc macros run at build time only
  and are listed with scope "excluded"), with version, license, purl and the
  crates.io checksum from Cargo.lock;
* Rust's standard library and the musl libc it links statically (the
  toolchain's version);
* the CA bundle and the Debian package it comes from.

Deterministic for one commit: the time is SOURCE_DATE_EPOCH, the serial
number is derived from the image's revision.
"""

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def crates(packages: list[str], target: str) -> list[dict]:
    """Every crate in the binaries' normal dependency tree, once."""
    lock = tomllib.loads(Path("Cargo.lock").read_text())
    checksums = {
        (p["name"], p["version"]): p.get("checksum") for p in lock["package"]
    }
    args = ["cargo", "tree", "--locked", "-e", "normal", "--target", target]
    for p in packages:
        args += ["-p", p]
    # One line per crate: name, version, license, whether it is a proc macro.
    args += ["--prefix", "none", "--format", "{p}\t{l}\t{f}"]
    tree = run(*args)
    meta = json.loads(
        run("cargo", "metadata", "--locked", "--format-version", "1",
            "--filter-platform", target)
    )
    proc_macros = {
        (p["name"], p["version"])
        for p in meta["packages"]
        if any("proc-macro" in t["kind"] for t in p["targets"])
    }
    workspace = {
        (p["name"], p["version"])
        for p in meta["packages"]
        if p["id"] in set(meta["workspace_members"])
    }
    seen = {}
    for line in tree.splitlines():
        if not line.strip() or line.startswith("["):
            continue
        pkg, _, rest = line.partition("\t")
        license_, _, _features = rest.partition("\t")
        # "name vX.Y.Z (source)" with an optional " (*)" for repeats.
        parts = pkg.replace(" (*)", "").split()
        name, version = parts[0], parts[1].lstrip("v")
        if (name, version) in seen:
            continue
        purl = f"pkg:cargo/{name}@{version}"
        c = {
            "type": "library",
            "bom-ref": purl,
            "name": name,
            "version": version,
            "purl": purl,
        }
        if (name, version) in workspace:
            c["type"] = "application" if name in packages else "library"
            c["description"] = "meshhub workspace crate"
            del c["purl"]
            c["bom-ref"] = f"meshhub-workspace:{name}@{version}"
        if license_:
            # Cargo still accepts the legacy "MIT/Apache-2.0"; SPDX says OR.
            c["licenses"] = [{"expression": license_.replace("/", " OR ")}]
        checksum = checksums.get((name, version))
        if checksum:
            c["hashes"] = [{"alg": "SHA-256", "content": checksum}]
        if (name, version) in proc_macros:
            c["scope"] = "excluded"
        seen[(name, version)] = c
    return sorted(seen.values(), key=lambda c: (c["name"], c["version"]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--revision", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--ca-bundle", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("-p", dest="packages", action="append", default=[])
    a = ap.parse_args()

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    when = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    components = []
    for b in sorted(Path(a.bin_dir).iterdir()):
        components.append({
            "type": "application",
            "bom-ref": f"file:/usr/local/bin/{b.name}",
            "name": b.name,
            "version": a.version,
            "description": f"/usr/local/bin/{b.name}, static ({a.target})",
            "hashes": [{"alg": "SHA-256", "content": sha256(b)}],
        })
    rustc = run("rustc", "-V").split()[1]
    components.append({
        "type": "library",
        "bom-ref": f"rust-std:{a.target}@{rustc}",
        "name": "rust-std",
        "version": rustc,
        "description": f"Rust's standard library and the musl libc it ships for {a.target}, linked statically",
    })
    ca_version = "unknown"
    try:
        ca_version = run("dpkg-query", "-W", "-f", "${Version}", "ca-certificates")
    except (OSError, subprocess.CalledProcessError):
        pass
    components.append({
        "type": "data",
        "bom-ref": f"pkg:deb/debian/ca-certificates@{ca_version}?arch=all",
        "name": "ca-certificates",
        "version": ca_version,
        "purl": f"pkg:deb/debian/ca-certificates@{ca_version}?arch=all",
        "description": "/etc/ssl/certs/ca-certificates.crt (Mozilla's CA bundle as packaged by Debian)",
        "hashes": [{"alg": "SHA-256", "content": sha256(Path(a.ca_bundle))}],
    })
    components += crates(a.packages, a.target)

    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'meshhub-image:{a.revision}')}",
        "version": 1,
        "metadata": {
            "timestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "deploy/image/sbom.py"}]},
            "component": {
                "type": "container",
                "bom-ref": a.image,
                "name": a.image,
                "version": a.version,
                "properties": [{"name": "org.opencontainers.image.revision", "value": a.revision}],
            },
        },
        "components": components,
    }
    json.dump(bom, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

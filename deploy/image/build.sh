#!/usr/bin/env bash
# Builds meshhub's image (deploy/image/Containerfile) exactly as CI does:
#
#   1. the three binaries (meshhub, meshhub-sink-agent, meshhubctl), in
#      release mode, once, static (Rust's x86_64-unknown-linux-musl target),
#      into their own target directory;
#   2. a build context holding them and a minimal root filesystem: the
#      passwd/group entries of uid 10001 (deploy/image/rootfs), the CA
#      bundle of this machine's Debian `ca-certificates` package and a /tmp;
#   3. the image from that context on `FROM scratch`, with buildah (no
#      daemon; `--isolation chroot`) or docker;
#   4. next to it: a docker-archive of the image (what `podman load`,
#      `docker load` and `kind load image-archive` read) and its SBOM
#      (CycloneDX JSON: every crate linked into the binaries and the CA
#      bundle's package), then prints the image's size and checks it against
#      the budget.
#
# Usage: deploy/image/build.sh
# Environment (all optional):
#   MESHHUB_IMAGE             reference to tag            [meshhub:dev]
#   MESHHUB_IMAGE_TOOL        buildah or docker           [buildah if found]
#   MESHHUB_IMAGE_OUT         output directory            [target/image]
#   MESHHUB_IMAGE_BASE        --build-arg BASE (another base than scratch,
#                             e.g. one with a shell for debugging; the
#                             default is what CI builds and tests)
#   MESHHUB_IMAGE_BUDGET_MIB  size budget, fails above it [96]
#   MESHHUB_IMAGE_STRIP       1: strip the servers' symbols too (a smaller
#                             image whose /debug/pprof profiles show
#                             addresses, not function names) [0]
#   CARGO_BUILD_JOBS          cargo's parallelism
#
# Needs: rustup (adds the musl target when missing) or a toolchain that has
# it, a C compiler for musl (Debian's `musl-tools`: ring and mimalloc compile
# C), /etc/ssl/certs/ca-certificates.crt, python3 (the SBOM), and buildah or
# docker.
set -euo pipefail
cd "$(dirname "$0")/../.."

image="${MESHHUB_IMAGE:-meshhub:dev}"
out="${MESHHUB_IMAGE_OUT:-target/image}"
budget_mib="${MESHHUB_IMAGE_BUDGET_MIB:-96}"
target=x86_64-unknown-linux-musl
tool="${MESHHUB_IMAGE_TOOL:-}"
if [ -z "$tool" ]; then
  if command -v buildah >/dev/null 2>&1; then tool=buildah; else tool=docker; fi
fi
log() { echo "build.sh: $*" >&2; }
started=$SECONDS

if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$target"; then
  log "adding the Rust target $target"
  rustup target add "$target" >&2
fi
# ring and mimalloc compile C for musl: cc-rs looks for x86_64-linux-musl-gcc,
# then musl-gcc, unless CC_x86_64_unknown_linux_musl (or CC_x86_64-unknown-linux-musl, TARGET_CC)
# names a compiler.
if [ -z "${CC_x86_64_unknown_linux_musl:-}" ] && [ -z "$(printenv CC_x86_64-unknown-linux-musl || true)" ] \
  && [ -z "${TARGET_CC:-}" ] && ! command -v x86_64-linux-musl-gcc >/dev/null 2>&1 \
  && ! command -v musl-gcc >/dev/null 2>&1; then
  log "no C compiler for musl (musl-gcc): install Debian's musl-tools, or set CC_x86_64_unknown_linux_musl"
  exit 1
fi
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca_bundle" ] || { log "$ca_bundle is missing: install the ca-certificates package"; exit 1; }

# 1. The binaries, one package each.
packages=(-p meshhub -p meshhub-sink-agent -p meshhubctl)
cargo_dir="$out/cargo"
log "cargo build --release --target $target ${packages[*]} (into $cargo_dir)"
strip_env=()
if [ "${MESHHUB_IMAGE_STRIP:-0}" = 1 ]; then strip_env=(CARGO_PROFILE_RELEASE_STRIP=symbols); fi
env "${strip_env[@]}" CARGO_TARGET_DIR="$cargo_dir" cargo build --release --locked --target "$target" --bins "${packages[@]}"
cargo_secs=$((SECONDS - started))

# 2. The build context.
context="$out/context"
rm -rf "$context"
mkdir -p "$context/bin" "$context/rootfs/etc/ssl/certs" "$context/rootfs/tmp"
cp deploy/image/rootfs/etc/passwd deploy/image/rootfs/etc/group "$context/rootfs/etc/"
cp "$ca_bundle" "$context/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 1777 "$context/rootfs/tmp"
for b in meshhub meshhub-sink-agent meshhubctl; do
  bin="$cargo_dir/$target/release/$b"
  [ -x "$bin" ] || { log "$bin was not built"; exit 1; }
  # `FROM scratch` has no dynamic loader: every binary must be static.
  if command -v readelf >/dev/null 2>&1 && readelf -d "$bin" | grep -q NEEDED; then
    log "$bin is dynamically linked"; exit 1
  fi
  cp "$bin" "$context/bin/$b"
done

# 3. The image. Its labels say what it was built from; its creation time is
# the commit's, so the same commit gives the same image metadata.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
source_url="$(sed -n 's/^repository = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$revision" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
  revision="$revision-dirty"
fi
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
args=(-f deploy/image/Containerfile -t "$image"
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "SOURCE=$source_url")
if [ -n "${MESHHUB_IMAGE_BASE:-}" ]; then args+=(--build-arg "BASE=$MESHHUB_IMAGE_BASE"); fi
archive="$out/meshhub-image.tar"
rm -f "$archive"
log "$tool: building $image"
case "$tool" in
  buildah)
    # The image this tag named before: left untagged by the rebuild, it is
    # removed (each build would otherwise leave ~85 MB behind in the
    # machine's container storage; a CI run once ran out of disk).
    previous="$(buildah images --quiet --noheading "$image" 2>/dev/null | head -n 1 || true)"
    buildah bud --quiet --isolation chroot --timestamp "$SOURCE_DATE_EPOCH" "${args[@]}" "$context" >/dev/null
    buildah push --quiet "$image" "docker-archive:$archive:$image"
    current="$(buildah images --quiet --noheading "$image" 2>/dev/null | head -n 1 || true)"
    if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
      buildah rmi "$previous" >/dev/null 2>&1 || true # still used by a container or another tag: kept
    fi ;;
  docker)
    docker build --quiet "${args[@]}" "$context" >/dev/null
    docker save -o "$archive" "$image" ;;
  *) log "MESHHUB_IMAGE_TOOL must be buildah or docker, not $tool"; exit 1 ;;
esac

# 4. The SBOM and the size.
sbom="$out/meshhub-image.cdx.json"
python3 deploy/image/sbom.py --image "$image" --version "$version" --revision "$revision" \
  --target "$target" --ca-bundle "$ca_bundle" --bin-dir "$context/bin" "${packages[@]}" >"$sbom"
size=$(stat -c %s "$archive")
size_mib=$(( (size + 1048575) / 1048576 ))
{
  echo "image:    $image ($version, $revision)"
  echo "archive:  $archive"
  echo "sbom:     $sbom ($(grep -c '"purl"' "$sbom") components)"
  for b in meshhub meshhub-sink-agent meshhubctl; do
    printf 'binary:   %-20s %6d KiB\n' "$b" $(( $(stat -c %s "$context/bin/$b") / 1024 ))
  done
  echo "size:     $size bytes ($size_mib MiB uncompressed; budget $budget_mib MiB)"
  echo "time:     $((SECONDS - started)) s (cargo $cargo_secs s)"
} | tee "$out/meshhub-image.txt"
if [ "$size_mib" -gt "$budget_mib" ]; then
  log "the image is over its budget of $budget_mib MiB"
  exit 1
fi

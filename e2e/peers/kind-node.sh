#!/usr/bin/env bash
# Builds (or reuses) a kind node image from what the package registries
# serve, for machines where no container registry is reachable (kind's own
# node images cannot be pulled there):
#   - the node's root filesystem: Debian packages (systemd, containerd, runc,
#     iptables, the CNI plugins, ...) installed by mmdebstrap, plus kind's
#     own base files (entrypoint, systemd units, containerd configuration)
#     from the sigs.k8s.io/kind Go module;
#   - kubelet, kubeadm, kubectl and the control plane: k8s.io/kubernetes
#     built by e2e/peers/kube.sh (one `go build`, static);
#   - the images kubeadm runs, preloaded in the node's containerd as kind's
#     own node images have them (registry.k8s.io/kube-apiserver:<version>,
#     ..., etcd, coredns, pause), built with buildah `FROM scratch`: etcd
#     from go.etcd.io/etcd, CoreDNS from github.com/coredns/coredns, pause
#     compiled (static) from the C source in the Kubernetes module, and
#     kind's storage provisioner (github.com/rancher/local-path-provisioner,
#     its helper a busybox from Debian) with kind's manifest for it.
#
# Usage: e2e/peers/kind-node.sh         build (or reuse) and print the tag
#        MESHHUB_K8S_VERSION=v1.35.4    Kubernetes release (kube.sh's)
#        MESHHUB_KIND_VERSION=v0.33.0   kind release (kind.sh's)
#
# The image is podman's localhost/meshhub/kind-node:<k8s version>-<hash of
# this script, kube.sh, kind.sh and the kind version>: a change to any builds
# a new one (older ones are removed). Binaries and the Debian root
# filesystem are cached in
#   ${MESHHUB_CACHE:-~/.cache/meshhub}/{k8s-<version>,kind-node-<version>,...}
# Nothing built here is ever committed.
#
# Cost, measured on 2 cores shared with other builds (load 3-10): the
# seven Kubernetes commands 8 min with a warm module cache (over 14 min
# from empty caches under load 8); CoreDNS 2.7 min, local-path-provisioner
# 3.2 min, etcd 0.7 min, kind 1.5 min (empty build cache); mmdebstrap 1.7-2.7
# min, beside the Go builds; the assembly (images, node files, import)
# 1-1.7 min. The image is about 1 GB. Reused: 0.1 s.
#
# Limits of this image: no kindnetd (not served by any registry here), so
# clusters set `disableDefaultCNI: true` (deploy/kind/cluster-meshhub-node.yaml)
# and use the bridge CNI configuration written here (one node per cluster);
# Debian bookworm's containerd 1.6 and runc 1.1 (kind's are 2.x and 1.4);
# the storage provisioner is an older release than kind's (see below).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
k8s_version="${MESHHUB_K8S_VERSION:-v1.35.4}"
kind_version="${MESHHUB_KIND_VERSION:-v0.33.0}"
# What kubeadm $k8s_version deploys (`kubeadm config images list`).
etcd_version=v3.6.6
etcd_tag=3.6.6-0
coredns_version=v1.13.1
pause_version=3.10.1
# kind's storage (rancher.io/local-path, kind's default StorageClass): kind
# builds v0.0.34, which the module proxy does not serve; v0.0.30 takes the
# same flags and configuration.
local_path_version=v0.0.30
suite=bookworm
packages=(
  systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod
  libseccomp2 pigz bash ca-certificates curl jq procps mawk
  containerd runc containernetworking-plugins busybox-static
)
cache="${MESHHUB_CACHE:-$HOME/.cache/meshhub}"
root="$cache/kind-node-$k8s_version"
hash="$( (cat "$0" "$here/kube.sh" "$here/kind.sh"; echo "$kind_version") | sha256sum | cut -c1-12)"
tag="localhost/meshhub/kind-node:$k8s_version-$hash"

log() { echo "kind-node.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

if podman image exists "$tag" 2>/dev/null; then
  echo "$tag"
  exit 0
fi
for tool in go podman buildah mmdebstrap gcc jq python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required (apt-get install $tool)"
done
[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap, buildah and containerd work on the root filesystem)"

# Background work (mmdebstrap, the containerd that imports the images)
# and the build directory end with the script, however it ends.
rootfs_pid="" ctrd_pid="" work=""
cleanup() {
  local pid
  for pid in $rootfs_pid $ctrd_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  [ -z "$work" ] || rm -rf "$work"
}
trap cleanup EXIT

start=$SECONDS
timings=()
stage() { # name start-seconds
  timings+=("$1 $((SECONDS - $2)) s")
  log "$1 done in $((SECONDS - $2)) s"
}

# --- the node's Debian root filesystem (in the background: mmdebstrap waits
# on the network and disk while the Go builds below use the CPU) ----------
rootfs_tar="$root/rootfs-$suite-$(echo "${packages[*]}" | sha256sum | cut -c1-12).tar"
rootfs() {
  [ -f "$rootfs_tar" ] && return
  local t=$SECONDS sources=/etc/apt/sources.list.d/debian.sources
  mkdir -p "$root"
  # The machine's own apt sources (the Debian mirror it reaches).
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  log "mmdebstrap $suite: ${packages[*]}"
  mmdebstrap --quiet --format=tar --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    "$suite" "$rootfs_tar.tmp" "$sources"
  mv "$rootfs_tar.tmp" "$rootfs_tar"
  # Root filesystems of other package lists.
  find "$root" -maxdepth 1 -name 'rootfs-*.tar' ! -name "${rootfs_tar##*/}" -delete
  log "rootfs (mmdebstrap, beside the Go builds) done in $((SECONDS - t)) s"
}
rootfs &
rootfs_pid=$!

# --- kind's base files (from its Go module) -------------------------------
t=$SECONDS
bash "$here/kind.sh" >/dev/null
kind_dir="$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$kind_version" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -d "$kind_dir/images/base/files" ] || die "kind's base files not found in $kind_dir"
stage kind "$t"

# --- Kubernetes binaries --------------------------------------------------
t=$SECONDS
k8s_bin="$(bash "$here/kube.sh" kube-apiserver kube-controller-manager kube-scheduler kube-proxy \
  kubelet kubeadm kubectl)"
stage kubernetes "$t"

# --- etcd (scratch module: its go.mod replaces its siblings with ../) ------
t=$SECONDS
etcd_bin="$cache/etcd-$etcd_version/bin/etcd"
if ! [ -x "$etcd_bin" ]; then
  mkdir -p "$cache/etcd-$etcd_version/module" "${etcd_bin%/*}"
  (
    cd "$cache/etcd-$etcd_version/module"
    printf 'module meshhub.local/etcdpeer\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
      "$etcd_version" >go.mod
    export GOFLAGS=-mod=mod CGO_ENABLED=0
    go get "go.etcd.io/etcd/server/v3@$etcd_version" >/dev/null
    go build -trimpath -ldflags=-s\ -w -o "$etcd_bin.tmp" go.etcd.io/etcd/server/v3
    mv "$etcd_bin.tmp" "$etcd_bin"
  ) || die "building etcd $etcd_version failed"
fi
[[ "$("$etcd_bin" --version)" == *"etcd Version: ${etcd_version#v}"* ]] || die "$etcd_bin is not etcd $etcd_version"
stage etcd "$t"

# --- CoreDNS (its module has no replace: go install works) ----------------
t=$SECONDS
coredns_bin="$cache/coredns-$coredns_version/bin/coredns"
if ! [ -x "$coredns_bin" ]; then
  GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="${coredns_bin%/*}" \
    go install -trimpath -ldflags='-s -w' "github.com/coredns/coredns@$coredns_version" \
    || die "building CoreDNS $coredns_version failed"
fi
stage coredns "$t"

# --- kind's storage provisioner (no replace either) ------------------------
t=$SECONDS
local_path_bin="$cache/local-path-provisioner-$local_path_version/bin/local-path-provisioner"
if ! [ -x "$local_path_bin" ]; then
  GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="${local_path_bin%/*}" \
    go install -trimpath -ldflags='-s -w' "github.com/rancher/local-path-provisioner@$local_path_version" \
    || die "building local-path-provisioner $local_path_version failed"
fi
stage local-path-provisioner "$t"

t=$SECONDS
wait "$rootfs_pid" || { rootfs_pid=""; die "mmdebstrap failed"; }
rootfs_pid=""
stage rootfs-wait "$t"

# --- assemble ---------------------------------------------------------------
work="$(mktemp -d "$root/build.XXXXXX")"
node="$work/node"
mkdir -p "$node" "$work/images"
t=$SECONDS
tar -C "$node" -xf "$rootfs_tar"

# Copies files of the node's root filesystem, and the shared libraries
# they load, into an image's directory.
copy_from_node() { # dest file...
  local dest="$1" f lib
  shift
  for f in "$@"; do
    mkdir -p "$dest/$(dirname "$f")"
    cp -a "$node/$f" "$dest/$f"
    # ldd of the node's files, resolved inside the node.
    for lib in $(chroot "$node" ldd "$f" 2>/dev/null | grep -o '/[^ ]*' || true); do
      [ -e "$dest/$lib" ] && continue
      mkdir -p "$dest/$(dirname "$lib")"
      cp -L "$node/$lib" "$dest/$lib"
    done
  done
}

# An image FROM scratch holding DIR, saved as a docker archive for
# containerd's `ctr images import`.
make_image() { # ref dir entrypoint-json
  local ref="$1" dir="$2" entrypoint="$3" name c
  name="${ref##*/}"
  c="$(buildah from scratch)"
  buildah copy --quiet "$c" "$dir" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ${entrypoint:+--entrypoint "$entrypoint"} "$c"
  buildah commit --quiet --rm --timestamp 0 "$c" "docker-archive:$work/images/${name%%:*}.tar:$ref" >/dev/null
}

img="$work/img"
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  rm -rf "$img" && mkdir -p "$img/usr/local/bin"
  cp "$k8s_bin/$cmd" "$img/usr/local/bin/"
  make_image "registry.k8s.io/$cmd:$k8s_version" "$img" ""
done
# kube-proxy runs iptables, with the node's backend: kind's entrypoint picks
# the backend that already holds rules, legacy when neither does (a new
# podman network namespace), and kind's own kube-proxy image decides alike.
rm -rf "$img" && mkdir -p "$img/usr/local/bin" "$img/etc"
cp "$k8s_bin/kube-proxy" "$img/usr/local/bin/"
copy_from_node "$img" /usr/sbin/xtables-legacy-multi \
  $(cd "$node" && ls usr/lib/x86_64-linux-gnu/xtables/*.so | sed 's|^|/|')
for t6 in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  ln -s xtables-legacy-multi "$img/usr/sbin/$t6"
done
cp "$node/etc/protocols" "$node/etc/ethertypes" "$img/etc/" 2>/dev/null || true
make_image "registry.k8s.io/kube-proxy:$k8s_version" "$img" ""

rm -rf "$img" && mkdir -p "$img/usr/local/bin"
cp "$etcd_bin" "$img/usr/local/bin/etcd"
make_image "registry.k8s.io/etcd:$etcd_tag" "$img" ""

rm -rf "$img" && mkdir -p "$img"
cp "$coredns_bin" "$img/coredns"
make_image "registry.k8s.io/coredns/coredns:$coredns_version" "$img" '["/coredns"]'

rm -rf "$img" && mkdir -p "$img"
pause_src="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$k8s_version" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/build/pause/linux/pause.c"
gcc -Os -static -DVERSION="v$pause_version" -o "$img/pause" "$pause_src"
strip "$img/pause"
make_image "registry.k8s.io/pause:$pause_version" "$img" '["/pause"]'
# kind's storage: the provisioner and its helper (a shell for the setup
# and teardown scripts: Debian's static busybox), under the names kind's
# manifest (pkg/build/nodeimage/const_storage.go) gives them.
storage_go="$kind_dir/pkg/build/nodeimage/const_storage.go"
provisioner_image="$(sed -n 's/^const storageProvisionerImage = "\(.*\)"$/\1/p' "$storage_go")"
helper_image="$(sed -n 's/^const storageHelperImage = "\(.*\)"$/\1/p' "$storage_go")"
[ -n "$provisioner_image" ] && [ -n "$helper_image" ] || die "storage images not found in $storage_go"
rm -rf "$img" && mkdir -p "$img/usr/local/bin"
cp "$local_path_bin" "$img/usr/local/bin/"
make_image "$provisioner_image" "$img" ""
rm -rf "$img" && mkdir -p "$img/bin"
cp "$node/bin/busybox" "$img/bin/"
for applet in $("$img/bin/busybox" --list); do
  [ -e "$img/bin/$applet" ] || ln -s busybox "$img/bin/$applet"
done
make_image "$helper_image" "$img" ""
rm -rf "$img"
stage images "$t"

# kind's base image, as images/base/Dockerfile makes it.
t=$SECONDS
base="$kind_dir/images/base/files"
install -m 0755 "$base"/usr/local/bin/* "$node/usr/local/bin/"
mkdir -p "$node/kind/bin" "$node/etc/containerd" "$node/etc/systemd/system/kubelet.service.d" \
  "$node/etc/kubernetes/manifests" "$node/lib/modules" "$node/etc/cni/net.d" "$node/opt/cni"
install -m 0644 "$base"/kind/README.txt "$node/kind/"
install -m 0755 "$base"/kind/bin/* "$node/kind/bin/"
install -m 0644 "$base"/etc/crictl.yaml "$node/etc/"
install -m 0644 "$base"/etc/default/* "$node/etc/default/"
install -m 0644 "$base"/etc/sysctl.d/* "$node/etc/sysctl.d/"
install -m 0644 "$base"/etc/systemd/system/*.service "$base"/etc/systemd/system/*.slice "$node/etc/systemd/system/"
install -m 0644 "$base"/etc/systemd/system/kubelet.service.d/* "$node/etc/systemd/system/kubelet.service.d/"
# Debian's containerd is /usr/bin/containerd (kind's unit runs /usr/local/bin's)
# and its CNI plugins are in /usr/lib/cni (containerd looks in /opt/cni/bin).
ln -sf /usr/bin/containerd "$node/usr/local/bin/containerd"
ln -sfn /usr/lib/cni "$node/opt/cni/bin"
# kind's containerd configuration, with: the sandbox image kubeadm expects;
# restrict_oom_score_adj, as in a user namespace (podman's containers here
# lack CAP_SYS_RESOURCE: raising an OOM score is refused).
sed -e "s|sandbox_image = .*|sandbox_image = \"registry.k8s.io/pause:$pause_version\"|" \
  -e 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
  "$base/etc/containerd/config.toml" >"$node/etc/containerd/config.toml"
grep -q "pause:$pause_version" "$node/etc/containerd/config.toml" || die "sandbox_image not set"
"$node/usr/bin/ctr" oci spec \
  | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
  | jq 'del(.process.rlimits)' >"$node/etc/containerd/cri-base.json"
# kindnetd cannot be had here: a bridge network for the (single) node's pods,
# masqueraded when they leave it, in kind's default pod subnet.
cat >"$node/etc/cni/net.d/10-bridge.conflist" <<'JSON'
{
  "cniVersion": "0.4.0",
  "name": "kind-bridge",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.0.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
find "$node/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$node"/lib/systemd/system/multi-user.target.wants/* "$node"/etc/systemd/system/*.wants/* \
  "$node"/lib/systemd/system/local-fs.target.wants/* "$node"/lib/systemd/system/sockets.target.wants/*udev* \
  "$node"/lib/systemd/system/sockets.target.wants/*initctl* "$node"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$node/etc/systemd/journald.conf"
ln -sf /lib/systemd/systemd "$node/sbin/init"
systemctl --root="$node" --quiet enable kubelet.service containerd.service undo-mount-hacks.service
systemctl --root="$node" --quiet mask systemd-binfmt.service
for cmd in kubelet kubeadm kubectl; do install -m 0755 "$k8s_bin/$cmd" "$node/usr/bin/"; done
echo "$k8s_version" >"$node/kind/version"
# kind's storage manifest, the Go string of const_storage.go with its
# image names filled in.
mkdir -p "$node/kind/manifests"
python3 - "$storage_go" "$provisioner_image" "$helper_image" >"$node/kind/manifests/default-storage.yaml" <<'PY'
import re, sys
src, provisioner, helper = sys.argv[1:]
text = open(src).read()
body = re.search(r"const defaultStorageManifest = `(.*?\n)`\n", text, re.S).group(1)
body = body.replace("` + storageProvisionerImage + `", provisioner).replace("` + storageHelperImage + `", helper)
assert "`" not in body, "unexpected Go expression in kind's storage manifest"
sys.stdout.write(body)
PY
grep -q "$helper_image" "$node/kind/manifests/default-storage.yaml" || die "storage manifest not written"
stage node-files "$t"

# The images, imported into the node's containerd store as kind's node image
# build does (not unpacked: containerd unpacks at first use). The node's own
# containerd runs here, on the host, on the node's /var/lib/containerd.
t=$SECONDS
cat >"$work/containerd.toml" <<TOML
version = 2
root = "$node/var/lib/containerd"
state = "$work/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$work/containerd.sock"
TOML
"$node/usr/bin/containerd" --config "$work/containerd.toml" >"$work/containerd.log" 2>&1 &
ctrd_pid=$!
for _ in $(seq 50); do [ -S "$work/containerd.sock" ] && break; sleep 0.2; done
[ -S "$work/containerd.sock" ] || { cat "$work/containerd.log" >&2; die "containerd did not start"; }
ctr=("$node/usr/bin/ctr" --address "$work/containerd.sock" --namespace k8s.io)
for archive in "$work"/images/*.tar; do
  "${ctr[@]}" images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack \
    --digests - <"$archive" >/dev/null
done
"${ctr[@]}" images list -q | grep -v -e '^sha256:' -e '^import-' | sed 's/^/kind-node.sh:   /' >&2
kill "$ctrd_pid" && wait "$ctrd_pid" || true
ctrd_pid=""
rm -rf "$node/var/lib/containerd/tmpmounts"
stage import "$t"

t=$SECONDS
tar -C "$node" --numeric-owner --xattrs -c . | podman import --quiet \
  --change 'ENV container=docker' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  - "$tag" >/dev/null
stage podman-import "$t"

# Older builds' images (another script version); one still used by a
# cluster's node stays.
podman images --format '{{.Repository}}:{{.Tag}}' localhost/meshhub/kind-node \
  | grep -vx "$tag" | xargs -r podman rmi >/dev/null 2>&1 || true
log "built $tag in $((SECONDS - start)) s ($(IFS=,; echo "${timings[*]}" | sed 's/,/, /g'));" \
  "size $(podman image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MiB", $1/1048576}')"
echo "$tag"

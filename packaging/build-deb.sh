#!/usr/bin/env bash
# build-deb.sh [--rpm] [ARCH…]: build the dibs package from this checkout
# into dist/, the way .ci/run and a release do: both binaries, the man pages
# and completions, then nfpm on packaging/nfpm.yaml. ARCH is amd64 (the
# default on an amd64 machine) or arm64; --rpm also makes the .rpm. It needs
# Go, git, and gcc for the amd64 daemon (NVML is cgo). nfpm is installed
# into $(go env GOPATH)/bin when it is not there (about a minute; goreleaser
# would take 14).
#
#   packaging/build-deb.sh          # dist/dibs_VERSION_amd64.deb
#   apt install ./dist/dibs_*_amd64.deb
#
# VERSION is packaging/version.sh's: 0.2.0~dev.TIME+COMMIT for a snapshot
# (above the last release, below the next), 0.2.0 on a commit tagged v0.2.0.
# The amd64 daemon is built with cgo, so it needs the build machine's glibc
# (2.34 when built on Debian 12 or newer; the package says so); the arm64
# one is built without cgo (no cross compiler needed): static, any glibc,
# GPUs through nvidia-smi, users from /etc/passwd only.
set -euo pipefail
cd "$(dirname "$0")/.."

nfpm_version=v2.45.2
rpm=
arches=()
for a in "$@"; do
	case "$a" in
	--rpm) rpm=1 ;;
	amd64 | arm64) arches+=("$a") ;;
	-h | --help)
		sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "build-deb.sh: $a is not amd64, arm64 or --rpm" >&2
		exit 2
		;;
	esac
done
if ((${#arches[@]} == 0)); then
	arches=("$(go env GOHOSTARCH)")
	case "${arches[0]}" in
	amd64 | arm64) ;;
	*) echo "build-deb.sh: this machine is ${arches[0]}; dibs packages amd64 and arm64: name one" >&2; exit 2 ;;
	esac
fi

export PATH="$(go env GOPATH)/bin:$PATH"
# go install stamps no version into nfpm --version: ask the binary's build record.
if ! go version -m "$(command -v nfpm 2>/dev/null || echo /nonexistent)" 2>/dev/null |
	grep -qE "^[[:space:]]+mod[[:space:]]+github.com/goreleaser/nfpm/v2[[:space:]]+${nfpm_version}([[:space:]]|\$)"; then
	echo "build-deb.sh: installing nfpm $nfpm_version (go install)"
	go install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$nfpm_version"
fi

version=$(packaging/version.sh)
commit=$(git rev-parse HEAD)
date=$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
# Same commit, same package bytes: every file gets the commit's time.
export SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
echo "build-deb.sh: dibs $version (commit ${commit:0:12}) for ${arches[*]}"

# Man pages and shell completions from the cobra commands, into the
# git-ignored packaging/gen/. The gendocs tag adds the hidden generator; the
# shipped binary has neither it nor md2man.
CGO_ENABLED=0 go run -tags gendocs ./cmd/dibs gen-docs packaging/gen --version "$version" --date "$date"

ldflags="-s -w -X github.com/dibs-gpu/dibs/base/buildinfo.version=$version -X github.com/dibs-gpu/dibs/base/buildinfo.commit=$commit -X github.com/dibs-gpu/dibs/base/buildinfo.date=$date"
mkdir -p dist
# Only this build's packages in dist/, so dist/dibs_*_amd64.deb is one file.
rm -f dist/dibs_*.deb dist/dibs-*.rpm
for arch in "${arches[@]}"; do
	bin=dist/bin/linux_$arch
	mkdir -p "$bin"
	# The client: pure Go on both architectures.
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$bin/dibs" ./cmd/dibs
	if [ "$arch" = amd64 ]; then
		# NVML needs cgo and the nvml tag; NVIDIA's nvml.h prints ~150
		# deprecation warnings without the flag.
		CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" GOOS=linux GOARCH=amd64 \
			go build -trimpath -tags nvml -ldflags "$ldflags" -o "$bin/dibsd" ./cmd/dibsd
		deb_libc="libc6 (>= 2.34)"
		rpm_libc="glibc >= 2.34"
	else
		CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$bin/dibsd" ./cmd/dibsd
		deb_libc=
		rpm_libc=
	fi
	formats=(deb)
	[ -z "$rpm" ] || formats+=(rpm)
	for f in "${formats[@]}"; do
		DIBS_VERSION=$version DIBS_ARCH=$arch DIBS_BIN=$bin DIBS_DEB_LIBC=$deb_libc DIBS_RPM_LIBC=$rpm_libc \
			nfpm package --config packaging/nfpm.yaml --packager "$f" --target dist/
	done
done
echo "build-deb.sh: made"
ls -1 dist/dibs_*.deb dist/dibs-*.rpm 2>/dev/null | sed 's/^/  /'
echo "install it on each node: apt install ./dist/dibs_*_${arches[0]}.deb   (see docs/operations.md)"

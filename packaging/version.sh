#!/bin/sh
# version.sh prints the version the packages and binaries of this checkout
# carry. A commit tagged vX.Y.Z (with a clean tree) is release X.Y.Z. Any
# other is a snapshot of the next minor release after the newest one
# CHANGELOG.md names (the repository may have no tags): 0.2.0~dev.TIME+COMMIT,
# TIME the commit's UTC time, so a later commit sorts later. `~` sorts
# before the release itself, and the whole sorts above the last release:
#   dpkg --compare-versions 0.2.0~dev.20261202050642+f137327 gt 0.1.0   # true
#   dpkg --compare-versions 0.2.0~dev.20261202050642+f137327 lt 0.2.0   # true
# A tree with uncommitted changes adds .dirty to the commit. DIBS_VERSION,
# when set, is printed as it is (for a release built from an untagged tree).
set -eu
cd "$(dirname "$0")/.."
if [ -n "${DIBS_VERSION:-}" ]; then
	echo "$DIBS_VERSION"
	exit 0
fi
dirty=
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty=.dirty
fi
tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null || true)
if [ -n "$tag" ] && [ -z "$dirty" ]; then
	echo "${tag#v}"
	exit 0
fi
last=$(sed -n 's/^## \[\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\)\].*/\1/p' CHANGELOG.md | head -1)
if [ -z "$last" ]; then
	echo "version.sh: CHANGELOG.md names no release (a heading like \"## [0.1.0] - DATE\")" >&2
	exit 1
fi
major=${last%%.*}
rest=${last#*.}
minor=${rest%%.*}
time=$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S)
commit=$(git rev-parse --short=7 HEAD)
echo "$major.$((minor + 1)).0~dev.$time+$commit$dirty"

#!/usr/bin/env bash
# check-deb.sh DIST: install DIST's amd64 .deb on this (Debian, root) machine,
# check what a person would find, then purge it. .ci/run calls it after
# packaging/build-deb.sh. Works with or without systemd running.
set -euo pipefail
dist=${1:-dist}
debs=("$dist"/dibs_*_amd64.deb)
[ -f "${debs[0]}" ] || { echo "check-deb: no amd64 .deb in $dist: run packaging/build-deb.sh first"; exit 1; }
((${#debs[@]} == 1)) || { echo "check-deb: ${#debs[@]} amd64 .debs in $dist (${debs[*]}): which one? packaging/build-deb.sh leaves one"; exit 1; }
deb=${debs[0]}
version=$(dpkg-deb -f "$deb" Version)
# The guide's install line names the file by this pattern.
case "$(basename "$deb")" in
"dibs_${version}_amd64.deb") ;;
*) echo "check-deb: $deb is not named dibs_${version}_amd64.deb, as the guide says"; exit 1 ;;
esac
fail() { echo "check-deb: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'dpkg -P dibs >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

if [ -d /run/systemd/system ]; then
	echo "systemd runs here: the maintainer scripts use systemctl"
else
	echo "no systemd here (PID 1 is $(cat /proc/1/comm)): the maintainer scripts skip systemctl"
fi

echo "dpkg -i $deb"
dpkg -i "$deb" | tee "$tmp/install.log"
grep -q "no agent runs yet" "$tmp/install.log" || fail "first install did not say that no agent runs yet"

# The binary, stamped by the release.
first=$(dibs version | head -1)
case "$first" in
"dibs version $version (commit "*) ;;
*) fail "dibs version says \"$first\", want \"dibs version $version (commit …\"" ;;
esac
[ "$(dibsd version | head -1)" = "dibsd ${first#dibs }" ] || fail "dibsd version says \"$(dibsd version | head -1)\", want \"dibsd ${first#dibs }\""
dibsd version | grep -q "GPUs through NVML" || fail "the amd64 dibsd was built without NVML: $(dibsd version | tail -1)"
[ "$(dibs version)" = "$(dibs --version)" ] || fail "dibs version and dibs --version differ"
[ "$(command -v dibs)" = /usr/bin/dibs ] || fail "dibs is at $(command -v dibs), want /usr/bin/dibs"
# The client is pure Go and links none of the daemon (issue 22).
if command -v go >/dev/null; then
	go version -m /usr/bin/dibs | grep -q 'CGO_ENABLED=0' || fail "/usr/bin/dibs was built with cgo"
	if go version -m /usr/bin/dibs | grep -E 'memberlist|bbolt|prometheus|go-nvml|wish'; then
		fail "/usr/bin/dibs links a daemon part (above)"
	fi
	# Nor the board's libraries: dibs hands the board to dibsd tui.
	if go version -m /usr/bin/dibs | grep -E 'charm\.land/|charmbracelet'; then
		fail "/usr/bin/dibs links the board's libraries (above)"
	fi
fi

# The files the package promises, with their modes.
while read -r mode path; do
	[ -f "$path" ] || fail "$path is missing"
	got=$(stat -c %a "$path")
	[ "$got" = "$mode" ] || fail "$path has mode $got, want $mode"
done <<'FILES'
755 /usr/bin/dibs
755 /usr/bin/dibsd
644 /usr/lib/systemd/system/dibs.service
644 /etc/dibs/dibs.toml
644 /usr/share/bash-completion/completions/dibs
644 /usr/share/zsh/vendor-completions/_dibs
644 /usr/share/fish/vendor_completions.d/dibs.fish
644 /usr/share/man/man1/dibs.1.gz
644 /usr/share/man/man1/dibs-agent.1.gz
644 /usr/share/man/man1/dibs-claim.1.gz
644 /usr/share/man/man1/dibsd.1.gz
644 /usr/share/man/man1/dibsd-agent.1.gz
644 /usr/share/doc/dibs/LICENSE
644 /usr/share/doc/dibs/examples/dibs.toml
644 /usr/share/doc/dibs/operations.md
644 /usr/share/doc/dibs/README.md
FILES
[ "$(stat -c '%a %U' /etc/dibs)" = "755 root" ] || fail "/etc/dibs is $(stat -c '%a %U' /etc/dibs), want 755 root"
dpkg-query -W -f='${Conffiles}\n' dibs | grep -q '/etc/dibs/dibs.toml' || fail "/etc/dibs/dibs.toml is not a conffile"
grep -q '^ExecStart=/usr/bin/dibsd agent --config /etc/dibs/dibs.toml$' /usr/lib/systemd/system/dibs.service || fail "the unit does not run /usr/bin/dibsd agent"
[ ! -e /etc/systemd/system/multi-user.target.wants/dibs.service ] || fail "installing enabled the agent"
if command -v systemd-analyze >/dev/null; then
	systemd-analyze verify /usr/lib/systemd/system/dibs.service || fail "systemd-analyze verify rejects the unit"
fi

# Man pages and completions work.
pages=$(ls /usr/share/man/man1/dibs*.1.gz | wc -l)
[ "$pages" -ge 20 ] || fail "only $pages man pages"
zcat /usr/share/man/man1/dibs-agent.1.gz | grep -q "dibs $version" || fail "dibs-agent.1 does not name release $version"
if command -v man >/dev/null; then
	man -l /usr/share/man/man1/dibs-agent.1.gz 2>/dev/null | grep -q "cluster-key-file" || fail "man dibs-agent does not render the agent's flags"
fi
bash -c 'source /usr/share/bash-completion/completions/dibs && complete -p dibs' | grep -q __start_dibs || fail "bash completion does not load"
dpkg-query -W -f='${Recommends}\n' dibs | grep -q bash-completion || fail "the package does not recommend bash-completion"
man_dibs=$(zcat /usr/share/man/man1/dibs.1.gz)
for want in "dibs claim" "dibs run" "dibs ls" "dibsd"; do
	grep -qF -- "$want" <<<"$man_dibs" || fail "man dibs does not mention $want"
done

# Every relative link of the installed docs leads to a file the package
# installed (the guide links its neighbours; README.md links docs/NAME.md).
for page in /usr/share/doc/dibs/*.md; do
	while read -r link; do
		target=${link%%#*}
		[ -n "$target" ] || continue
		[ -e "$(dirname "$page")/$target" ] || fail "$page links $target, which the package does not install"
	done < <(grep -o '](\([^)]*\))' "$page" | sed 's/^](//; s/)$//' | grep -v '^[a-z]*:' || true)
done

# Without the key, `dibs config check` and the agent refuse and say how to
# make one; the agent exits 78 (which the unit does not restart on). With a
# key the packaged config checks.
if [ ! -e /etc/dibs/cluster.key ]; then
	if dibs config check /etc/dibs/dibs.toml >"$tmp/check.out" 2>&1; then
		fail "dibs config check passed without the cluster key: $(cat "$tmp/check.out")"
	fi
	grep -q "dibs keygen /etc/dibs/cluster.key" "$tmp/check.out" || fail "dibs config check without a key says: $(cat "$tmp/check.out")"
	set +e
	timeout 20 dibs agent --config /etc/dibs/dibs.toml --sim 1xL40S --data-dir "$tmp/data" --socket "$tmp/dibs.sock" 2>"$tmp/agent.err"
	code=$?
	set -e
	[ "$code" = 78 ] && grep -q "dibs keygen /etc/dibs/cluster.key" "$tmp/agent.err" ||
		fail "agent without a key: exit $code, $(cat "$tmp/agent.err"); want 78 and the keygen step"
	dibs keygen /etc/dibs/cluster.key >/dev/null
	dibs config check /etc/dibs/dibs.toml || fail "the packaged config with a key does not check"
	rm -f /etc/dibs/cluster.key
else
	dibs config check /etc/dibs/dibs.toml
fi

# An upgrade (here: the same package again) keeps a locally edited config.
echo "# edited on this node" >>/etc/dibs/dibs.toml
dpkg -i "$deb" >/dev/null
tail -1 /etc/dibs/dibs.toml | grep -q "edited on this node" || fail "reinstalling replaced the edited /etc/dibs/dibs.toml"

# Without systemd the scripts find the agent by the socket it listens on
# and say what they do to it: an upgrade leaves it running (and says to
# restart it), a removal stops it before its binary goes, a reinstall over
# the config files says whether one runs. A person's board runs the same
# binary (`dibsd tui`) and must survive all of it (issue 30). `dibs agent`
# hands over to dibsd in the same process.
if [ ! -d /run/systemd/system ]; then
	: >"$tmp/empty.toml"
	install -d -m 0755 /run/dibs
	dibs agent --config "$tmp/empty.toml" --sim 1xL40S --data-dir "$tmp/data2" --socket /run/dibs/dibs.sock >"$tmp/agent2.log" 2>&1 &
	agent=$!
	for _ in $(seq 100); do [ -S /run/dibs/dibs.sock ] && dibs ls >/dev/null 2>&1 && break; sleep 0.1; done
	dibs ls >/dev/null 2>&1 || fail "dibs agent did not start: $(cat "$tmp/agent2.log")"
	[ "$(readlink /proc/$agent/exe)" = /usr/bin/dibsd ] || fail "dibs agent runs $(readlink /proc/$agent/exe), want /usr/bin/dibsd in the same process"
	# A board, in a tmux server of its own.
	tmux -L dibs-check-deb new-session -d -x 100 -y 30 'dibsd tui'
	trap 'tmux -L dibs-check-deb kill-server 2>/dev/null || true; dpkg -P dibs >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
	board=$(tmux -L dibs-check-deb list-panes -F '#{pane_pid}')
	for _ in $(seq 100); do [ "$(readlink /proc/$board/exe)" = /usr/bin/dibsd ] && break; sleep 0.1; done
	[ "$(readlink /proc/$board/exe)" = /usr/bin/dibsd ] || fail "the board (pid $board) runs $(readlink /proc/$board/exe), want /usr/bin/dibsd"
	# A run, so the agent mounts its exit-status tmpfs for root.
	dibs run -g 1 --name check-deb -- true >/dev/null || fail "dibs run failed"
	grep -q ' /run/dibs/exit/0 .* - tmpfs dibs-exit ' /proc/self/mountinfo || fail "no exit-status tmpfs at /run/dibs/exit/0 after a dibs run"
	dpkg -i "$deb" | tee "$tmp/upgrade.log"
	grep -q "an agent runs (pid $agent," "$tmp/upgrade.log" || fail "upgrading did not name the running agent (alone)"
	kill -0 "$agent" 2>/dev/null || fail "upgrading without systemd stopped the agent"
	dpkg -r dibs | tee "$tmp/remove.log"
	grep -q "stopping the agent (pid $agent)" "$tmp/remove.log" || fail "removing did not say it stops the agent (alone)"
	wait "$agent" || true
	! kill -0 "$agent" 2>/dev/null || fail "removing left the agent running from the deleted binary"
	kill -0 "$board" 2>/dev/null || fail "removing the package ended a board (pid $board): only the agent may be stopped"
	tmux -L dibs-check-deb kill-server
	dpkg -i "$deb" | tee "$tmp/reinstall.log"
	grep -q "no agent running" "$tmp/reinstall.log" || fail "reinstalling over the config files did not say whether an agent runs"
	grep -q "systemctl" "$tmp/reinstall.log" && fail "without systemd, installing advised systemctl"
fi

# Purge succeeds after a dibs run (the agent's exit-status tmpfs mounts
# under /run/dibs/exit), and unmounts them.
dpkg -P dibs >/dev/null || fail "dpkg -P dibs failed"
[ ! -e /usr/bin/dibs ] && [ ! -e /etc/dibs/dibs.toml ] || fail "purge left /usr/bin/dibs or /etc/dibs/dibs.toml"
[ ! -e /run/dibs ] && [ ! -e /var/lib/dibs ] || fail "purge left /run/dibs or /var/lib/dibs"
! grep -q ' /run/dibs/exit/[^ ]* .* - tmpfs dibs-exit ' /proc/self/mountinfo || fail "purge left an exit-status tmpfs mounted: $(grep ' - tmpfs dibs-exit ' /proc/self/mountinfo)"
echo "check-deb: dibs $version deb installs, runs, keeps its config and purges cleanly"

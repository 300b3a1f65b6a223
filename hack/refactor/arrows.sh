#!/usr/bin/env bash
# Moves the packages that made arrows run back up into internal/nodeagent
# (issue 26 item 5) and rewrites their import paths tree-wide:
#   internal/nodeagent/fixture  -> internal/platform/fixture   (fixture-copy mechanics; backends/fixturecopy uses it)
#   internal/nodeagent/guestpty -> internal/guestclient/guestpty (host side of the guest PTY relay; procexec uses it)
# Idempotent: run it again after merging a branch that still edits or imports
# the old paths (files left at an old path are moved when the new path has no
# file of that name; otherwise it stops and names them). internal/arrows_test.go
# fails while any arrow remains.
set -euo pipefail
cd "$(dirname "$0")/../.."
mod=sensorium.dev/workbench
moves=(
	"internal/nodeagent/fixture internal/platform/fixture"
	"internal/nodeagent/guestpty internal/guestclient/guestpty"
)
for m in "${moves[@]}"; do
	read -r from to <<<"$m"
	if [ -d "$from" ]; then
		mkdir -p "$to"
		for f in "$from"/*; do
			[ -e "$f" ] || continue
			dest="$to/$(basename "$f")"
			if [ -e "$dest" ]; then
				echo "arrows: both $f and $dest exist; merge them by hand" >&2
				exit 1
			fi
			git mv "$f" "$dest" 2>/dev/null || mv "$f" "$dest"
		done
		rmdir "$from" 2>/dev/null || true
	fi
	git ls-files -z '*.go' '*.md' | xargs -0 grep -lZ -F "$mod/$from\"" 2>/dev/null |
		xargs -0 -r sed -i "s|\"$mod/$from\"|\"$mod/$to\"|g" || true
done
# The new paths sort elsewhere in their import groups.
gofmt -l $(git ls-files '*.go') | xargs -r gofmt -w
go build ./...
echo "arrows: done" >&2

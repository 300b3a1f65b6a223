#!/usr/bin/env bash
# Moves the tree onto the one refusal type (issue 26 item 3): actuation.Refusal
# is the only coded error and actuation.CodeOf the only way to read its code.
#
# Idempotent: run it again after merging a branch that still says refusal.X,
# fsaccess.Errorf, protocol.CodeOf or an alias `X = string(actuation.CodeX)`.
# It rewrites Go files in place (hack/refactor/onerefusal, standard library
# only), deletes internal/nodeagent/refusal, then checks the tree builds and
# is gofmt-clean. Commit its output on its own, apart from hand edits.
set -euo pipefail
cd "$(dirname "$0")/../.."
go run ./hack/refactor/onerefusal "$@"
# Comments that still name the deleted types.
git ls-files -z '*.go' ':!hack/refactor' |
	xargs -0 grep -lZ -E -e '(refusal|fsaccess)\.(Error|CodeOf|New)\b' 2>/dev/null |
	xargs -0 -r sed -i -E \
		-e 's/(nodeagent\/)?refusal\.Error\b/actuation.Refusal/g' -e 's/\brefusal\.CodeOf\b/actuation.CodeOf/g' -e 's/\brefusal\.New\b/actuation.Refusef/g' \
		-e 's/\bfsaccess\.Error\b/actuation.Refusal/g' -e 's/\bfsaccess\.CodeOf\b/actuation.CodeOf/g' || true
unformatted=$(gofmt -l $(git ls-files -co --exclude-standard '*.go' | grep -v '^bin/') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "one-refusal: not gofmt-clean:" >&2
	echo "$unformatted" >&2
	exit 1
fi
if ! go build ./... ; then
	echo "one-refusal: the tree does not build; fix by hand (see the note) and commit apart" >&2
	exit 1
fi
echo "one-refusal: done; remaining mentions:" >&2
grep -rn --include='*.go' -e 'nodeagent/refusal"' -e '= string(actuation\.Code' . | grep -v '^./bin/' | grep -v '^./hack/refactor/' >&2 || echo "  none" >&2

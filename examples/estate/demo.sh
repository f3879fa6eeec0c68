#!/bin/sh
# demo.sh [ARGS...]
#
# Runs the example end to end: builds the example repository (make-repo.sh)
# in a temporary directory, brings a fresh simulated estate ($ESTATE_DIR) to
# the state of `main` (bootstrap.py runs main's plan and apply commands for
# every member), then plans the `change` branch with
#   cargo run --quiet -- plan --repo REPO --base main --head change ARGS...
# from the crate root. Everything temporary is removed on exit.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
crate=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wavegate-demo.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

repo="$tmp/repo"
ESTATE_DIR="$tmp/estate"
export ESTATE_DIR
# What the plans read, shown to them in the sandbox as the bot would.
WAVEGATE_SANDBOX_APPLY_WRITE="$ESTATE_DIR${WAVEGATE_SANDBOX_APPLY_WRITE:+:$WAVEGATE_SANDBOX_APPLY_WRITE}"
export WAVEGATE_SANDBOX_APPLY_WRITE
mkdir "$ESTATE_DIR" "$tmp/base"

echo "demo: building the example repository in $repo" >&2
sh "$here/make-repo.sh" "$repo"
git -C "$repo" archive main | tar -xf - -C "$tmp/base"

echo "demo: deploying main to the simulated estate in $ESTATE_DIR" >&2
python3 "$here/bootstrap.py" "$tmp/base" >&2

echo "demo: planning main..change" >&2
if [ -n "${WAVEGATE:-}" ]; then
    "$WAVEGATE" plan --repo "$repo" --base main --head change "$@"
else
    cd "$crate"
    cargo run --quiet -- plan --repo "$repo" --base main --head change "$@"
fi

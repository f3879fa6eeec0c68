#!/usr/bin/env bash
# Seeds each target's corpus (fuzz/corpus/<target>/) from the forges' example
# payloads, the example repositories' wavegate.toml files, the tests' plan
# files and the Terraform show-json fixtures. Run from the repository root;
# the fixtures live beside it in ../shared/fixtures.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
fixtures=${FIXTURES:-$root/../shared/fixtures}
corpus=$here/corpus
seed() { # target, index byte (event pick) or "", file
  local target=$1 pick=$2 file=$3 name
  mkdir -p "$corpus/$target"
  name=$(sha1sum "$file" | cut -c1-16)$pick
  if [ -n "$pick" ]; then
    { printf "\\x$(printf %02x "$pick")"; cat "$file"; } > "$corpus/$target/$name"
  else
    cp "$file" "$corpus/$target/$name"
  fi
}
# The first byte picks the event, in the order of each target's EVENTS.
github_events=(pull_request issue_comment pull_request_review installation check_run ping)
for i in "${!github_events[@]}"; do
  for f in "$fixtures/github/webhooks/${github_events[$i]}"/*.json; do
    [ -f "$f" ] && seed webhook_github "$i" "$f"
  done
done
forgejo_events=(pull_request pull_request_sync pull_request_comment pull_request_review_approved pull_request_review_rejected pull_request_review_comment)
for f in "$fixtures"/forgejo/webhooks/*.json; do
  case $(basename "$f") in
    *synchronized*) pick=1 ;;
    *pull_request_comment*) pick=2 ;;
    *review_approved*) pick=3 ;;
    *review_rejected*) pick=4 ;;
    *review_comment*) pick=5 ;;
    *) pick=0 ;;
  esac
  seed webhook_forgejo "$pick" "$f"
done
for f in $(find "$root/examples" -name wavegate.toml); do
  seed repo_config "" "$f"
done
# Each ```toml block of the docs, one seed apiece.
for f in "$root"/docs/*.md; do
  awk -v out="$corpus/repo_config/$(basename "$f" .md)" \
    '/^```toml$/ {on = 1; n++; next} on && /^```$/ {on = 0; next} on {print > (out "-" n)}' "$f"
done
# The plan-file example of docs/plan-files.md, and the smallest plans.
mkdir -p "$corpus/plan_file"
awk '/^```json$/ {on = 1; next} on && /^```$/ {exit} on' "$root/docs/plan-files.md" > "$corpus/plan_file/documented"
printf '{"summary": "no changes", "entries": [], "empty": true}' > "$corpus/plan_file/empty"
printf '{"summary": "migrate 3 tables", "entries": []}' > "$corpus/plan_file/opaque"
printf '{"entries": [{"address": "a.b", "action": "create", "after": {"n": 9007199254740993, "f": 1e308, "s": "\\u00e9"}}]}' > "$corpus/plan_file/numbers"
i=0
for f in "$fixtures"/terraform/show-json/*.json; do
  seed terraform_adapter 0 "$f"; i=$((i + 1))
done
mkdir -p "$corpus/comment_commands"
printf '/approve' > "$corpus/comment_commands/approve"
printf 'Looks right.\n\n/approve prod sha256:0123\n' > "$corpus/comment_commands/approve-stage"
printf '> /approve\n\n```\n/approve\n```\n<blockquote>\n/approve\n</blockquote>\n/revoke\n' > "$corpus/comment_commands/quoted"
printf '/override app@prod because the drift is known\n/retry\n/plan\n/help\n' > "$corpus/comment_commands/several"
for target in "$corpus"/*; do
  echo "$(basename "$target"): $(ls "$target" | wc -l) seeds"
done

#!/bin/sh
# apply.sh PLAN_FILE OUTPUTS_FILE [--workspace NAME]
#
# wavegate's apply command: applies the binary plan plan.sh saved beside
# PLAN_FILE (never a fresh plan), then writes every output, flattened by
# `wavegate adapt terraform-outputs`, to OUTPUTS_FILE -- always: an apply that
# exits 0 without it fails. A plan made stale by another change to the state
# answers {"outcome": "replan"}: wavegate plans again, checks the new plan
# against the approval, and applies that.
set -eu
. "$(dirname "$0")/lib.sh"
[ "$#" -ge 2 ] || { echo "usage: $0 PLAN_FILE OUTPUTS_FILE [--workspace NAME]" >&2; exit 2; }
plan_file=$1
outputs_file=$2
shift 2
parse_options "$@"
dir=$(dirname "$plan_file")
[ -f "$dir/tfplan" ] || { echo "$0: no $dir/tfplan: plan.sh saves it beside the plan file" >&2; exit 1; }

tf_init
tf_workspace
# Streamed as it runs (wavegate shows it), and kept to tell a stale plan.
# (Tested in an `if`: under `set -e` a failing apply would end the group
# before its status is written.)
rm -f "$dir/apply.rc"
{
    if "$TERRAFORM" apply -input=false -no-color "$dir/tfplan" 2>&1; then status=0; else status=$?; fi
    echo "$status" > "$dir/apply.rc"
} | tee "$dir/apply.log"
if [ "$(cat "$dir/apply.rc")" != 0 ]; then
    if grep -q "Saved plan is stale" "$dir/apply.log"; then
        echo '{"outcome": "replan", "reason": "terraform: the state changed since the plan"}' > "$outputs_file"
        exit 0
    fi
    exit 1
fi
"$TERRAFORM" output -json > "$dir/output.json"
wavegate adapt terraform-outputs < "$dir/output.json" > "$outputs_file"

#!/bin/sh
# plan.sh PLAN_FILE INPUTS_FILE [--workspace NAME] [--var-file FILE]
#
# wavegate's plan command: init, select the stage's workspace, plan to a
# binary plan file kept beside PLAN_FILE (the apply applies exactly that
# plan), and write PLAN_FILE from `terraform show -json` through
# `wavegate adapt terraform`. Known inputs become variables
# (`wavegate adapt terraform-vars`); an unknown one keeps its default.
set -eu
. "$(dirname "$0")/lib.sh"
[ "$#" -ge 2 ] || { echo "usage: $0 PLAN_FILE INPUTS_FILE [--workspace NAME] [--var-file FILE]" >&2; exit 2; }
plan_file=$1
inputs_file=$2
shift 2
parse_options "$@"
# The member's own directory: wavegate keeps it, with the tree and its
# .terraform, from this plan to the apply of the same run.
dir=$(dirname "$plan_file")

tf_init
tf_workspace create
wavegate adapt terraform-vars < "$inputs_file" > "$dir/inputs.tfvars.json"
set -- -input=false -no-color -lock=false -out="$dir/tfplan"
[ -z "$var_file" ] || set -- "$@" -var-file="$var_file"
"$TERRAFORM" plan "$@" -var-file="$dir/inputs.tfvars.json"
"$TERRAFORM" show -json "$dir/tfplan" > "$dir/show.json"
wavegate adapt terraform < "$dir/show.json" > "$plan_file"

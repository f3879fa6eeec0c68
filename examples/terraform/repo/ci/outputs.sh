#!/bin/sh
# outputs.sh OUTPUTS_FILE [--workspace NAME]
#
# wavegate's outputs command: what is deployed now, for downstream plans of a
# change that does not touch this component. Read-only: a stage whose
# workspace does not exist yet has nothing deployed, and this fails saying so.
set -eu
. "$(dirname "$0")/lib.sh"
[ "$#" -ge 1 ] || { echo "usage: $0 OUTPUTS_FILE [--workspace NAME]" >&2; exit 2; }
outputs_file=$1
shift
parse_options "$@"
dir=$(dirname "$outputs_file")

tf_init
tf_workspace
"$TERRAFORM" output -json > "$dir/output.json"
wavegate adapt terraform-outputs < "$dir/output.json" > "$outputs_file"

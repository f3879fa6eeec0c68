# Sourced by plan.sh, apply.sh and outputs.sh: options, init, workspace.
#
# wavegate runs each command in the component's directory, in a sandbox with
# a cleared environment: PATH, HOME (private, empty), WAVEGATE_COMPONENT,
# WAVEGATE_STAGE, WAVEGATE_MEMBER and the names `env` lists in wavegate.toml.

# TERRAFORM=tofu for OpenTofu.
TERRAFORM=${TERRAFORM:-terraform}
# Terraform's own switch for running under automation: it stops advising a
# `terraform apply` of the job's plan path, which is gone once the job ends.
export TF_IN_AUTOMATION=1
workspace=
var_file=

parse_options() {
    while [ "$#" -gt 0 ]; do
        case $1 in
            --workspace) workspace=${2:?--workspace needs a name}; shift 2 ;;
            --var-file) var_file=${2:?--var-file needs a file}; shift 2 ;;
            *) echo "$0: unknown option $1 (--workspace NAME, --var-file FILE)" >&2; exit 2 ;;
        esac
    done
}

# init, with a plugin cache: the operator's (TF_PLUGIN_CACHE_DIR in `env`,
# filled in the image and read-only) or one in the command's private HOME.
tf_init() {
    : "${TF_PLUGIN_CACHE_DIR:=$HOME/.terraform.d/plugin-cache}"
    export TF_PLUGIN_CACHE_DIR
    [ -d "$TF_PLUGIN_CACHE_DIR" ] || mkdir -p "$TF_PLUGIN_CACHE_DIR"
    set -- -input=false -no-color
    # The example keeps its state under TF_STATE_DIR (a host path the
    # operator binds: WAVEGATE_SANDBOX_APPLY_WRITE). With a remote backend
    # (s3, gcs, azurerm, ...) pass its key here instead, e.g.
    # -backend-config="key=$WAVEGATE_COMPONENT/$WAVEGATE_STAGE.tfstate".
    if [ -n "${TF_STATE_DIR:-}" ]; then
        # A state this command cannot see would plan to create everything
        # that exists: refuse instead.
        [ -d "$TF_STATE_DIR" ] || {
            echo "$0: TF_STATE_DIR=$TF_STATE_DIR is not a directory this command can see, so it cannot read the state; under wavegate's sandbox the operator lists it as a state path (WAVEGATE_SANDBOX_APPLY_WRITE, or \`state\` in an execution profile)" >&2
            return 2
        }
        key=$WAVEGATE_COMPONENT
        # Without a workspace each stage needs a state of its own.
        [ -n "$workspace" ] || key=$key/$WAVEGATE_STAGE
        set -- "$@" -backend-config="path=$TF_STATE_DIR/$key/terraform.tfstate" \
            -backend-config="workspace_dir=$TF_STATE_DIR/$key/workspaces"
    fi
    # Quiet unless it fails: its chatter would fill the report's tail of
    # what the plan command printed.
    init_log=$(mktemp)
    "$TERRAFORM" init "$@" >"$init_log" 2>&1 || {
        status=$?
        cat "$init_log" >&2
        rm -f "$init_log"
        return "$status"
    }
    rm -f "$init_log"
}

# A stage per workspace: select it; `create` also creates it when missing
# (which writes to the state: plan credentials may not be allowed to).
tf_workspace() {
    [ -n "$workspace" ] || return 0
    if [ "${1:-}" = create ]; then
        "$TERRAFORM" workspace select -or-create=true "$workspace"
    else
        "$TERRAFORM" workspace select "$workspace"
    fi
}

#!/bin/sh
# make-repo.sh DIR
#
# Builds the example repository in DIR (which must not exist or be empty):
# branch `main` holds repo/, branch `change` adds one commit that copies
# change/ over it (a file `<path>.delete` in change/ deletes `<path>`).
# Names, dates and config are fixed, so the commit ids are the same on every
# run and machine. HEAD is left detached at main, so both branches can be
# checked out in worktrees.
set -eu

if [ "$#" -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    echo "make-repo.sh: $dir exists and is not empty" >&2
    exit 2
fi
mkdir -p "$dir"

# Keep the user's and the system's git config (hooks, signing, autocrlf) out.
GIT_CONFIG_NOSYSTEM=1
GIT_CONFIG_GLOBAL=/dev/null
GIT_AUTHOR_NAME="Estate Example"
GIT_AUTHOR_EMAIL="estate@example.invalid"
GIT_COMMITTER_NAME="Estate Example"
GIT_COMMITTER_EMAIL="estate@example.invalid"
export GIT_CONFIG_NOSYSTEM GIT_CONFIG_GLOBAL GIT_AUTHOR_NAME GIT_AUTHOR_EMAIL \
    GIT_COMMITTER_NAME GIT_COMMITTER_EMAIL

at() {
    GIT_AUTHOR_DATE=$1
    GIT_COMMITTER_DATE=$1
    export GIT_AUTHOR_DATE GIT_COMMITTER_DATE
}
g() {
    git -C "$dir" -c commit.gpgsign=false -c core.autocrlf=false "$@"
}

git -c init.defaultBranch=main init -q "$dir"
cp -R "$here/repo/." "$dir/"
g add -A
at "2024-01-01T09:00:00+0000"
g commit -q -m "Estate: network, database and app"

g checkout -q -b change
(cd "$here/change" && find . -type f | sort) | while IFS= read -r path; do
    path=${path#./}
    case $path in
        *.delete)
            target=${path%.delete}
            [ -e "$dir/$target" ] || { echo "make-repo.sh: $target.delete: no $target in repo/" >&2; exit 1; }
            rm -rf "$dir/$target"
            ;;
        *)
            mkdir -p "$dir/$(dirname "$path")"
            cp "$here/change/$path" "$dir/$path"
            ;;
    esac
done
g add -A
at "2024-01-02T09:00:00+0000"
g commit -q -m "Put app behind a load balancer and publish app.example.com"

g checkout -q --detach main

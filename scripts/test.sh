#!/usr/bin/env bash
# The tests (README's test command; .ci/run runs it too). Installs what they
# need when it is missing, then runs `cargo test --locked` (arguments are
# passed on, e.g. `scripts/test.sh --test it scenarios::apply`):
# - bubblewrap, passt and iproute2: every plan, apply and outputs command runs
#   in the sandbox, in the tests as in production;
# - PostgreSQL on 127.0.0.1:5432: the store's tests run on SQLite and on
#   PostgreSQL (WAVEGATE_TEST_POSTGRES_URL overrides the address);
# - python3 >= 3.11: the example estate's scripts read TOML with tomllib;
# - Debian's chromium and playwright-core (npm, tests/browser): the pages are
#   tested in a real browser (no browser download).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v pasta >/dev/null 2>&1 || missing+=(passt)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: the tests need ${missing[*]} (the sandbox every command runs in); install them with your package manager" >&2
        exit 1
    fi
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    echo "installing ${missing[*]} (the sandbox every command runs in; the browser the pages are tested in)" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
fi

# PostgreSQL listens on 127.0.0.1:5432 on these machines; start it if it is down.
if command -v pg_ctlcluster >/dev/null 2>&1 && ! (command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p 5432); then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || echo "warning: could not start PostgreSQL" >&2
fi

# The browser tests' driver, as package-lock.json pins it.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
    || { echo "error: the browser tests need Node.js 20 or later with npm" >&2; exit 1; }
if [ ! -d tests/browser/node_modules/playwright-core ]; then
    npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error >&2
fi

python3 -c 'import sys, tomllib; assert sys.version_info >= (3, 11)' \
    || { echo "error: the example estate needs python3 >= 3.11" >&2; exit 1; }

exec cargo test --locked "$@"

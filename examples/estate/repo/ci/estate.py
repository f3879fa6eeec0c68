"""Shared helpers of the simulated estate used by plan.py, apply.py and outputs.py.

A component directory (the commands' working directory) holds:

  resources.json  {"<type>.<name>": {"<attr>": value, ...}} -- the desired resources.
                  A string value may contain "${stage}" or "${input.NAME}"
                  (NAME read from the inputs file). Keys starting with "_" are
                  settings, not attributes:
                    "_computed":  attrs known only once the resource exists
                                  ("id" is always computed)
                    "_force_new": attrs whose change replaces the resource
                    "_per_stage": {"<stage>": {attr: value}} overrides per stage
  outputs.json    {"<output>": "<type>.<name>.<attr>"}

What is deployed lives in $ESTATE_DIR/<stage>/<component>.json as
{"<address>": {attrs, computed ones included}}. Computed values are
deterministic: the same stage, component, address and attribute always get
the same value.
"""

import hashlib
import json
import os
import re
import sys

SETTINGS = ("_computed", "_force_new", "_per_stage")
REFERENCE = re.compile(r"\$\{([^}]*)\}")
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
UNKNOWN = object()  # a value only known after apply


def say(message):
    """A progress line on stdout (wavegate streams these as they come)."""
    print(f"estate: {message}", flush=True)


def die(message, code=1):
    print(f"estate: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def member(component, stage):
    return os.environ.get("WAVEGATE_MEMBER") or f"{component}@{stage}"


def estate_dir():
    path = os.environ.get("ESTATE_DIR")
    if not path:
        die("ESTATE_DIR is not set: export it as the directory holding the simulated "
            "estate (wavegate passes it through because wavegate.toml lists it in "
            "[defaults] env)", code=2)
    if not os.path.isdir(path):
        # Planning against an estate it cannot see would propose creating
        # all of it, with a digest someone could approve: refuse instead.
        die(f"ESTATE_DIR={path} is not a directory this command can see, so it cannot "
            "read what is deployed; under wavegate's sandbox the operator lists it as a "
            "state path (WAVEGATE_SANDBOX_APPLY_WRITE, or `state` in an execution profile)",
            code=2)
    return path


def read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        die(f"{what} not found at {path}")
    except (OSError, ValueError) as e:
        die(f"{what} at {path} is not readable JSON: {e}")


def write_json(path, value):
    """Writes sorted, indented JSON atomically (a reader never sees half a file)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


class Resource:
    """One desired resource of the component, with its settings split off."""

    def __init__(self, address, spec, stage):
        if not isinstance(spec, dict):
            die(f"resources.json: `{address}` must be an object of attributes")
        if "." not in address:
            die(f"resources.json: `{address}` is not an address; write it as <type>.<name>")
        self.address = address
        self.attrs = {k: v for k, v in spec.items() if k not in SETTINGS}
        self.attrs.update(spec.get("_per_stage", {}).get(stage, {}))
        self.computed = sorted({"id", *spec.get("_computed", [])})
        self.force_new = set(spec.get("_force_new", []))
        for attr in self.computed:
            if attr in self.attrs:
                die(f"resources.json: `{address}.{attr}` is computed; it must not be set")


def load_resources(stage):
    spec = read_json(os.path.abspath("resources.json"), "resources.json of this component")
    if not isinstance(spec, dict):
        die("resources.json must be an object keyed by address")
    return {address: Resource(address, s, stage) for address, s in spec.items()}


def load_outputs():
    """{output: (address, attr)} from outputs.json ({} when there is none)."""
    if not os.path.exists("outputs.json"):
        return {}
    spec = read_json(os.path.abspath("outputs.json"), "outputs.json of this component")
    outputs = {}
    for name, ref in spec.items():
        if not isinstance(ref, str) or ref.count(".") < 2:
            die(f"outputs.json: `{name}` must name <type>.<name>.<attr>, found {ref!r}")
        outputs[name] = tuple(ref.rsplit(".", 1))
    return outputs


def state_path(stage, component):
    return os.path.join(estate_dir(), stage, f"{component}.json")


def load_state(stage, component):
    path = state_path(stage, component)
    return read_json(path, "state") if os.path.exists(path) else {}


def save_state(stage, component, state):
    path = state_path(stage, component)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, state)


def child_path(base, key):
    """A path in wavegate's grammar: `tags.Name`, `records[0]`, `tags["k8s.io/role"]`."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    if BARE_KEY.fullmatch(key):
        return f"{base}.{key}" if base else key
    return f"{base}[{json.dumps(key)}]"


def resolve(value, path, stage, inputs, unknown):
    """Fills in ${stage} and ${input.NAME}. Parts that need an input not known
    yet become null and their paths are appended to `unknown`."""
    if isinstance(value, dict):
        return {k: resolve(v, child_path(path, k), stage, inputs, unknown)
                for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, child_path(path, i), stage, inputs, unknown)
                for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def lookup(ref):
        if ref == "stage":
            return stage
        if ref.startswith("input."):
            return inputs.get(ref[len("input."):], UNKNOWN)
        die(f"resources.json: unsupported reference ${{{ref}}} at {path}; "
            "use ${stage} or ${input.NAME}")

    whole = REFERENCE.fullmatch(value)
    if whole:
        found = lookup(whole.group(1))
    else:
        parts = [lookup(m.group(1)) for m in REFERENCE.finditer(value)]
        found = UNKNOWN if UNKNOWN in parts else REFERENCE.sub(
            lambda m: text_of(lookup(m.group(1))), value)
    if found is UNKNOWN:
        unknown.append(path)
        return None
    return found


def text_of(value):
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def computed_value(stage, component, address, attr):
    """The value apply assigns to a computed attribute, e.g. id = "vpc-1a2b3c4d"."""
    def short_hash(text):
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    type_, name = address.split(".", 1)
    kind = type_.split("_", 1)[1] if "_" in type_ else type_   # aws_vpc -> vpc
    if attr == "id":
        return f"{kind}-{short_hash(f'{stage}/{component}/{address}')}"
    if attr == "arn":
        return f"arn:estate:{stage}:{component}:{address}"
    host = f"{kind}-{name}".replace("_", "-")
    return f"{host}-{short_hash(f'{stage}/{component}/{address}/{attr}')}.{stage}.estate.internal"


def fail_hook(*paths):
    """When one of `paths` exists: print its contents to stderr and exit 1."""
    for path in paths:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                text = f.read().strip() or f"failing on purpose ({path} exists)"
            print(text, file=sys.stderr, flush=True)
            sys.exit(1)

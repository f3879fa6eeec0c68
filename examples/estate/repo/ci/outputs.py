#!/usr/bin/env python3
"""outputs.py COMPONENT STAGE OUTPUTS_FILE

Reads what is deployed now: writes the component's outputs (outputs.json in
the working directory) resolved against $ESTATE_DIR/<stage>/<component>.json
to OUTPUTS_FILE as {"name": value}. Outputs whose resource is not deployed
are left out, so a member never deployed gives {}.
"""

import sys

sys.dont_write_bytecode = True  # keep the worktree clean of __pycache__

import estate


def main(argv):
    if len(argv) != 4:
        estate.die("usage: outputs.py COMPONENT STAGE OUTPUTS_FILE", code=2)
    component, stage, outputs_file = argv[1:4]
    estate.estate_dir()
    outputs = estate.load_outputs()
    state = estate.load_state(stage, component)
    values = {name: state[address][attr]
              for name, (address, attr) in outputs.items()
              if state.get(address, {}).get(attr) is not None}
    estate.write_json(outputs_file, values)
    estate.say(f"{estate.member(component, stage)}: {len(values)} of {len(outputs)} "
               "outputs deployed")


if __name__ == "__main__":
    main(sys.argv)

"""Print ``name==version`` for the lower bound of every dependency in ``setup.cfg``: the
runtime requirements and the ``test`` extra (which holds every optional package the tests use).

``.ci/run`` installs exactly these versions into a fresh environment and runs the test suite
there, so each declared lower bound is a version the code is tested with. Every requirement must
therefore have the form ``name>=version`` (extras such as ``dask[distributed]`` kept).
"""

import configparser
import re
import sys
from pathlib import Path

SETUP_CFG = Path(__file__).resolve().parents[1] / "setup.cfg"
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-]+(?:\[[a-z,]+\])?)>=([0-9][0-9A-Za-z.]*)$")


def lower_bounds(path: Path = SETUP_CFG) -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(path, encoding="utf-8")
    lines = cfg["options"]["install_requires"].split("\n") + cfg["options.extras_require"]["test"].split("\n")
    pins = {}
    for line in filter(None, (s.strip() for s in lines)):
        match = REQUIREMENT.match(line)
        if match is None:
            raise SystemExit(f"{path}: requirement {line!r} is not of the form name>=version")
        pins[match.group(1)] = f"{match.group(1)}=={match.group(2)}"
    return list(pins.values())


if __name__ == "__main__":
    sys.stdout.write("".join(p + "\n" for p in lower_bounds()))

"""Print the README's two commands, one per line: the install-and-run command, then the test command.

They are the first two ``bash`` blocks of ``README.md``, each a single line. ``.ci/run`` runs
exactly what this prints, so the commands CI runs and the ones a newcomer copies cannot drift
apart (``tests/test_readme.py`` checks both ends).
"""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def commands(text: str) -> list[str]:
    blocks = [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)][:2]
    if len(blocks) != 2 or any("\n" in b or not b for b in blocks):
        raise SystemExit(f"{README}: expected two one-line bash blocks first, got {blocks!r}")
    return blocks


if __name__ == "__main__":
    sys.stdout.write("".join(c + "\n" for c in commands(README.read_text(encoding="utf-8"))))

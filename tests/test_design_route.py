"""docs/design.md's route of one knob (the table under "The route of one knob") names the code as it is: every
folder of the route once, every file it names in that folder, and every class, function, field or name it quotes
defined there. A move or a rename that leaves the table behind fails here."""
from __future__ import annotations

import re

from tests.conftest import REPO

DESIGN = REPO / "docs" / "design.md"


def route_rows() -> list[tuple[str, list[str]]]:
    """(the row's place, the backticked names of its cells) of the route table."""
    text = DESIGN.read_text()
    table = text[text.index("## The route of one knob"):].split("\n\n")[2]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        place = cells[0].strip("`")
        rows.append((place, [n for cell in cells[1:] for n in re.findall(r"`([^`]+)`", cell)]))
    return rows


def defined_in(files, name: str) -> bool:
    """name (a bare name, Class.attr or module.function) is defined or assigned in one of the files."""
    last = name.split(".")[-1].split("(")[0]
    pattern = re.compile(rf"^\s*(?:def|class)\s+{last}\b|^\s*{last}\s*[:=]|\b{last}=|\"{last}\":", re.M)
    return any(pattern.search(path.read_text()) for path in files)


def test_the_route_crosses_each_folder_once_and_names_what_is_there():
    rows = route_rows()
    places = [place for place, _ in rows]
    assert len(places) == len(set(places)) and len(places) >= 8, places
    missing = []
    for place, names in rows:
        root = REPO / place
        assert root.exists(), place
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in (".py", ".smk", ".yaml"))
        for name in names:
            if name.startswith(("--", "{", "options[")) or " " in name or name[0].isdigit():
                continue   # a flag, an option's JSON, a config value: not a definition
            if name.endswith((".py", ".smk", ".yaml")):
                if not any(p.name == name.split("/")[-1] for p in files):
                    missing.append(f"{place}: no file {name}")
            elif not name.startswith(("engine.",)) and not defined_in(files, name):
                missing.append(f"{place}: nothing defines {name}")
    assert not missing, missing

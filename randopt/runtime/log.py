"""The project's logger, and how a stage's process sets it up: one line per event on stderr, which the
workflow sends to the stage's log file (logs/<rule>/...)."""
from __future__ import annotations

import logging
import sys

log = logging.getLogger("randopt")


def configure(name: str) -> None:
    """Lines of this process start with the time, the stage's name and the level."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s", stream=sys.stderr)

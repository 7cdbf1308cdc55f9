"""What passes between a job and its resident engine: the Engine protocol's methods (read from the
protocol itself, so a method added there is served without a second list to keep), the errors that
mean a bad input rather than a broken engine, and where the sockets live."""
from __future__ import annotations

import inspect

from randopt.engines.base import Engine
from randopt.io import InputError
from randopt.runtime.errors import ResidentEngineError  # noqa: F401  (the package's error, defined apart)

DEFAULT_DIR = ".snakemake/engines"
# The Engine protocol's methods a client may call (close ends the connection, not the engine).
METHODS = tuple(name for name, _ in inspect.getmembers(Engine, inspect.isfunction)
                if not name.startswith("_") and name != "close")
# Errors that mean a bad input, not a broken engine: the server reports them and keeps serving.
INPUT_ERRORS = {"InputError": InputError, "ValueError": ValueError, "FileNotFoundError": FileNotFoundError}
# An AF_UNIX socket path must fit in 108 bytes (104 on macOS).
MAX_SOCKET_PATH = 100
OFF_HINT = "engine.keep_loaded_s: 0 loads an engine in each job instead"



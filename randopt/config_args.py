"""--config KEY=VALUE on Snakemake's command line, with nested values typed.

Snakemake reads a top-level VALUE as an int, float or bool, but a nested one (`population={"n_seeds": 48}`) with
YAML's BaseLoader, which keeps every scalar a string: the schema then refused "48" as "must be an integer", blaming
the user for a number they typed as a number. Here each VALUE is read again with YAML's safe loader, as a
--configfile would read it, and merged over the config the same way (the Snakefile does, after its configfile).
A VALUE that is no YAML is refused with a pointer to --configfile, where quoting is not a shell's business.
"""
from __future__ import annotations

from collections.abc import Iterable

import yaml

from randopt.config import ConfigError


def typed_config_args(entries: Iterable[str] | None) -> dict:
    """{KEY: VALUE read as YAML} of --config's KEY=VALUE entries (None or a dict of them: nothing)."""
    if not entries or isinstance(entries, dict):
        return {}
    typed = {}
    for entry in entries:
        key, _, value = str(entry).partition("=")
        try:
            typed[key] = yaml.safe_load(value) if value != "" else None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at column {mark.column + 1}" if mark is not None else ""
            raise ConfigError(f"--config {key}=...: the value is not valid YAML{where} "
                              f"({getattr(err, 'problem', None) or err}); nested values read more easily from a "
                              f"file: put them in my.yaml and give --configfile my.yaml") from None
    return typed

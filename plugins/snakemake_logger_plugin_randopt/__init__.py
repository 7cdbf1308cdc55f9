"""Snakemake finds logger plugins as top-level packages named snakemake_logger_plugin_<name>; this one is
randopt's terminal (randopt/terminal/), and only names it. A checkout puts plugins/ on the PYTHONPATH of the
runs it starts (randopt/command.py); an installed randopt has this package in site-packages (setup.py)."""
from randopt.terminal.handler import LogHandler

__all__ = ["LogHandler"]

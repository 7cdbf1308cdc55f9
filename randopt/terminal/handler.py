"""Snakemake's logger plugin "randopt" (`snakemake --logger randopt`; `randopt run` asks for it): the plugin
interface around RunView (randopt/terminal/view.py), which decides what is shown."""
from __future__ import annotations

from rich.console import Console
from snakemake_interface_logger_plugins.base import LogHandlerBase

from randopt.terminal.view import RunView


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        settings = self.common_settings
        console = Console(stderr=not getattr(settings, "stdout", False), highlight=False)
        self.view = RunView(console, dryrun=bool(getattr(settings, "dryrun", False)),
                            printshellcmds=bool(getattr(settings, "printshellcmds", False)))

    def emit(self, record) -> None:
        try:
            self.view.handle(record)
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        try:
            self.view.close()
        finally:
            super().close()

    # What Snakemake asks of a logger plugin: this one writes the terminal (so Snakemake's own stream handler
    # stays off), filters and formats its records itself, and needs no rule graph.
    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False

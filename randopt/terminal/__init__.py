"""The terminal of a run (`randopt run`, `make record`): Snakemake's logger plugin "randopt".

One line a stage as it starts and ends, a live progress display of the running stages fed from their own logs
(members done, members/s, ETA), the verdict in three lines at the end, one line on Ctrl-C; Snakemake's job banners
stay in its log file (.snakemake/log/), not on the screen. Snakemake finds the plugin as the top-level package
snakemake_logger_plugin_randopt (plugins/ in a checkout, site-packages in an install), which only re-exports
handler.LogHandler. No stage imports anything here: it keys nothing (randopt/code_keys.py).
"""

# The environment variable that `randopt run` (and `make record`) sets to the command as typed: the resume line's.
RESUME_ENV = "RANDOPT_RESUME"

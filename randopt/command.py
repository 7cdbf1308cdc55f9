"""The `randopt` command (pyproject.toml's console script; also `python -m randopt`): one name for what a user
does with the pipeline, each a thin front over what already does it.

  randopt run [SNAKEMAKE ARGS]     the workflow (the record and the report's figures) in the current directory
  randopt export [SNAKEMAKE ARGS]  the export target of the last run (or --run FOLDER, --configfile FILES): members as model dirs
  randopt status [ARGS]            where a run stands (randopt/stages/status.py)
  randopt ask [ARGS]               a finished run's ensemble answers new questions (randopt/stages/ask.py)
  randopt eval [ARGS]              lm-evaluation-harness tasks on a finished run (randopt/stages/lm_eval.py)

status, ask and eval read one run: --run (its folder, results/runs/<run key>, or its record), --configfile (the
files it ran with), or by default the last finished run (results/record.json).

`run` and `export` are Snakemake on this package's Snakefile (randopt/checkout.py finds it, in a checkout or an
installed wheel), so any directory can hold a run; every Snakemake argument passes through (-n, --configfile,
--profile, --report, ...), --cores defaults to all, and the terminal is randopt's (randopt/terminal/: a line a
stage, live progress, the verdict); --banners gives Snakemake's own job banners instead. Each other command takes
its module's own arguments.
"""
from __future__ import annotations

import os
import shlex
import sys

from pathlib import Path

from randopt.checkout import REPO, SNAKEFILE, WORKFLOW
from randopt.terminal import RESUME_ENV

USAGE = __doc__.split("\n\n")[1]
# A checkout's Snakemake logger plugin (an installed one lies in site-packages, where Snakemake finds it by itself).
CHECKOUT_PLUGINS = REPO / "plugins"
# Snakemake's ways to say how many cores; without one, a run takes them all (as `make record` does).
CORES_FLAGS = ("--cores", "-c", "--jobs", "-j", "--profile", "--workflow-profile")


def given(args: list[str], flags: tuple[str, ...]) -> bool:
    """Whether args holds one of flags (as `--flag`, `--flag=V`, or a short one glued to its number: -j4)."""
    return any(a == f or a.startswith(f"{f}=") or (len(f) == 2 and a.startswith(f) and a[2:].isdigit())
               for a in args for f in flags)


def shipped_profile(value: str) -> str:
    """--profile's value: a folder here as given, else one the package ships (`--profile slurm` anywhere)."""
    if Path(value).is_dir():
        return value
    for candidate in (WORKFLOW / value, WORKFLOW / "profiles" / value):
        if candidate.is_dir():
            return str(candidate)
    return value


def snakemake_argv(args: list[str], target: str | None = None) -> list[str]:
    """The Snakemake command line of `randopt run` / `randopt export` (without the interpreter)."""
    args = [shipped_profile(a) if i and args[i - 1] == "--profile" else a for i, a in enumerate(args)]
    argv = ["-m", "snakemake", "--snakefile", str(SNAKEFILE)]
    if not given(args, CORES_FLAGS):
        argv += ["--cores", "all"]
    if "--banners" in args:
        args.remove("--banners")
    elif not given(args, ("--logger",)):
        argv += ["--logger", "randopt"]
    return argv + args + ([target] if target else [])


def snakemake_env(command: list[str], environ=os.environ) -> dict[str, str]:
    """The run's environment: the command as typed, for the terminal's resume line (a caller's own wins: `make
    record` says itself), and in a checkout the logger plugin's folder on the PYTHONPATH."""
    env = dict(environ)
    env.setdefault(RESUME_ENV, shlex.join(command))
    if (CHECKOUT_PLUGINS / "snakemake_logger_plugin_randopt").is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CHECKOUT_PLUGINS), env.get("PYTHONPATH")]))
    return env


def export_args(args: list[str]) -> list[str]:
    """`randopt export`'s Snakemake arguments: with --configfile, that config's run; else the run --run FOLDER
    names, or the last finished run (results/record.json) where there is one: its config as a --configfile
    (randopt/result/last_run.py), so that export reads the run a user just made, not the embedded default's."""
    from randopt.paths import LAST_RECORD
    from randopt.result.last_run import run_config_file
    from randopt.result.run_choice import choose_run
    args = list(args)
    run = None
    if "--run" in args:
        at = args.index("--run")
        run = args[at + 1] if at + 1 < len(args) else None
        del args[at:at + 2]
    directory = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--directory", "-d")), ".")
    if given(args, ("--configfile", "--configfiles")):
        return args
    if run is None and not (Path(directory) / LAST_RECORD).is_file():
        return args   # nothing finished here: the embedded default's run, as `randopt run` makes it
    chosen = choose_run(run, directory=directory)
    # one value glued to its flag: --configfile takes several, and would take the target after it too
    return [f"--configfile={run_config_file(chosen.record_path, directory)}", *args]


def exec_snakemake(command: list[str], args: list[str], target: str | None = None) -> None:
    """Replace this process with Snakemake's, so that Ctrl-C, exit status and output are Snakemake's own."""
    argv = [sys.executable, *snakemake_argv(args, target)]
    sys.stdout.flush()
    os.execve(sys.executable, argv, snakemake_env(command))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(f"usage: randopt COMMAND [ARGS]\n\n{USAGE}")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "run":
        exec_snakemake(["randopt", *argv], rest)
    elif command == "export":
        from randopt.io import InputError
        try:
            exec_snakemake(["randopt", *argv], export_args(rest), "export")
        except InputError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    elif command == "status":
        from randopt.stages.status import main as status
        return status(rest)
    elif command == "ask":
        from randopt.stages.ask import main as ask
        return ask(rest)
    elif command == "eval":
        from randopt.stages.lm_eval import main as lm_eval
        return lm_eval(rest)
    print(f"randopt: unknown command {command!r}\nusage: randopt COMMAND [ARGS]\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

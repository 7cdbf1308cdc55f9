"""The randopt command (randopt/command.py): what each subcommand runs, and the lm-eval plugin bridge
(plugins/randopt_lm_eval/) that makes `lm_eval --model randopt` resolve on lm-eval 0.4.13."""
import os
import subprocess
import sys

import pytest

from randopt.checkout import REPO, SNAKEFILE

PLUGINS = REPO / "plugins"
from randopt.command import snakemake_argv, snakemake_env
from randopt.terminal import RESUME_ENV


def test_run_is_snakemake_on_the_packages_snakefile_with_every_core_and_randopts_terminal():
    argv = snakemake_argv(["-n", "--configfile", "my.yaml"])
    assert argv[:4] == ["-m", "snakemake", "--snakefile", str(SNAKEFILE)]
    assert argv[4:] == ["--cores", "all", "--logger", "randopt", "-n", "--configfile", "my.yaml"]
    assert SNAKEFILE == REPO / "Snakefile"   # a checkout: the Snakefile beside randopt/


@pytest.mark.parametrize("cores", [["--cores", "2"], ["-c", "2"], ["-j4"], ["--cores=3"], ["--profile", "profiles/slurm"]])
def test_a_users_cores_or_profile_replaces_the_default_cores(cores):
    assert "all" not in snakemake_argv(cores)


def test_banners_gives_snakemakes_own_logger_and_a_users_logger_wins():
    assert "--logger" not in snakemake_argv(["--banners"]) and "--banners" not in snakemake_argv(["--banners"])
    assert snakemake_argv(["--logger", "rich"]).count("--logger") == 1


def test_a_shipped_profile_is_found_by_its_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert snakemake_argv(["--profile", "slurm"])[-1] == str(REPO / "profiles" / "slurm")
    (tmp_path / "slurm").mkdir()   # a folder of that name here wins, as Snakemake would read it
    assert snakemake_argv(["--profile", "slurm"])[-1] == "slurm"


def test_export_asks_for_the_export_target():
    assert snakemake_argv(["--configfile", "my.yaml"], "export")[-1] == "export"


def test_the_run_env_puts_the_checkouts_plugin_first_and_keeps_a_callers_resume_line():
    env = snakemake_env(["randopt", "run", "--configfile", "my file.yaml"], {"PYTHONPATH": "/x"})
    assert env["PYTHONPATH"] == f"{REPO / 'plugins'}{os.pathsep}/x"
    assert env[RESUME_ENV] == "randopt run --configfile 'my file.yaml'"
    assert snakemake_env(["randopt", "run"], {RESUME_ENV: "make record"})[RESUME_ENV] == "make record"


def run_randopt(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "randopt", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_help_names_every_command_and_an_unknown_one_is_refused():
    out = run_randopt("--help")
    assert out.returncode == 0 and all(f"randopt {c}" in out.stdout for c in ("run", "export", "status", "ask", "eval"))
    bad = run_randopt("frobnicate")
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr


def test_status_and_ask_are_their_modules_from_any_directory(tmp_path):
    status = run_randopt("status", "--directory", str(tmp_path), cwd=tmp_path)
    assert status.returncode == 0 and "record: not written yet" in status.stdout
    ask = run_randopt("ask", "--fraction", "0.5", "--record", str(tmp_path / "none.json"), "hi", cwd=tmp_path)
    assert ask.returncode == 2 and ask.stderr.startswith("error:")


def test_run_execs_snakemake_from_any_directory(tmp_path):
    """`randopt run --version` outside the checkout: Snakemake itself answers, through the plugin path."""
    out = run_randopt("run", "--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().startswith("9."), out.stderr


def test_the_bridge_registers_a_plugins_entry_point_lazily_and_never_over_a_builtin(tmp_path):
    """A package declaring an "lm_eval.models" entry point (here a stand-in dist-info, as pip writes one): after the
    bridge, lm-eval's own get_model finds it, imports its class only when asked, and keeps its own models."""
    dist = tmp_path / "fake_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[lm_eval.models]\nrandopt = randopt.harness.model:RandoptLM\n"
                                           "hf = somewhere.else:NotHF\n")
    # lm-eval's model table imported as its CLI imports it; nothing is materialized (that imports torch: the
    # installed package's test, tests/test_package.py, builds the model through lm-eval's own CLI)
    code = ("import sys, randopt_lm_eval as b; b.install(); import lm_eval.models; "
            "from lm_eval.api.registry import model_registry as r; "
            "print('randopt' not in sys.modules, r._objs['randopt'], r._objs['hf'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PLUGINS)])})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "randopt.harness.model:RandoptLM", "lm_eval.models.huggingface:HFLM"]


def test_the_placeholder_becomes_the_class_its_decorator_registers(monkeypatch):
    """lm-eval 0.4.13's registry takes the @register_model class over the "module:Class" placeholder the bridge
    left (an EntryPoint placeholder would have been refused as a collision); the bridge registers once."""
    import importlib.metadata
    import types

    from lm_eval.api.registry import Registry

    monkeypatch.syspath_prepend(str(PLUGINS))
    from randopt_lm_eval import GROUP, register_entry_points

    entry = importlib.metadata.EntryPoint(name="randopt", value="randopt.harness.model:RandoptLM", group=GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [entry] if group == GROUP else [])
    registry = Registry("model")
    module = types.SimpleNamespace(model_registry=registry)
    assert register_entry_points(module) == ["randopt"] and register_entry_points(module) == []

    class RandoptLM:   # what @register_model("randopt") registers on import, under the placeholder's name
        pass
    RandoptLM.__module__ = "randopt.harness.model"
    registry.register("randopt")(RandoptLM)
    assert registry.get("randopt") is RandoptLM


def test_the_pth_line_is_one_import_that_site_runs_and_imports_nothing_of_randopt():
    """site.py runs a .pth line that starts with "import"; anything else would be read as a path. Every process of
    the environment runs it: importing the randopt package there would fix which randopt a Snakefile gets."""
    (line,) = (PLUGINS / "randopt-lm-eval.pth").read_text().splitlines()
    assert line.startswith("import randopt_lm_eval;")
    out = subprocess.run([sys.executable, "-c", f"{line}; import sys; print('randopt' in sys.modules)"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(PLUGINS)}, cwd=PLUGINS)
    assert out.stdout.strip() == "False", out.stderr

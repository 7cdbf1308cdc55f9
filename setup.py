"""The one build step pyproject.toml cannot say: what the wheel carries besides the package.

The packages are randopt and the two plugins of plugins/ (Snakemake's logger, lm-eval's model). A checkout keeps the workflow (Snakefile, rules/, config/, profiles/, report/) beside randopt/, where
Snakemake and the Makefile find it. An installed wheel has no checkout, so build_py copies those files
into randopt/workflow/ (randopt/checkout.py finds them there), and puts randopt-lm-eval.pth at the top of
site-packages (plugins/randopt_lm_eval/ says why lm-eval needs it). An editable install
(`pip install -e .`) keeps reading the checkout itself: only the .pth is added to it.
"""
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# The workflow's files, as globs below the checkout's root; all of them, and only them, ship.
WORKFLOW_GLOBS = ("Snakefile", "rules/*.smk", "config/**/*.yaml", "config/README.md", "profiles/*/config.yaml",
                  "report/*.rst")
PTH = "plugins/randopt-lm-eval.pth"


class build_py_with_workflow(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # The checkout is read in place; only the .pth is added. setuptools' editable build writes its wheel's
            # data scheme below <wheel>/<name>.data/data; the purelib scheme beside it installs into site-packages.
            purelib = Path(self.get_finalized_command("install_data").install_dir).parent / "purelib"
            self.mkpath(str(purelib))
            self.copy_file(str(ROOT / PTH), str(purelib / Path(PTH).name))
            return
        for pattern in WORKFLOW_GLOBS:
            for source in sorted(ROOT.glob(pattern)):
                rel = source.relative_to(ROOT)
                target = Path(self.build_lib, "randopt", "workflow", rel)
                self.mkpath(str(target.parent))
                self.copy_file(str(source), str(target))
        self.copy_file(str(ROOT / PTH), str(Path(self.build_lib, Path(PTH).name)))


# Top-level packages of plugins/: Snakemake finds its logger plugins as snakemake_logger_plugin_<name>
# (randopt/terminal/), and the .pth imports the lm-eval bridge before anything of randopt (its docstring says why).
PLUGINS = ("snakemake_logger_plugin_randopt", "randopt_lm_eval")

setup(packages=find_packages(include=["randopt", "randopt.*"]) + list(PLUGINS),
      package_dir={name: f"plugins/{name}" for name in PLUGINS}, cmdclass={"build_py": build_py_with_workflow})

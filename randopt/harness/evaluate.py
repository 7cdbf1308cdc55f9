"""Evaluate a finished run's base, members and ensembles on lm-eval tasks: python -m randopt.stages.lm_eval.

lm-eval's own arguments (--tasks, --limit, --num_fewshot, --gen_kwargs, --include_path, ...) are
parsed by lm-eval's own `run` parser and checked by its own config (EvaluatorConfig), then passed to
its simple_evaluate, once per model choice, on one engine. Everything that can be wrong with the
input (the run's files, a choice that selects nobody, a task lm-eval does not know) fails as one line
before the engine loads. The results are written atomically: lm-eval's results of each choice with a
header saying which members, sigmas and run (record sha256) they are, and a table of every choice's
metrics (docs/lm_eval.md).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

from randopt.harness.run import Run, parse_choice
from randopt.io import InputError, write_json_atomic, write_text_atomic

log = logging.getLogger("randopt")

# The tasks shipped with randopt (YAML + JSONL, no network): always on lm-eval's include path.
TASKS_DIR = Path(__file__).resolve().parent / "tasks"


def lm_eval_config(argv: list[str], out: str | None = None):
    """lm-eval's EvaluatorConfig of its own command-line arguments (the `run` subcommand's parser)."""
    from lm_eval._cli.run import Run as RunCommand
    from lm_eval.config.evaluate_config import EvaluatorConfig
    if any(a.split("=")[0] in ("--model", "-M", "--model_args", "-a", "--output_path", "-o") for a in argv):
        raise InputError("lm-eval arguments: leave out --model, --model_args and --output_path; the model is "
                         "chosen by --base/--member/--rank/--ensemble and the results go to --out")
    parser = argparse.ArgumentParser(prog="python -m randopt.stages.lm_eval", add_help=False)
    RunCommand.create(parser.add_subparsers(dest="command"))
    namespace = parser.parse_args(["run", "--model", "randopt", *argv])
    if out:
        namespace.output_path = out  # lm-eval checks --log_samples has somewhere to go; --out is where
    try:
        cfg = EvaluatorConfig.from_cli(namespace)
    except (ValueError, TypeError, FileNotFoundError) as err:
        raise InputError(f"lm-eval arguments: {err}") from None
    return cfg


def task_manager(cfg):
    """lm-eval's TaskManager for cfg's tasks, which it resolves (an unknown task is an InputError).
    Tasks found in the include paths alone (the shipped ones) skip lm-eval's index of its ~15k
    built-in task files, which takes ~16 s to build on 2 CPU cores."""
    from lm_eval.tasks import TaskManager
    paths = [str(TASKS_DIR)] + ([cfg.include_path] if isinstance(cfg.include_path, str) else list(cfg.include_path or []))
    cfg.include_path = paths
    names = [t for task in ([cfg.tasks] if isinstance(cfg.tasks, str) else cfg.tasks) for t in str(task).split(",") if t]
    local = TaskManager(include_path=paths, include_defaults=False, metadata=cfg.metadata)
    if names and all(local.match_tasks([name]) for name in names):
        cfg.tasks = [match for name in names for match in local.match_tasks([name])]
        return local
    try:
        return cfg.process_tasks(cfg.metadata)
    except ValueError as err:
        raise InputError(f"lm-eval: {err} (lm-eval ls tasks lists them; a local task needs --include_path DIR)") \
            from None


def simple_evaluate_kwargs(cfg) -> dict:
    """simple_evaluate's arguments from lm-eval's config, as lm-eval's own `run` command passes them."""
    caching = cfg.cache_requests or {}
    seed = cfg.seed or [None] * 4
    return dict(tasks=cfg.tasks, num_fewshot=cfg.num_fewshot, use_cache=cfg.use_cache,
                cache_requests=caching.get("cache_requests", False),
                rewrite_requests_cache=caching.get("rewrite_requests_cache", False),
                delete_requests_cache=caching.get("delete_requests_cache", False),
                limit=cfg.limit, samples=cfg.samples, check_integrity=cfg.check_integrity, write_out=cfg.write_out,
                log_samples=cfg.log_samples, system_instruction=cfg.system_instruction,
                apply_chat_template=cfg.apply_chat_template, fewshot_as_multiturn=cfg.fewshot_as_multiturn,
                gen_kwargs=cfg.gen_kwargs, predict_only=cfg.predict_only, random_seed=seed[0],
                numpy_random_seed=seed[1], torch_random_seed=seed[2], fewshot_random_seed=seed[3],
                confirm_run_unsafe_code=cfg.confirm_run_unsafe_code, metadata=cfg.metadata)


def evaluate(run_dir: str | Path, choices: list[str], lm_eval_argv: list[str], out: str | Path, *,
             table: str | Path | None = None, record: str | None = None, ranking: str | None = None,
             model_dir: str | None = None, threads: int | None = None) -> dict:
    """lm-eval's results for each model choice (CHOICE_HELP), on one engine, written to out (JSON)
    and, when given, their metrics side by side to table (TSV)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as lm-eval's own CLI sets it
    chosen = [parse_choice(c) for c in choices or []]
    if not chosen:
        raise InputError("no model to evaluate: give --base, --member, --rank or --ensemble (one or more)")
    labels = [c.label for c in chosen]
    if len(set(labels)) < len(labels):
        raise InputError(f"model choices {labels} name one model twice")
    run = Run.open(run_dir, record=record, ranking=ranking, model_dir=model_dir)
    members = {c.label: run.members(c) for c in chosen}
    cfg = lm_eval_config(lm_eval_argv, out=str(out))
    manager = task_manager(cfg)

    from lm_eval import simple_evaluate
    from lm_eval.utils import handle_non_serializable, make_table

    from randopt.harness.model import RandoptLM, load_engine
    start = time.perf_counter()
    engine = load_engine(run, threads)
    seconds = {"engine_load": time.perf_counter() - start}
    models = {}
    for choice in chosen:
        start = time.perf_counter()
        log.info("lm-eval: %s (%d members) on %s", choice.label, len(members[choice.label]), cfg.tasks)
        lm = RandoptLM.on_engine(run, choice, members[choice.label], engine)
        results = simple_evaluate(model=lm, task_manager=manager, **simple_evaluate_kwargs(cfg))
        print(make_table(results), flush=True)
        # lm-eval's results as its own writer serializes them (functions and numpy values made plain)
        models[choice.label] = {"randopt": run.header(choice, members[choice.label]),
                                **json.loads(json.dumps(results, default=handle_non_serializable))}
        seconds[choice.label] = time.perf_counter() - start
    document = {"models": models, "lm_eval_args": list(lm_eval_argv), "tasks": [str(t) for t in cfg.tasks],
                "seconds": seconds}
    write_json_atomic(out, document)
    if table:
        write_text_atomic(table, metrics_table(models))
    return document


def metrics_table(models: dict) -> str:
    """TSV: one row per (task, metric, filter), one column per model (value ± stderr)."""
    labels = list(models)
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for label, results in models.items():
        for task, metrics in results.get("results", {}).items():
            for name, value in metrics.items():
                metric, _, filt = name.partition(",")
                if name == "alias" or metric.endswith("_stderr") or not isinstance(value, (int, float)):
                    continue
                stderr = metrics.get(f"{metric}_stderr,{filt}" if filt else f"{metric}_stderr")
                cell = f"{value:.4f}" + (f" ± {stderr:.4f}" if isinstance(stderr, (int, float)) else "")
                rows.setdefault((task, metric, filt or "none"), {})[label] = cell
    lines = ["\t".join(["task", "metric", "filter", *labels])]
    lines += ["\t".join([*key, *(cells.get(label, "") for label in labels)]) for key, cells in sorted(rows.items())]
    return "\n".join(lines) + "\n"

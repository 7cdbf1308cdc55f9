"""The plan of one run (randopt/plan/run.py): what the workflow decides from the config and the host that
builds its DAG, computed once, read by rules/common.smk and by tests without Snakemake."""
from randopt.plan.host import Host, PlanError
from randopt.plan.run import RunPlan

__all__ = ["Host", "PlanError", "RunPlan"]

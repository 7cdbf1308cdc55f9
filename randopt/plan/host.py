"""What the host that builds a run's DAG adds to its plan: where the jobs run, the cores and GPUs the run may
use, and what the GPU and CUDA MPS there are. Plain values, so that a test states a host and reads the plan."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from randopt.runtime import cuda_driver


class PlanError(ValueError):
    """The run cannot be planned on this host as asked (a flag of the command line, not a config key)."""


@dataclass(frozen=True)
class Host:
    """on_cluster: jobs go to a cluster (its submit host, or the Snakemake process inside a job); cores: --cores
    of a local run; gpus: N of --resources gpu=N, None when not given; card_bytes: GPU 0's memory, None
    without CUDA (probed from the CUDA driver by of_workflow, only when a plan needs it); mps_binary, mps_modes, env: what
    randopt/runtime/cuda_mps.py resolve() reads (None: it looks them up on this host)."""
    on_cluster: bool = False
    cores: int | None = 1
    gpus: int | None = None
    card_bytes: int | None = None
    card_model: str | None = None   # GPU 0's name (as torch's get_device_name), None without CUDA; probed as card_bytes
    mps_binary: str | None = None
    mps_modes: tuple[str, ...] | None = None
    env: Mapping[str, str] | None = field(default=None, compare=False)
    probe_card: bool = False   # of_workflow's: read GPU 0's memory when card_bytes is asked for and not given

    @classmethod
    def of_workflow(cls, workflow) -> "Host":
        """This Snakemake run's host: a cluster run has no --cores on its submit host and runs its jobs in
        remote execution mode; --resources gpu=N where given."""
        from snakemake_interface_executor_plugins.settings import ExecMode
        on_cluster = workflow.resource_settings.cores is None or workflow.exec_mode == ExecMode.REMOTE
        gpu = workflow.global_resources.get("gpu")
        # workflow.cores raises on a cluster's submit host (no --cores): a cluster job's CPUs come from the config
        cores = None if on_cluster else workflow.cores
        return cls(on_cluster=on_cluster, cores=cores, gpus=getattr(gpu, "value", gpu), probe_card=True)

    def gpu0_bytes(self) -> int | None:
        """GPU 0's memory: the given card_bytes, or (of_workflow's host) the CUDA driver's reading of this host's
        GPU 0 (randopt/runtime/cuda_driver.py); None where there is no usable CUDA (the engine checks when it
        starts)."""
        if self.card_bytes is not None or not self.probe_card:
            return self.card_bytes
        return cuda_driver.gpu0()[1]

    def gpu0_name(self) -> str | None:
        """GPU 0's name: the given card_model, or (of_workflow's host) the CUDA driver's name of this host's
        GPU 0; None where there is no usable CUDA."""
        if self.card_model is not None or not self.probe_card:
            return self.card_model
        return cuda_driver.gpu0()[0]

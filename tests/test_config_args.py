"""--config KEY=VALUE with a nested value (randopt/config_args.py, read again as YAML by the Snakefile)."""
import pytest

from randopt.config import ConfigError
from randopt.config_args import typed_config_args
from tests.support.workflow import jobs_run, run_workflow, tiny_config


def test_nested_values_are_typed_as_yaml_reads_them():
    typed = typed_config_args(['population={"n_seeds": 48, "sigmas": [0.001, 0.002]}', "run_name=my run",
                               "topk={fractions: [0.5]}", "lm_eval="])
    assert typed == {"population": {"n_seeds": 48, "sigmas": [0.001, 0.002]}, "run_name": "my run",
                     "topk": {"fractions": [0.5]}, "lm_eval": None}
    assert typed_config_args(None) == {} and typed_config_args({"a": 1}) == {}


def test_a_value_that_is_no_yaml_points_to_configfile():
    with pytest.raises(ConfigError, match=r"--config population=\.\.\.: the value is not valid YAML at column \d+ .*"
                                          r"--configfile my\.yaml"):
        typed_config_args(['population={"n_seeds": 48, sigmas: [0.1}'])


@pytest.mark.slow
def test_snakemake_takes_a_nested_integer_from_the_command_line(tmp_path, tiny_model_dir):
    """What failed with 'must be an integer (got "48")': the DAG (a dry run) has the shards of 6 seeds in 3s."""
    proc = run_workflow(tmp_path, tiny_config(tiny_model_dir), "-n", "--config",
                        'population={"n_seeds": 6, "shard_size": 3}')
    assert jobs_run(proc)["evaluate_shard"] == 4   # 2 sigmas x 2 shards of 3 seeds

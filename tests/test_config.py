import re

import pytest

from randopt.config import ConfigError, load_yaml, validate
from tests.conftest import REPO


def test_default_config_validates_and_fills_defaults():
    config = validate(load_yaml(REPO / "config" / "config.yaml"))
    assert config["engine"]["kind"] == "torch"
    assert config["population"]["n_seeds"] * len(config["population"]["sigmas"]) >= 32
    assert config["model"]["trust_remote_code"] is False


@pytest.mark.parametrize("bad, key", [
    ({"populaton": {}}, "(top level)"),
    ({"population": {"sigmas": []}}, "population.sigmas"),
    ({"population": {"sigmas": [0.0]}}, "population.sigmas.0"),
    ({"population": {"sigmas": [-1e-3]}}, "population.sigmas.0"),
    ({"topk": {"fractions": [0.0]}}, "topk.fractions.0"),
    ({"topk": {"fractions": [1.5]}}, "topk.fractions.0"),
    ({"population": {"n_seeds": 2, "sigmas": [1e-3]}, "topk": {"fractions": [0.1]}}, "topk.fractions"),
    ({"model": {"source": "local"}}, "model.path"),
    ({"gsm8k": {"source": "jsonl"}}, "gsm8k.jsonl.path"),
    ({"heldout": {"source": "hub"}}, "heldout.hub.revision"),
    ({"model": {"source": "hub", "id": "Qwen/Qwen2.5-72B-Instruct"}}, "model.revision"),
    ({"model": {"source": "hub", "id": "Qwen/Qwen2.5-72B-Instruct", "revision": "main"}}, "model.revision"),
    ({"gsm8k": {"source": "hub", "hub": {"revision": "v1.0"}}}, "gsm8k.hub.revision"),
    ({"heldout": {"source": "hub", "hub": {"revision": "ABC"}}}, "heldout.hub.revision"),
    ({"engine": {"batch_size": 0}}, "engine.batch_size"),
    ({"decode": {"max_tokens": "many"}}, "decode.max_tokens"),
])
def test_bad_config_names_the_key(bad, key):
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'")):
        validate(bad)


def test_yaml_is_loaded_safely(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("run_name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(Exception, match="could not determine a constructor|ConstructorError"):
        load_yaml(path)

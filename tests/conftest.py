import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHARED_GSM8K = REPO.parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from tests.support.tiny_model import build_tiny_qwen2
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2") / "model")

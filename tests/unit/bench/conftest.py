"""Each bench test gets its own results store."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_store(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path))
    from rapid_llm.kernels.dispatch.dispatcher import clear_cache

    clear_cache()
    yield tmp_path
    clear_cache()

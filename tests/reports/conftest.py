"""Fixtures for the renderer tests; the builders live in synthetic.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from synthetic import make_report


@pytest.fixture
def report() -> dict[str, Any]:
    return make_report(files={"html": "train-20250101-120000.html", "json": "train-20250101-120000.json"})


@pytest.fixture
def report_factory() -> Callable[..., dict[str, Any]]:
    return make_report

"""TEARDOWN_CUPTI is set for each profiler window's life, and only where the user left it unset.

Kineto keeps CUPTI's callbacks on every CUDA launch after a window unless the variable is
"1" (benchmarks/overhead.py measured a launch-bound loop 25% slower outside the windows
without it on an H200, within 1% with it).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from gpudoctor.agent.profiler import _cupti_teardown


def fake_torch(cuda):
    return SimpleNamespace(version=SimpleNamespace(cuda=cuda))


@pytest.fixture(autouse=True)
def no_variable(monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)


def test_set_for_the_window_and_removed_after():
    guard = _cupti_teardown(fake_torch("13.0"))
    with guard:
        assert os.environ["TEARDOWN_CUPTI"] == "1"
    assert "TEARDOWN_CUPTI" not in os.environ


def test_the_users_own_value_is_kept(monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    with _cupti_teardown(fake_torch("12.8")):
        assert os.environ["TEARDOWN_CUPTI"] == "0"
    assert os.environ["TEARDOWN_CUPTI"] == "0"


def test_a_value_set_by_torch_during_the_window_stays():
    """torch.compile with CUDA graphs sets "0" itself: that choice outlives the window."""
    with _cupti_teardown(fake_torch("12.4")):
        os.environ["TEARDOWN_CUPTI"] = "0"
    assert os.environ["TEARDOWN_CUPTI"] == "0"


@pytest.mark.parametrize("cuda", [None, "11.8", "garbage"])
def test_never_set_without_cuda_12(cuda):
    with _cupti_teardown(fake_torch(cuda)):
        assert "TEARDOWN_CUPTI" not in os.environ


def test_leaving_twice_is_harmless():
    guard = _cupti_teardown(fake_torch("13.0"))
    guard.__enter__()
    guard.__exit__(None, None, None)
    os.environ["TEARDOWN_CUPTI"] = "1"  # the user's own, set after the window
    guard.__exit__(None, None, None)
    assert os.environ["TEARDOWN_CUPTI"] == "1"

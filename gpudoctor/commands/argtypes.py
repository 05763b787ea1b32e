"""Argument types shared by the commands: numbers with one-line errors for argparse."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def float_between(low: float, high: float, unit: str = "") -> Callable[[str], float]:
    """An argparse type for a number within [low, high] (a sampling interval of 1e-9 s
    would busy-loop the supervisor; one of a day would take no sample)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}{unit}: {text!r}")
        return value

    return parse


def split_ids(values: list[str]) -> list[str]:
    """--ignore values, repeated or comma-separated, one name each ("GD101, gd102" -> both)."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]

"""Markers shared by test modules (pytest.ini states them all)."""

import importlib.util

import pytest

_NO_LIBTPU = importlib.util.find_spec("libtpu") is None


def needs_libtpu(test):
    """A TPU AOT compile on this host (marker `tpu_aot`), skipped where libtpu is not installed."""
    skip = pytest.mark.skipif(_NO_LIBTPU, reason="AOT compilation for TPU needs libtpu (pip install 'easylemur[tpu]')")
    return pytest.mark.tpu_aot(skip(test))

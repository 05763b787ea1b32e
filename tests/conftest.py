"""Shared pytest setup.

pytest puts this directory on sys.path (rootdir conftest, no __init__.py), so test
modules anywhere under tests/ can `from helpers import make_session, ...`.
"""

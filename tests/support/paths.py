"""Paths of the source tree the tests read (dataset definitions, schemas, compose files)."""

from pathlib import Path

#: The repository root.
REPO_ROOT = Path(__file__).resolve().parents[2]

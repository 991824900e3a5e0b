"""What every settings section shares: the frozen model base and the repository root."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

#: Repository root (``services/ferry/core/section_base.py`` → three levels up from ``services``).
REPO_ROOT = Path(__file__).resolve().parents[3]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

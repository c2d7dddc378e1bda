"""Saved eval reports: what ``ctxmgmt eval --save`` measured, read back by the web page."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine, select

from ..errors import NotFound, StoreError
from .models import eval_reports
from .repository import now_ms

__all__ = ["MAX_REPORT_BYTES", "EvalStore"]

MAX_REPORT_BYTES = 16 << 20
"""A saved report is at most 16 MiB of JSON; a larger one is saved without its per-call figures."""


class EvalStore:
    """Eval reports by id, each stored whole in one row."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def save(self, report: Mapping[str, Any]) -> str:
        """Store a report (``Report.to_dict()``); returns its id. Over MAX_REPORT_BYTES, the
        rows' per-call figures are left out (and ``per_call_omitted`` says so)."""
        body = dict(report)
        if len(json.dumps(body, ensure_ascii=False).encode()) > MAX_REPORT_BYTES:
            body["rows"] = [{**r, "per_call": []} for r in body.get("rows", ())]
            body["per_call_omitted"] = True
            if len(json.dumps(body, ensure_ascii=False).encode()) > MAX_REPORT_BYTES:
                raise StoreError(
                    f"the report is over {MAX_REPORT_BYTES >> 20} MiB even without its per-call figures: "
                    "evaluate fewer conversations at a time"
                )
        report_id = uuid.uuid4().hex
        with self.engine.begin() as conn:
            conn.execute(
                eval_reports.insert().values(report_id=report_id, created_time=now_ms(), report=body)
            )
        return report_id

    def get(self, report_id: str) -> dict[str, Any]:
        """A saved report, with its ``report_id`` and ``created_time``."""
        with self.engine.connect() as conn:
            row = conn.execute(select(eval_reports).where(eval_reports.c.report_id == report_id)).first()
        if row is None:
            raise NotFound(f"no eval report with id {report_id!r}")
        return {"report_id": row.report_id, "created_time": row.created_time, **row.report}

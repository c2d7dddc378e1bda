"""Replay recorded conversations through definitions (ctxmgmt eval)."""

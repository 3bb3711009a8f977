"""Hooks of the runtime plugin."""

from __future__ import annotations

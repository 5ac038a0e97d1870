"""Alias of :func:`pyddstore.util.agree`, the one copy of the "agree, then
raise" rule: kept only for code written before ``pyddstore.util`` existed;
import from ``pyddstore.util``."""

from .util import agree

__all__ = ["agree"]

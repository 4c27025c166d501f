"""Splitting generated text into what the client sees: content, reasoning, tool calls.

The splitting itself belongs to the families (families/codecs/split.py: the family's reasoning
tags and its codec's parser); this module names it for generation."""

from __future__ import annotations

from ..families.codecs.base import Delta, Piece, ReasoningDelta, ToolCallArguments, ToolCallStart
from ..families.codecs.split import Splitter as OutputSplitter

__all__ = ["Delta", "OutputSplitter", "Piece", "ReasoningDelta", "ToolCallArguments", "ToolCallStart"]

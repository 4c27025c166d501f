"""Constraints as GBNF: JSON schemas and tools become grammars; every grammar is checked
before llama.cpp sees it."""

from .gbnf import literal, validate
from .schema import schema_to_gbnf

__all__ = ["literal", "schema_to_gbnf", "validate"]

"""What a model family is: everything localchat knows about one prompt format."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    # Jinja chat template used when the GGUF carries none (same variables as HF templates:
    # messages, add_generation_prompt, bos_token, eos_token).
    template: str
    # Text that ends an assistant turn; generation stops on these tokens.
    stop_tokens: tuple[str, ...]
    # Every control token of the family's vocabulary (also what the test fixtures put in a tiny model).
    control_tokens: tuple[str, ...]
    # Substrings that identify this family's chat template.
    template_markers: tuple[str, ...]
    # GGUF `general.architecture` values that imply this family when nothing else tells.
    architectures: tuple[str, ...] = ()
    bos_token: str = ""
    eos_token: str = ""

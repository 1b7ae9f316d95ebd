"""Prompt skipping (`skip_degenerate_prompts=True`): prompts predicted degenerate are skipped before generation."""

from .skipper import PromptSkipper

__all__ = ["PromptSkipper"]

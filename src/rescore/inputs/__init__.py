"""Input generation: every strategy is a pure function of (schema, dtype, seed)."""

from rescore.inputs.strategies import STRATEGIES, CaseSpec, Strategy, get_strategy

__all__ = ["STRATEGIES", "CaseSpec", "Strategy", "get_strategy"]

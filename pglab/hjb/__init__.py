"""Ground truth for continuous-time models: finite-difference HJB solutions."""

from pglab.hjb.fd import FDSolution, solve_hjb_1d, solve_hjb_1d_extrapolated

__all__ = ["FDSolution", "solve_hjb_1d", "solve_hjb_1d_extrapolated"]

"""The batch service-time formula, compiled: the one implementation of T(B).

The simulators call :func:`batch_time_s` per batch; ``LatencyModel.batch_time_s`` runs it over
arrays through :func:`batch_times_s`, and ``latency.model.attention_pairs`` runs
:func:`attention_pairs`' Python source under numpy. ``LatencyModel.batch_terms_s`` splits T(B)
into its six terms for the report (a breakdown, not a second T: a test checks that the terms
sum to it).

DESIGN.md, Latency model (batched). For a batch ``B`` of requests:

    T(B) = t_launch_s                                   kernel launches of one forward pass
         + n_req · t_request_s                          per-request host/runtime overhead
         + max(weight_read_s,                           weights streamed once per batch
               dense_s_per_token · (X + mfu_half_tokens)   dense GEMMs (small X underfills tiles)
               + attn_s_per_pair · P)                   attention
         + lookup_bytes / hbm_bw_Bps                    EMB gathers from HBM
         + [miss_bytes > 0] · h2d_latency_s             one H2D transfer per batch
         + Σ_i miss_bytes_i / (h2d_bw_Bps · share_i)    copy over the link (share < 1 beside a refill)
         + miss_bytes / host_gather_Bps                 host DRAM gather

    X = Σ_i (n_i + M_i)                                 tokens through the dense stack
    P = Σ_i [n_i·L_i − n_i(n_i − 1)/2 + M_i·L_i]        causal prefill pairs + candidate pairs

``dense_s_per_token · (X + h)`` is ``dense_s_per_token · X / eff(X)`` with the
efficiency curve ``eff(X) = X / (X + h)``: a batch of few tokens cannot fill
the GEMM tiles. ``coeffs`` is a float64 array in :data:`COEFFS` order
(``LatencyModel.coeffs``).
"""

from __future__ import annotations

import numba as nb

COEFFS = (
    "t_launch_s",
    "t_request_s",
    "weight_read_s",
    "dense_s_per_token",
    "mfu_half_tokens",
    "attn_s_per_pair",
    "hbm_bw_Bps",
    "h2d_bw_Bps",
    "h2d_latency_s",
    "host_gather_Bps",
)
"""Names of the coefficient array's entries, in order."""


@nb.njit(cache=True, inline="always")
def attention_pairs(n: float, L: float, M: float) -> float:
    """Causal pairs of computing the last ``n`` of ``L`` context tokens, plus ``M·L`` candidate pairs."""
    return n * L - n * (n - 1.0) / 2.0 + M * L


@nb.njit(cache=True)
def batch_time_s(c, n_req, tokens, pairs, lookup_bytes, miss_bytes, miss_bytes_over_share):  # noqa: ANN001, ANN201
    """T(B) in seconds from a batch's sums (see the module docstring)."""
    compute = c[3] * (tokens + c[4]) + c[5] * pairs
    if c[2] > compute:
        compute = c[2]
    h2d = miss_bytes_over_share / c[7] + miss_bytes / c[9]
    if miss_bytes > 0:
        h2d += c[8]
    return c[0] + n_req * c[1] + compute + lookup_bytes / c[6] + h2d


@nb.njit(cache=True)
def batch_times_s(c, n_req, tokens, pairs, lookup_bytes, miss_bytes, miss_bytes_over_share, out):  # noqa: ANN001, ANN201
    """T(B) of every batch of 1-D float64 sums into ``out``: :func:`batch_time_s` over arrays."""
    for i in range(out.shape[0]):
        out[i] = batch_time_s(c, n_req[i], tokens[i], pairs[i], lookup_bytes[i], miss_bytes[i],
                              miss_bytes_over_share[i])  # fmt: skip
    return out

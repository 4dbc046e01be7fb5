"""The learned ranker's weights (``actors/_retrieval/ranker.py``), one per feature
of ``FEATURES``, in its order. Written by ``benches/train_ranker.py`` (pairwise
logistic refined on LambdaRank's gradients, fitted on every LoCoMo dev
conversation); do not edit by hand."""

from __future__ import annotations

__all__ = ["WEIGHTS"]

WEIGHTS: tuple[float, ...] = (
    -0.588303,  # fused
    1.35137,  # boosted
    0.116116,  # rank
    1.27699,  # cosine
    4.02845,  # cosine_gap
    0.0156217,  # dense_rank
    2.79968,  # bm25
    0.152175,  # bm25_rank
    -0.291845,  # agree
    2.1958,  # neighbor
    -0.159124,  # next_to_top
    0.510119,  # speaker
    -1.27958,  # other_speaker
    3.59898,  # date_near
    -6.73111,  # date_far
    -0.297878,  # link
    0.62544,  # link_terms
    0.688331,  # length
    1.56344,  # coverage
)

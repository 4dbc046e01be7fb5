"""The learned ranker's weights (``actors/_retrieval/ranker.py``), one per feature
of ``FEATURES``, in its order. Written by ``benches/train_ranker.py`` (pairwise
logistic refined on LambdaRank's gradients, fitted on every LoCoMo dev
conversation, MiniLM int8 and fp32 pooled); do not edit by hand.
"""

from __future__ import annotations

__all__ = ["WEIGHTS"]

WEIGHTS: tuple[float, ...] = (
    -0.0444898,  # fused
    1.17825,  # boosted
    0.208338,  # rank
    0.958746,  # cosine
    4.81602,  # cosine_gap
    0.00762598,  # dense_rank
    2.96702,  # bm25
    0.142489,  # bm25_rank
    -0.375591,  # agree
    1.67764,  # neighbor
    -0.388328,  # previous
    0.0664072,  # following
    -0.24643,  # next_to_top
    0.601351,  # speaker
    -1.48715,  # other_speaker
    -1.31504,  # asks_named
    3.96948,  # date_near
    -7.49271,  # date_far
    -0.21257,  # link
    0.608143,  # link_terms
    0.636304,  # length
    0.679733,  # coverage
    -0.442606,  # question
    0.87632,  # when_time
    -0.396126,  # day_peers
    1.28755,  # day_best
    -0.432085,  # when*fused
    -1.53028,  # when*boosted
    -0.697357,  # when*rank
    3.21229,  # when*cosine
    -2.10372,  # when*cosine_gap
    -0.0548501,  # when*dense_rank
    1.22923,  # when*bm25
    0.111815,  # when*bm25_rank
    0.591124,  # when*agree
    0.232159,  # when*neighbor
    -2.37482,  # when*previous
    -0.311291,  # when*following
    0.397382,  # when*next_to_top
    0.347184,  # when*speaker
    1.03708,  # when*other_speaker
    1.26065,  # when*asks_named
    1.22019,  # when*date_near
    -3.33623,  # when*date_far
    -0.499556,  # when*link
    0.506101,  # when*link_terms
    -0.386167,  # when*length
    2.12997,  # when*coverage
    -0.0101215,  # when*question
    0.87632,  # when*when_time
    0.862384,  # when*day_peers
    -0.506776,  # when*day_best
)

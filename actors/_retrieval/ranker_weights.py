"""The learned ranker's weights (``actors/_retrieval/ranker.py``), one per feature
of ``FEATURES``, in its order. Written by ``benches/train_ranker.py`` (pairwise
logistic refined on LambdaRank's gradients, fitted on every LoCoMo dev
conversation, MiniLM int8 and fp32 pooled); do not edit by hand.
"""

from __future__ import annotations

__all__ = ["WEIGHTS"]

WEIGHTS: tuple[float, ...] = (
    -0.0656271,  # fused
    1.364,  # boosted
    0.265797,  # rank
    0.899643,  # cosine
    4.94058,  # cosine_gap
    0.0659208,  # dense_rank
    2.93089,  # bm25
    0.167046,  # bm25_rank
    -0.354238,  # agree
    2.17529,  # neighbor
    -0.43805,  # previous
    -0.0503811,  # following
    -0.0782789,  # next_to_top
    0.542646,  # speaker
    -1.34879,  # other_speaker
    -1.28488,  # asks_named
    3.9438,  # date_near
    -7.5789,  # date_far
    -0.313139,  # link
    0.72403,  # link_terms
    0.647851,  # length
    0.561358,  # coverage
    -0.439168,  # question
    0.89257,  # when_time
    -1.10882,  # when*fused
    -1.28978,  # when*boosted
    -0.668741,  # when*rank
    2.85619,  # when*cosine
    -2.19102,  # when*cosine_gap
    -0.154184,  # when*dense_rank
    0.994763,  # when*bm25
    0.0618141,  # when*bm25_rank
    0.949039,  # when*agree
    0.883751,  # when*neighbor
    -2.11851,  # when*previous
    0.328271,  # when*following
    0.100086,  # when*next_to_top
    0.274848,  # when*speaker
    1.14884,  # when*other_speaker
    1.57422,  # when*asks_named
    1.06412,  # when*date_near
    -4.18151,  # when*date_far
    0.0129136,  # when*link
    -0.225579,  # when*link_terms
    -0.368058,  # when*length
    1.55729,  # when*coverage
    -0.0521354,  # when*question
    0.89257,  # when*when_time
)

"""The learned ranker's weights (``actors/_retrieval/ranker.py``), one per feature
of ``FEATURES``, in its order. Written by ``benches/train_ranker.py`` (pairwise
logistic refined on LambdaRank's gradients, fitted on every LoCoMo dev
conversation, MiniLM int8 and fp32 pooled); do not edit by hand.
"""

from __future__ import annotations

__all__ = ["WEIGHTS"]

WEIGHTS: tuple[float, ...] = (
    -0.061406,  # fused
    1.38831,  # boosted
    0.285716,  # rank
    0.827725,  # cosine
    4.92316,  # cosine_gap
    0.057251,  # dense_rank
    2.92899,  # bm25
    0.165104,  # bm25_rank
    -0.367272,  # agree
    2.19982,  # neighbor
    -0.447378,  # previous
    -0.0779935,  # following
    -0.073123,  # next_to_top
    0.57624,  # speaker
    -1.47366,  # other_speaker
    3.95004,  # date_near
    -7.56968,  # date_far
    -0.294829,  # link
    0.710329,  # link_terms
    0.641931,  # length
    0.619785,  # coverage
    -0.476699,  # question
    0.885237,  # when_time
    -1.16782,  # when*fused
    -1.3661,  # when*boosted
    -0.7078,  # when*rank
    3.2608,  # when*cosine
    -2.41172,  # when*cosine_gap
    -0.150106,  # when*dense_rank
    0.897482,  # when*bm25
    0.044585,  # when*bm25_rank
    0.969832,  # when*agree
    0.935384,  # when*neighbor
    -2.11547,  # when*previous
    0.369889,  # when*following
    0.110133,  # when*next_to_top
    0.32257,  # when*speaker
    1.40621,  # when*other_speaker
    1.04478,  # when*date_near
    -4.25554,  # when*date_far
    -0.00377654,  # when*link
    -0.224269,  # when*link_terms
    -0.346016,  # when*length
    1.52758,  # when*coverage
    0.0133437,  # when*question
    0.885237,  # when*when_time
)

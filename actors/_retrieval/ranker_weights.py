"""The learned ranker's weights (``actors/_retrieval/ranker.py``), one per feature
of ``FEATURES``, in its order. Written by ``benches/train_ranker.py`` (pairwise
logistic refined on LambdaRank's gradients, fitted on every LoCoMo dev
conversation); do not edit by hand."""

from __future__ import annotations

__all__ = ["WEIGHTS"]

WEIGHTS: tuple[float, ...] = (
    -0.581445,  # fused
    1.74092,  # boosted
    0.24392,  # rank
    0.988682,  # cosine
    5.08493,  # cosine_gap
    0.0956826,  # dense_rank
    2.98697,  # bm25
    0.17426,  # bm25_rank
    -0.383593,  # agree
    2.17454,  # neighbor
    -0.434246,  # previous
    -0.0553611,  # following
    -0.046052,  # next_to_top
    0.413443,  # speaker
    -1.24524,  # other_speaker
    3.44694,  # date_near
    -6.55331,  # date_far
    -0.480221,  # link
    0.852885,  # link_terms
    0.636237,  # length
    0.548343,  # coverage
    -0.518894,  # question
    0.928616,  # when_time
    0.0886276,  # when*fused
    -2.22768,  # when*boosted
    -0.802357,  # when*rank
    2.98913,  # when*cosine
    -4.42157,  # when*cosine_gap
    -0.306037,  # when*dense_rank
    1.14522,  # when*bm25
    0.202358,  # when*bm25_rank
    1.101,  # when*agree
    0.570793,  # when*neighbor
    -2.0486,  # when*previous
    0.166765,  # when*following
    0.4022,  # when*next_to_top
    0.557742,  # when*speaker
    0.971334,  # when*other_speaker
    1.09819,  # when*date_near
    -4.41095,  # when*date_far
    0.420001,  # when*link
    -0.548172,  # when*link_terms
    -0.493215,  # when*length
    2.60851,  # when*coverage
    0.022031,  # when*question
    0.928616,  # when*when_time
)

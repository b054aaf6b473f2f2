"""Check the suite's float32 divergences against Hugging Face transformers itself.

Run in an environment with torch and transformers (never needed by the library or its tests)::

    python tools/hf_float32_divergences.py vectors/v3

For every ``rope.cos_sin.long.*`` case it builds ``LlamaRotaryEmbedding`` from the case's
parameters, evaluates it in float32 at the divergence's positions, and prints the largest
difference from each listed float32 divergence. A divergence named "Hugging Face" must equal
transformers' tables to one float32 step (``2**-24``, tables are at most 1 in magnitude, so one
step of the table values); the exit status is 1 if one does not. The others (named "float32
pipeline ...") are printed for the record: docs/golden-format.md quotes them.
"""

from __future__ import annotations

import glob
import json
import sys

import numpy as np
import torch
import transformers
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

ONE_STEP = 2.0 ** -24


def hf_cos(params: dict, positions: np.ndarray) -> np.ndarray:
    """transformers' float32 cos table (per pair) for a case's parameters at ``positions``."""
    scaling = dict(params["scaling"] or {})
    rope = {"rope_type": scaling.pop("rope_type", "default"), "rope_theta": params["base"], **scaling}
    if params["rotary_dim"] != params["head_dim"] and "partial_rotary_factor" not in rope:
        rope["partial_rotary_factor"] = params["rotary_dim"] / params["head_dim"]
    kw = {"hidden_size": params["head_dim"] * 4, "num_attention_heads": 4, "head_dim": params["head_dim"],
          "rope_parameters": rope}
    if params.get("max_position_embeddings"):
        kw["max_position_embeddings"] = params["max_position_embeddings"]
    elif "original_max_position_embeddings" in scaling:
        kw["max_position_embeddings"] = int(scaling["original_max_position_embeddings"] * scaling.get("factor", 1))
    emb = LlamaRotaryEmbedding(LlamaConfig(**kw))
    cos, _ = emb(torch.zeros(1, 1), torch.tensor(positions, dtype=torch.int64)[None])
    return cos[0].numpy().astype(np.float64)


def main(suite: str) -> int:
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    bad = 0
    for path in sorted(glob.glob(f"{suite}/rope.cos_sin.long.*.json")):
        doc = json.load(open(path, encoding="utf-8"))
        for dv in doc["known_divergences"]:
            if "float32" not in dv["implementation"]:
                continue
            pos, cos = (np.array(a["data"]).reshape(a["shape"]) for a in (dv["inputs"]["positions"],
                                                                           dv["outputs"]["cos"]))
            try:
                diff = float(np.max(np.abs(cos - hf_cos(doc["params"], pos)[..., :cos.shape[-1]])))
            except KeyError as exc:  # a rope_type transformers does not have (ntk)
                diff, note = float("nan"), f"transformers has no rope_type {exc}"
            else:
                note = ""
            named = dv["implementation"].startswith("Hugging Face")
            verdict = ("ok" if diff <= ONE_STEP else "NOT transformers' values") if named else "recipe"
            bad += named and not diff <= ONE_STEP
            print(f"{doc['name']:56s} {dv['implementation'][:28]:28s} max |div - transformers| = {diff:.3g}  "
                  f"{verdict} {note}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "vectors/v3"))

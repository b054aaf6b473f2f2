"""The per-dtype tolerances do what docs/golden-format.md says, proved on the committed suite with
implementations that do not come from the golden code:

* float64 admits an ordinary float64 implementation at every recorded position (a plain NumPy
  few-liner: float64 ``1 / base ** (arange / d)``, float64 ``p * w``, libm cos/sin; and
  ``posenc_np.precision``'s ``float64-direct`` recipe for the scaled types);
* each dtype admits a correct implementation in it (exact tables rounded once, the rotation in
  that dtype: ``posenc_np.precision``'s ``exact-*`` recipes and ``rotate``);
* float32 rejects the float32-angle recipes (Hugging Face / Meta / llama.cpp, emulated bit for
  bit by ``posenc_np.precision``) on every RoPE case, long-context ones included, and bfloat16
  rejects the reduced-precision angle recipes (and Hugging Face's float32 angles at long context);
* the recorded known divergences are real (outside the tolerance of the dtype they are in).
"""

import json

import numpy as np
import pytest
from _golden_util import REPO

from posenc_np import precision as P
from posenc_np.golden import cases_rope, catalogue

SUITE = REPO / "vectors" / "v3"
TABLES = [s.name for s in catalogue.cases(["rope.cos_sin.*"])]
APPLY = [s.name for s in catalogue.cases(["rope.apply.*"])]
LONG = [n for n in TABLES + APPLY if ".long." in n]


def load(name: str) -> dict:
    doc = json.loads((SUITE / f"{name}.json").read_text())
    for group in ("inputs", "outputs"):
        doc[group] = {k: np.array(v["data"], dtype=v["dtype"]).reshape(v["shape"]) for k, v in doc[group].items()}
    return doc


def outside(actual, expected, tol) -> int:
    """How many values fail |a - e| <= abs + rel |e|."""
    err = np.abs(np.asarray(actual, dtype=np.float64) - expected)
    return int(np.sum(~(err <= tol["abs"] + tol["rel"] * np.abs(expected))))


def per_pair(table, params):
    """The per-pair view of a table in the case's layout."""
    n = params["rotary_dim"] // 2
    return table[..., :n] if params["layout"] == "half" else table[..., 0:2 * n:2]


def in_layout(pairs, params):
    return np.concatenate([pairs, pairs], -1) if params["layout"] == "half" else np.repeat(pairs, 2, axis=-1)


def rotate(x, c, s, params, dtype, positions_ndim):
    """y = R x in ``dtype`` arithmetic (precision.rotate), tail channels copied; tables per pair."""
    n = params["rotary_dim"] // 2
    if x.ndim - 1 == positions_ndim + 1 and positions_ndim > 1:
        c, s = c[..., None, :, :], s[..., None, :, :]
    ia, ib = (np.arange(n), np.arange(n, 2 * n)) if params["layout"] == "half" else (np.arange(0, 2 * n, 2),
                                                                                   np.arange(1, 2 * n, 2))
    stored = P.round_to(x, dtype).astype(np.float64)
    a, b = P.round_to(stored[..., ia], dtype), P.round_to(stored[..., ib], dtype)
    ya, yb = P.rotate(a, b, np.broadcast_to(c, a.shape), np.broadcast_to(s, a.shape), dtype)
    y = stored.copy()
    y[..., ia], y[..., ib] = ya, yb
    return y


def ordinary_float64_tables(params, positions):
    """The few-liner: float64 frequencies, float64 products, libm cos/sin (plain RoPE only)."""
    d, base = params["rotary_dim"], params["base"]
    angles = np.asarray(positions, dtype=np.float64)[..., None] * (1.0 / base ** (np.arange(0, d, 2) / d))
    return np.cos(angles), np.sin(angles)


# --------------------------------------------------------------------------- float64

@pytest.mark.parametrize("name", TABLES + APPLY)
def test_float64_tolerance_admits_an_ordinary_float64_implementation(name):
    doc = load(name)
    p, pos, tol = doc["params"], doc["inputs"]["positions"], doc["tolerances"]["float64"]
    implementations = {"float64-direct": P.recipe_tables("float64-direct", cases_rope.precision_setup(p), pos)}
    if p["scaling"] is None:
        implementations["numpy few-liner"] = ordinary_float64_tables(p, pos)
    for who, (c, s) in implementations.items():
        if doc["encoding"] == "rope.cos_sin":
            assert outside(in_layout(c, p), doc["outputs"]["cos"], tol) == 0, who
            assert outside(in_layout(s, p), doc["outputs"]["sin"], tol) == 0, who
        else:
            for key, sign in (("y", 1), ("dx", -1)):
                x = doc["inputs"]["x" if key == "y" else "dy"]
                assert outside(rotate(x, c, sign * s, p, "float64", pos.ndim), doc["outputs"][key], tol) == 0, who


@pytest.mark.parametrize("name", [s.name for s in catalogue.cases(["sinusoidal.*"])])
def test_float64_tolerance_admits_an_ordinary_sinusoidal(name):
    doc = load(name)
    d, base, layout = doc["params"]["dim"], doc["params"]["base"], doc["params"]["layout"]
    angles = doc["inputs"]["positions"].astype(np.float64)[..., None] / base ** (np.arange(0, d, 2) / d)
    s, c = np.sin(angles), np.cos(angles)
    pe = np.stack([s, c], -1).reshape(angles.shape[:-1] + (d,)) if layout == "interleaved" else np.concatenate([s, c], -1)
    assert outside(pe, doc["outputs"]["encoding"], doc["tolerances"]["float64"]) == 0


# --------------------------------------------------------------------------- correct implementations per dtype

@pytest.mark.parametrize("name", TABLES + APPLY)
def test_every_dtype_admits_a_correct_implementation_in_it(name):
    doc = load(name)
    p, pos = doc["params"], doc["inputs"]["positions"]
    setup = cases_rope.precision_setup(p)
    for dtype, tol in doc["tolerances"].items():
        c, s = P.recipe_tables(f"exact-{dtype}", setup, pos)  # exact tables rounded once to dtype
        if doc["encoding"] == "rope.cos_sin":
            assert outside(in_layout(c, p), doc["outputs"]["cos"], tol) == 0, dtype
            assert outside(in_layout(s, p), doc["outputs"]["sin"], tol) == 0, dtype
            if dtype != "float64":  # angles in float64 (the ordinary ones), the value rounded once
                c64, _ = P.recipe_tables("float64-direct", setup, pos)
                assert outside(in_layout(P.round_to(c64, dtype), p), doc["outputs"]["cos"], tol) == 0, dtype
        else:
            for key, sign in (("y", 1), ("dx", -1)):
                x = doc["inputs"]["x" if key == "y" else "dy"]
                assert outside(rotate(x, c, sign * s, p, dtype, pos.ndim), doc["outputs"][key], tol) == 0, dtype


# --------------------------------------------------------------------------- rejected recipes

def _recipe_outside(name: str, recipe: str, dtype: str) -> int:
    doc = load(name)
    p, pos, tol = doc["params"], doc["inputs"]["positions"], doc["tolerances"][dtype]
    with np.errstate(invalid="ignore", over="ignore"):  # float16 positions past 65504 overflow
        c, s = P.recipe_tables(recipe, cases_rope.precision_setup(p), pos)
    c, s = np.nan_to_num(c, nan=np.inf), np.nan_to_num(s, nan=np.inf)
    if doc["encoding"] == "rope.cos_sin":
        return outside(in_layout(c, p), doc["outputs"]["cos"], tol) + outside(in_layout(s, p), doc["outputs"]["sin"],
                                                                                tol)
    return sum(outside(rotate(doc["inputs"][src], c, sign * s, p, dtype, pos.ndim), doc["outputs"][key], tol)
               for key, src, sign in (("y", "x", 1), ("dx", "dy", -1)))


def _emulated(name: str, recipe: str) -> bool:
    if not recipe.startswith("llama.cpp"):
        return True
    return P._llama_cpp_params(cases_rope.precision_setup(load(name)["params"])) is not None


@pytest.mark.parametrize("recipe", ["hf-float32>float32", "meta-complex64>float32", "llama.cpp>float32"])
def test_float32_tolerance_rejects_the_float32_angle_recipes(recipe):
    """Rejected on every table and every rotation case but one: rope.apply.half.d8, whose vectors at
    its largest position (2047) are small enough that the recipe's 1.5e-6 table error stays within
    the rotation bound (6.1e-7 against 9.2e-7). Every long-context case rejects it."""
    names = [n for n in TABLES + APPLY if _emulated(n, recipe)]
    admitted = [n for n in names if _recipe_outside(n, recipe, "float32") == 0]
    assert admitted == ["rope.apply.half.d8"], admitted
    assert set(LONG) & set(names) and len(names) >= (len(TABLES + APPLY) if recipe.startswith("hf") else 10)


@pytest.mark.parametrize("recipe", ["angles-bfloat16", "hf-positions-bfloat16", "hf-inv_freq-bfloat16"])
def test_bfloat16_tolerance_rejects_reduced_precision_angles_on_every_table(recipe):
    """Every table, except that rounding the positions to bfloat16 changes nothing on a table whose
    positions bfloat16 holds exactly (rope.cos_sin.half.longrope.d16.seq2048: 0, 1, 7, 100, 1000)."""
    def exact_in_bfloat16(n):
        pos = np.asarray(load(n)["inputs"]["positions"], dtype=np.float64)
        return recipe == "hf-positions-bfloat16" and np.array_equal(P.round_to(pos, "bfloat16"), pos)

    admitted = [n for n in TABLES if _recipe_outside(n, recipe, "bfloat16") == 0]
    assert admitted == [n for n in TABLES if exact_in_bfloat16(n)]
    assert len(admitted) <= 1


def test_bfloat16_tolerance_rejects_float32_angles_on_long_context_tables():
    """Hugging Face's float32 angles cast to bfloat16 are within bfloat16's resolution at short
    positions (up to 65535 with d = 16), and rejected on every long-context table reaching 32768."""
    rejected = {n for n in TABLES if _recipe_outside(n, "hf-float32>bfloat16", "bfloat16")}
    far = {n for n in LONG if n in TABLES and load(n)["inputs"]["positions"].max() >= 32768}
    assert far and far <= rejected
    assert "rope.cos_sin.half.d8.int" not in rejected  # positions below 4096: admitted


def test_inv_freq_float32_tolerance_admits_rounding_once_and_rejects_the_float32_recipe():
    rejected, emulated_cases = [], 0
    for name in [s.name for s in catalogue.cases(["rope.inv_freq.*"])]:
        doc = load(name)
        setup, tol = cases_rope.precision_setup(doc["params"]), doc["tolerances"]["float32"]
        exact = doc["outputs"]["inv_freq"]
        assert outside(P.round_to(exact, "float32"), exact, tol) == 0
        hf, emulated = P.hf_inv_freq(setup)
        emulated_cases += emulated
        if emulated and outside(hf, exact, tol):
            rejected.append(name)
    assert len(rejected) == emulated_cases == 23  # version 3: 20 of version 2, two partial-rotary, llama3.d64_f4


# --------------------------------------------------------------------------- known divergences are real

def test_known_divergences_are_outside_the_tolerance_of_their_dtype():
    seen = 0
    for spec in catalogue.cases():
        doc = load(spec.name) if spec.known_divergences else None
        for div in spec.known_divergences:
            seen += 1
            float32 = "float32" in div["implementation"]
            tol = doc["tolerances"]["float32" if float32 and "float32" in doc["tolerances"] else "float64"]
            if spec.encoding == "rope.cos_sin":
                rows = np.searchsorted(doc["inputs"]["positions"], div["inputs"]["positions"])
                assert outside(div["outputs"]["cos"], doc["outputs"]["cos"][rows], tol) > 0, spec.name
            elif spec.encoding == "alibi.slopes":
                assert outside(div["outputs"]["slopes"], doc["outputs"]["slopes"][div["inputs"]["heads"]], tol) > 0
            else:  # buckets: integers, any difference is one
                key = next(iter(div["inputs"]))
                rows = np.searchsorted(doc["inputs"][key], div["inputs"][key])
                assert np.all(div["outputs"]["bucket"] != doc["outputs"]["bucket"][rows]), spec.name
    assert seen >= 20

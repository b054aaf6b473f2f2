"""The papers' claims, each judged pairwise against the paper's own comparison set.

A claim is a list of *conditions* (a task and an evaluation length, a length, an encoding and a
task, ...), each a set of *comparisons* (:class:`Comparison`): two encodings, two scaling
methods, or one model at two lengths, tested as :mod:`.stats` describes. Holm's correction runs
over every test of a claim. A comparison *supports* the claim, *contradicts* it (the other side
is clearly better), or is *open*.

A condition is

* **gated out** when a model it involves did not learn at the training length: for tasks,
  every seed of every encoding involved must reach ``fit_accuracy`` token accuracy at L; for
  the language model, every seed must beat the n-gram baseline's perplexity at L by
  ``lm_gate`` (15 %);
* for a claim of kind ``all`` ("best", "at least as good as", "does not rise"): *yes* when
  every comparison supports, *no* when any contradicts (one clearly better competitor
  falsifies "best"), else *open*;
* for a claim of kind ``each`` ("better than each of ..."): *yes* when every comparison
  supports, *mixed* when some support and some contradict, *no* when some contradict and
  none supports, else *open*.

The verdict over the conditions that were not gated out:

``reproduces``
    every condition *yes*;
``does not reproduce``
    some condition *no* and none *yes* or *mixed*;
``mixed``
    some condition *yes* or *mixed* and some *no*, or a *mixed* condition;
``not resolved``
    otherwise (some comparisons open);
``not tested at this scale``
    every condition gated out (the models did not learn what the claim is about);
``not tested``
    the run lacks the cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .config import NGRAM
from .stats import ALPHA, MEASURES, Test, fmt, holm, paired, welch

if TYPE_CHECKING:
    from .report import Results

__all__ = ["Claim", "Comparison", "claim_rows", "section_claims"]

YES, NO, MIXED, OPEN = "reproduces", "does not reproduce", "mixed", "not resolved"
AT_SCALE, UNTESTED = "not tested at this scale", "not tested"
VERDICTS = (YES, NO, MIXED, OPEN, AT_SCALE, UNTESTED)


@dataclass
class Comparison:
    """One test of a claim: ``test`` of first minus second on ``measure``'s scale; ``sign`` +1 when
    the claim says the difference is positive, -1 negative; ``kind`` ``superior`` (clearly better
    by at least the measure's delta) or ``noninferior`` (not worse by delta or more).

    Examples
    --------
    >>> from posenc_np.study.claims import Comparison
    >>> from posenc_np.study.stats import welch
    >>> c = Comparison("rope vs alibi", welch([0.9, 0.92, 0.94], [0.5, 0.52, 0.54], "accuracy"), "accuracy", +1)
    >>> round(c.effect, 6), c.outcome           # 0.4 >= delta 0.15, but no Holm-adjusted p-value yet
    (0.4, 'open')
    >>> c.p_adj = {"zero": c.pvalues()["zero"]}     # a family of one test: Holm keeps p (t = 24.5, df = 4)
    >>> c.p_adj["zero"] < 0.05, c.outcome
    (True, 'support')
    >>> Comparison("rope vs t5", None, "accuracy", +1).outcome       # no cells to compare
    'missing'
    """

    text: str
    test: Test | None
    measure: str
    sign: int
    kind: str = "superior"
    p_adj: dict = field(default_factory=dict)

    def pvalues(self) -> dict:
        """The raw p-values this comparison contributes to the claim's family."""
        if self.test is None:
            return {}
        t = self.test
        out = {"zero": t.p_two_sided()}
        if self.kind == "noninferior":  # H0: worse by the margin or more (in the claim's direction)
            m = MEASURES[self.measure].margin
            signed = Test(self.sign * t.diff, t.se, t.df, t.n)
            out["margin"] = signed.p_greater(-m)
        return out

    @property
    def effect(self) -> float:
        return self.sign * self.test.diff

    @property
    def outcome(self) -> str:
        """``support`` / ``contradict`` / ``open`` (``missing`` without a test)."""
        if self.test is None:
            return "missing"
        m = MEASURES[self.measure].margin
        clear = self.p_adj.get("zero", 1.0) < ALPHA
        if clear and self.effect <= -m:
            return "contradict"
        if self.kind == "noninferior":
            return "support" if self.p_adj.get("margin", 1.0) < ALPHA else "open"
        return "support" if clear and self.effect >= m else "open"


@dataclass
class Condition:
    name: str
    comparisons: list
    gate: list = field(default_factory=list)  # reasons the condition is gated out

    def state(self, kind: str) -> str:
        if self.gate:
            return "gated"
        outs = [c.outcome for c in self.comparisons if c.outcome != "missing"]
        if not outs:
            return "missing"
        if all(o == "support" for o in outs):
            return "yes"
        if kind == "all":
            return "no" if "contradict" in outs else "open"
        if "contradict" in outs:
            return "mixed" if "support" in outs else "no"
        return "open"


@dataclass
class Claim:
    """A paper's claim: its ``source``, the ``claim`` in words, its ``kind`` (``all`` or ``each``, see
    the module docstring), the ``conditions`` it is judged under and a ``note``; :meth:`judge` gives the verdict.

    Examples
    --------
    >>> from posenc_np.study.claims import Claim, Comparison, Condition
    >>> from posenc_np.study.stats import welch
    >>> clear = Comparison("rope vs alibi", welch([0.9, 0.92, 0.94], [0.5, 0.52, 0.54], "accuracy"), "accuracy", +1)
    >>> close = Comparison("rope vs t5", welch([0.9, 0.92, 0.94], [0.88, 0.9, 0.95], "accuracy"), "accuracy", +1)
    >>> Claim("a paper", "rope beats alibi on copy at 2L", "all", [Condition("copy 2L", [clear])]).judge()
    'reproduces'
    >>> claim = Claim("a paper", "rope beats alibi and t5 on copy at 2L", "each",
    ...               [Condition("copy 2L", [clear, close])])
    >>> claim.judge(), claim.evidence()        # rope and t5 are within the noise: open
    ('not resolved', 'copy 2L: rope vs alibi (support), rope vs t5 (open)')
    """

    source: str
    claim: str
    kind: str  # "all" or "each"
    conditions: list
    note: str = ""

    def judge(self) -> str:
        live = [c for c in self.conditions if not c.gate]
        tests = [(c, k, p) for cond in live for c in cond.comparisons for k, p in c.pvalues().items()]
        for (c, k, _), q in zip(tests, holm([p for _, _, p in tests])):
            c.p_adj[k] = q
        states = [c.state(self.kind) for c in self.conditions]
        judged = [s for s in states if s not in ("gated", "missing")]
        if not judged:
            return AT_SCALE if "gated" in states else UNTESTED
        if all(s == "yes" for s in judged):
            return YES
        if "mixed" in judged or ("yes" in judged and "no" in judged):
            return MIXED
        if "no" in judged:
            return NO
        return OPEN

    def evidence(self) -> str:
        parts, gates = [], {}
        for cond in self.conditions:
            if cond.gate:
                gates.setdefault("; ".join(cond.gate), []).append(cond.name)
                continue
            shown = [f"{c.text} ({c.outcome})" for c in cond.comparisons if c.test is not None]
            parts.append(f"{cond.name}: " + (", ".join(shown) if shown else "no cells"))
        parts += [f"{', '.join(names)}: not tested at this scale ({why})" for why, names in gates.items()]
        text = "; ".join(parts)
        return f"{text}. {self.note}" if text and self.note else text or self.note


def _untested(source, claim, why) -> Claim:
    return Claim(source, claim, "all", [], note=why)


# --------------------------------------------------------------------------- gates

def _task_gate(R, option, task, labels) -> list[str]:
    """Reasons why a task condition is gated out: an encoding with a seed below ``fit_accuracy`` at L."""
    first = R.cfg["eval_factors"][0]
    threshold = R.cfg.get("fit_accuracy", 0.9)
    reasons = []
    for lab in labels:
        vals = R.values("tasks", "token_accuracy", training=option, label=lab, task=task, eval_factor=first)
        bad = sorted(s for s, v in vals.items() if v is None or v < threshold)
        if bad:
            reasons.append(f"{lab} ({option}) below {threshold:g} at L in seed(s) {', '.join(map(str, bad))}")
    return reasons


def _ngram_ppl(R):
    vals = R.values("lm", "ppl", encoding=NGRAM, eval_mode="sliding", eval_factor=R.cfg["lm_eval_factors"][0])
    return next(iter(vals.values()), None)


def _lm_gate(R, labels, part="lm") -> list[str]:
    """Reasons why an LM condition is gated out: a model that does not beat the n-gram baseline at L
    by ``lm_gate`` in perplexity (sliding windows), in some seed."""
    base = _ngram_ppl(R)
    gate = R.cfg.get("lm_gate", 0.15)
    if base is None:
        return ["no n-gram baseline in this run"]
    limit = (1 - gate) * base
    first = R.cfg["lm_eval_factors"][0]
    reasons = []
    for lab in labels:
        where = {"label": lab} if part == "lm" else {"method": "none", "phase": "zero_shot"}
        vals = R.values(part, "ppl", eval_mode="sliding", eval_factor=first, **where)
        bad = sorted(s for s, v in vals.items() if v is None or v > limit)
        if bad:
            reasons.append(f"{lab} above {limit:.2f} (n-gram {base:.2f} less {gate:.0%}) in seed(s) "
                           f"{', '.join(map(str, bad))}")
    return reasons


# --------------------------------------------------------------------------- comparison builders

def _iv_text(R, part, metric, measure, **where):
    return fmt(R.iv(part, metric, measure, **where), 2)


def _between(R, part, metric, measure, a_where, b_where, sign, a_name, b_name, kind="superior") -> Comparison:
    """Two groups of different seeds (Welch)."""
    a, b = R.values(part, metric, **a_where), R.values(part, metric, **b_where)
    ca, cb = R.values(part, "n_scored", **a_where), R.values(part, "n_scored", **b_where)
    ka, kb = sorted(s for s in a if a[s] is not None), sorted(s for s in b if b[s] is not None)
    test = welch([a[s] for s in ka], [b[s] for s in kb], measure, [ca.get(s) for s in ka], [cb.get(s) for s in kb])
    text = f"{a_name} {_iv_text(R, part, metric, measure, **a_where)} vs {b_name} " \
           f"{_iv_text(R, part, metric, measure, **b_where)}"
    return Comparison(text, test, measure, sign, kind)


def _ratio_values(R, part, metric, key, base, other, **where) -> dict:
    a, b = R.values(part, metric, **where, **{key: base}), R.values(part, metric, **where, **{key: other})
    return {s: b[s] / a[s] for s in set(a) & set(b) if a[s] and b[s]}


def _change(R, part, key, base, other, sign, name, kind="superior", **where) -> Comparison:
    """One model's perplexity at ``key=other`` against ``key=base``, paired by seed."""
    a, b = R.values(part, "ppl", **where, **{key: other}), R.values(part, "ppl", **where, **{key: base})
    test = paired(a, b, "ratio")
    ratio = R.ratio_iv(part, key, base, other, **where)
    return Comparison(f"{name} {fmt(ratio, 3)}", test, "ratio", sign, kind)


def _paired_methods(R, a_where, b_where, a_name, b_name, sign=-1, mode="sliding") -> Comparison:
    a = R.values("rope_scaling", "ppl", eval_mode=mode, **a_where)
    b = R.values("rope_scaling", "ppl", eval_mode=mode, **b_where)
    text = (f"{a_name} {_iv_text(R, 'rope_scaling', 'ppl', 'ppl', eval_mode=mode, **a_where)} vs {b_name} "
            f"{_iv_text(R, 'rope_scaling', 'ppl', 'ppl', eval_mode=mode, **b_where)}")
    return Comparison(text, paired(a, b, "ppl"), "ppl", sign)


# --------------------------------------------------------------------------- Press et al. 2022

PRESS_SET = ("sinusoidal", "rope", "t5", "alibi")


def _press(R) -> list[Claim]:
    src = "Press et al. 2022"
    factors = R.cfg.get("lm_eval_factors", [1])
    if "lm" not in R.by_part or len(factors) < 2:
        return [_untested(src, "LM perplexity versus length", "the lm part was not run")]
    base, top, beyond = factors[0], factors[-1], factors[1:]
    lab = {e: R.lm_label(e) for e in PRESS_SET}
    if any(v is None for v in lab.values()):
        missing = [e for e, v in lab.items() if v is None]
        return [_untested(src, "LM perplexity versus length", f"{missing} not in this run")]
    nonov = {"eval_mode": "nonoverlapping"}
    claims = []
    for enc, name in (("sinusoidal", "Sinusoidal"), ("rope", "Rotary")):
        conds = [Condition(f"{f}L", [_change(R, "lm", "eval_factor", base, f, +1, f"ppl {f}L/{base}L", label=lab[enc],
                                             **nonov)], _lm_gate(R, [lab[enc]])) for f in beyond]
        claims.append(Claim(f"{src}, Fig. 1", f"{name} perplexity rises past L (non-overlapping)", "all", conds))
    t5r = {e: _ratio_values(R, "lm", "ppl", "eval_factor", base, top, label=lab[e], **nonov) for e in PRESS_SET}

    def ratio_cmp(a, b):
        test = welch(list(t5r[a].values()), list(t5r[b].values()), "ratio")
        ra, rb = R.ratio_iv("lm", "eval_factor", base, top, label=lab[a], **nonov), \
            R.ratio_iv("lm", "eval_factor", base, top, label=lab[b], **nonov)
        return Comparison(f"{a} {fmt(ra, 3)} vs {b} {fmt(rb, 3)}", test, "ratio", -1)

    claims.append(Claim(f"{src}, Fig. 1", f"T5 degrades less than rotary and sinusoidal (ppl {top}L / {base}L)", "each",
                        [Condition(f"{top}L", [ratio_cmp("t5", "rope"), ratio_cmp("t5", "sinusoidal")],
                                   _lm_gate(R, [lab["t5"], lab["rope"], lab["sinusoidal"]]))]))
    claims.append(Claim(f"{src}, Fig. 1", "ALiBi perplexity does not rise past L, up to the longest length", "all",
                        [Condition(f"{f}L", [_change(R, "lm", "eval_factor", base, f, -1, f"ppl {f}L/{base}L",
                                                     "noninferior", label=lab["alibi"], **nonov)],
                                   _lm_gate(R, [lab["alibi"]])) for f in beyond]))
    comps = [_between(R, "lm", "ppl", "ppl", {"label": lab["alibi"], "eval_factor": top, **nonov},
                      {"label": lab[o], "eval_factor": top, **nonov}, -1, "alibi", o) for o in ("sinusoidal", "rope", "t5")]
    claims.append(Claim(f"{src}, Fig. 1", f"ALiBi has the lowest perplexity at the longest length ({top}L) of "
                        "sinusoidal, rotary, T5 and ALiBi", "all",
                        [Condition(f"{top}L", comps, _lm_gate(R, list(lab.values())))]))
    later = [f for f in factors if f > 2]
    if 2 in factors and later:
        conds = [Condition(f"{f}L", [_change(R, "lm", "eval_factor", 2, f, +1, f"sliding ppl {f}L/2L", "noninferior",
                                             label=lab["alibi"], eval_mode="sliding")], _lm_gate(R, [lab["alibi"]]))
                 for f in later]
        claims.append(Claim(f"{src}, App. B", "with sliding windows ALiBi gains nothing from context longer than L "
                            "(its non-overlapping gain is the early-token curse)", "all", conds))
    return claims


# --------------------------------------------------------------------------- Kazemnejad et al. 2023

KAZEMNEJAD_SET = ("none", "t5", "alibi", "rope", "sinusoidal")


def _tasks_option(R) -> str:
    return "varying" if "varying" in R.options else "fixed"


def _kazemnejad(R) -> list[Claim]:
    option = _tasks_option(R)
    src = f"Kazemnejad et al. 2023 ({option})"
    if "tasks" not in R.by_part:
        return [_untested(src, "length generalization on synthetic tasks", "the tasks part was not run")]
    factors = [f for f in R.cfg["eval_factors"] if f > 1]
    lab = {e: R.task_label(e, option) for e in KAZEMNEJAD_SET}
    if not factors or any(v is None for v in lab.values()):
        why = "no evaluation past L" if not factors else f"{[e for e, v in lab.items() if v is None]} not in this run"
        return [_untested(src, "length generalization on synthetic tasks", why)]

    def acc(a, b, sign=+1, kind="superior", task=None, f=None):
        w = {"training": option, "task": task, "eval_factor": f}
        return _between(R, "tasks", "token_accuracy", "accuracy", {**w, "label": lab[a]}, {**w, "label": lab[b]}, sign,
                        a, b, kind)

    def conds(pairs, involved):
        return [Condition(f"{task} {f}L", [acc(*p, task=task, f=f) for p in pairs],
                          _task_gate(R, option, task, [lab[e] for e in involved]))
                for task in R.tasks for f in factors]

    explicit = ("t5", "alibi", "rope", "sinusoidal")
    return [
        Claim(src, "NoPE generalizes at least as well as every explicit encoding (T5, ALiBi, RoPE, absolute)", "all",
              conds([("none", e, +1, "noninferior") for e in explicit], KAZEMNEJAD_SET)),
        Claim(src, "T5's relative bias is the best explicit encoding", "all",
              conds([("t5", e) for e in ("alibi", "rope", "sinusoidal")], explicit)),
        Claim(src, "RoPE and absolute position embeddings generalize worse than NoPE, T5 and ALiBi", "each",
              conds([(w, b, -1) for w in ("rope", "sinusoidal") for b in ("none", "t5", "alibi")], KAZEMNEJAD_SET)),
        Claim(src, "ALiBi generalizes worse than NoPE and T5", "each",
              conds([("alibi", b, -1) for b in ("none", "t5")], ("alibi", "none", "t5"))),
    ]


# --------------------------------------------------------------------------- RoPE scaling

def _scaling(R) -> list[Claim]:
    if "rope_scaling" not in R.by_part:
        return [_untested("RoPE scaling papers", "zero-shot and fine-tuned extension", "the rope_scaling part was not run")]
    factors, F = R.cfg["lm_eval_factors"], R.cfg["scaling_factor"]
    base, top = factors[0], factors[-1]
    beyond = [f for f in factors if f > 1]
    gate = _lm_gate(R, ["rope"], part="rope_scaling")

    def zs(method, f):
        w = {"method": method, "phase": "zero_shot", "eval_factor": f}
        return {**w, "design_factor": f} if method in ("linear", "ntk", "yarn") else w

    def ft(method, f):
        return {"method": method, "phase": "finetuned", "eval_factor": f}

    def pair(a, b, an, bn, sign=-1):
        return _paired_methods(R, a, b, an, bn, sign)

    def claim(src, text, kind, conds):
        return Claim(src, text, kind, [Condition(n, cs, gate) for n, cs in conds])

    out = [
        claim("Chen et al. 2023", "unscaled RoPE fails past L zero-shot (sliding perplexity rises)", "all",
              [(f"{f}L", [_change(R, "rope_scaling", "eval_factor", base, f, +1, f"none {f}L/{base}L", method="none",
                                  phase="zero_shot", eval_mode="sliding")]) for f in beyond]),
        claim("Chen et al. 2023", "position interpolation (s = T/L) beats unscaled RoPE zero-shot past L", "all",
              [(f"{f}L", [pair(zs("linear", f), zs("none", f), f"linear s={f}", "none")]) for f in beyond]),
        claim("bloc97 2023 (NTK-aware)", "zero-shot NTK-aware scaling beats position interpolation past L (both "
              "s = T/L)", "all", [(f"{f}L", [pair(zs("ntk", f), zs("linear", f), f"ntk s={f}", f"linear s={f}")])
                                  for f in beyond]),
        claim("emozilla 2023 (dynamic NTK)", "zero-shot dynamic NTK beats unscaled RoPE at every length past L", "all",
              [(f"{f}L", [pair(zs("dynamic", f), zs("none", f), "dynamic", "none")]) for f in beyond]),
        claim("Peng et al. 2023 (YaRN)", "zero-shot YaRN beats position interpolation and NTK past L (all s = T/L)",
              "each", [(f"{f}L", [pair(zs("yarn", f), zs(m, f), f"yarn s={f}", f"{m} s={f}") for m in ("linear", "ntk")])
                       for f in beyond]),
    ]
    if F in factors:
        short = next((f for f in factors if 1 < f < F), None)
        if short:
            out.append(claim("Chen et al. 2023", f"after fine-tuning at {F}L, position interpolation uses the longer "
                             f"window (sliding perplexity at {F}L below that at {short}L)", "all",
                             [(f"{F}L", [_change(R, "rope_scaling", "eval_factor", short, F, -1,
                                                 f"linear fine-tuned {F}L/{short}L", method="linear", phase="finetuned",
                                                 eval_mode="sliding")])]))
        out.append(claim("Chen et al. 2023", f"fine-tuning with interpolation (s = {F}) beats fine-tuning without it, "
                         f"at {F}L", "all", [(f"{F}L", [pair(ft("linear", F), ft("none", F), "linear", "none")])]))
        out.append(claim("Peng et al. 2023 (YaRN)", f"fine-tuned YaRN beats fine-tuned PI and NTK at {F}L (s = {F})",
                         "each", [(f"{F}L", [pair(ft("yarn", F), ft(m, F), "yarn", m) for m in ("linear", "ntk")])]))
        if top > F:
            out.append(claim("Peng et al. 2023 (YaRN)", f"fine-tuned YaRN degrades less than PI past its fine-tuned "
                             f"length ({top}L)", "all",
                             [(f"{top}L", [pair(ft("yarn", top), ft("linear", top), "yarn", "linear")])]))
    return out


# --------------------------------------------------------------------------- the modern family

#: ``(source, claim, encoding, kind, others)``; ``kind`` "below": its perplexity at the longest
#: evaluation length is clearly below each of ``others``; "flat": its perplexity does not rise by
#: the margin at any evaluated length past L; "below-at-L": below ``others`` at L itself.
MODERN_LM_CLAIMS = (
    ("Chi et al. 2022 (KERPLE)", "KERPLE (log) extrapolates better than ALiBi and T5: lower perplexity at the "
                                 "longest length", "kerple", "below", ("alibi", "t5")),
    ("Chi et al. 2022 (KERPLE)", "KERPLE's perplexity does not rise past L", "kerple", "flat", ()),
    ("Chi et al. 2023 (Sandwich)", "Sandwich, parameter-free, does not rise past L (it extrapolates like ALiBi)",
     "sandwich", "flat", ()),
    ("Chi et al. 2023 (Sandwich)", "Sandwich extrapolates better than the sinusoidal embedding it is built from",
     "sandwich", "below", ("sinusoidal",)),
    ("Barbero et al. 2024 (p-RoPE)", "p-RoPE (p = 0.25) reaches lower perplexity than RoPE at the training length",
     "p_rope", "below-at-L", ("rope",)),
    ("Barbero et al. 2024 (p-RoPE)", "p-RoPE degrades less than RoPE past L (lower perplexity at the longest length)",
     "p_rope", "below", ("rope",)),
    ("Golovneva et al. 2024 (CoPE)", "CoPE has lower perplexity than RoPE and T5 past the training length", "cope",
     "below", ("rope", "t5")),
    ("Li et al. 2023 (FIRE)", "FIRE length-generalizes better than RoPE, ALiBi, KERPLE and T5", "fire", "below",
     ("rope", "alibi", "kerple", "t5")),
    ("Wang et al. 2021 (CrossFormer DPB)", "a bias that is an MLP of the log distance is defined at unseen "
                                           "lengths: perplexity does not rise past L", "dpb", "flat", ()),
)


def _modern_lm(R) -> list[Claim]:
    """The rows of :data:`MODERN_LM_CLAIMS`, on non-overlapping LM perplexity."""
    factors = R.cfg.get("lm_eval_factors", [1])
    out = []
    for source, text, enc, kind, others in MODERN_LM_CLAIMS:
        if "lm" not in R.by_part or len(factors) < 2:
            out.append(_untested(source, text, "the lm part was not run"))
            continue
        base, top = factors[0], factors[-1]
        lab = R.lm_label(enc)
        present = [(o, R.lm_label(o)) for o in others if R.lm_label(o) is not None]
        if lab is None or (others and not present):
            out.append(_untested(source, text, f"`{enc}` or its comparison set is not in this run's results"))
            continue
        nonov = {"eval_mode": "nonoverlapping"}
        if kind == "flat":
            conds = [Condition(f"{f}L", [_change(R, "lm", "eval_factor", base, f, -1, f"ppl {f}L/{base}L", "noninferior",
                                                 label=lab, **nonov)], _lm_gate(R, [lab])) for f in factors[1:]]
            out.append(Claim(source, text, "all", conds))
            continue
        f = base if kind == "below-at-L" else top
        comps = [_between(R, "lm", "ppl", "ppl", {"label": lab, "eval_factor": f, **nonov},
                          {"label": olab, "eval_factor": f, **nonov}, -1, enc, o) for o, olab in present]
        out.append(Claim(source, text, "each", [Condition(f"{f}L", comps, _lm_gate(R, [lab] + [x for _, x in present]))]))
    return out


def _cope_tasks(R) -> list[Claim]:
    """Golovneva et al. 2024: CoPE at least as good as RoPE on the synthetic tasks past L."""
    src, text = "Golovneva et al. 2024 (CoPE)", "CoPE generalizes past L on the synthetic tasks at least as well as RoPE"
    if "tasks" not in R.by_part:
        return [_untested(src, text, "the tasks part was not run")]
    option = _tasks_option(R)
    cope, rope = R.task_label("cope", option), R.task_label("rope", option)
    if cope is None or rope is None:
        return [_untested(src, text, "cope or rope not in this run")]
    conds = []
    for task in R.tasks:
        for f in [f for f in R.cfg["eval_factors"] if f > 1]:
            w = {"training": option, "task": task, "eval_factor": f}
            conds.append(Condition(f"{task} {f}L", [_between(R, "tasks", "token_accuracy", "accuracy",
                                                             {**w, "label": cope}, {**w, "label": rope}, +1, "cope",
                                                             "rope", "noninferior")],
                                   _task_gate(R, option, task, [cope, rope])))
    return [Claim(f"{src} ({option})", text, "all", conds)]


def _ruoss(R) -> list[Claim]:
    """Randomized positions raise token accuracy past L over ``varying`` (the same sizes), per encoding
    and task, paired by seed (the cells of one seed start from the same weights)."""
    src, text = "Ruoss et al. 2023", ("randomized positions raise accuracy past L over the same encoding trained "
                                      "without them (varying sizes both)")
    if "tasks" not in R.by_part or "randomized" not in R.options:
        return [_untested(src, text, "no `randomized` cells in this run")]
    baseline = _tasks_option(R)
    factor = max(R.cfg["eval_factors"])
    if factor <= 1:
        return [_untested(src, text, "no evaluation past L")]
    conds = []
    for task in R.tasks:
        for label in R.labels("tasks", task=task, training="randomized"):
            w = {"label": label, "task": task, "eval_factor": factor}
            a = R.values("tasks", "token_accuracy", training="randomized", **w)
            b = R.values("tasks", "token_accuracy", training=baseline, **w)
            if not any(v is not None for v in b.values()):
                continue  # e.g. a learned table cannot run past L without randomized positions
            comp = Comparison(f"randomized {_iv_text(R, 'tasks', 'token_accuracy', 'accuracy', training='randomized', **w)}"
                              f" vs {baseline} {_iv_text(R, 'tasks', 'token_accuracy', 'accuracy', training=baseline, **w)}",
                              paired(a, b, "accuracy"), "accuracy", +1)
            gate = _task_gate(R, "randomized", task, [label]) + _task_gate(R, baseline, task, [label])
            conds.append(Condition(f"{task}/{label} {factor}L", [comp], gate))
    return [Claim(f"{src} ({factor}L, vs {baseline})", text, "each", conds)]


def claims(R) -> list[Claim]:
    """Every claim, judged (see the module docstring)."""
    out = _press(R) + _kazemnejad(R) + _scaling(R) + _modern_lm(R) + _cope_tasks(R) + _ruoss(R)
    for c in out:
        c.verdict = c.judge()
    return out


def claim_rows(R: Results) -> list[tuple]:
    """``(source, claim, verdict, evidence)`` for every claim.

    Examples
    --------
    >>> from dataclasses import asdict
    >>> from posenc_np.study.claims import claim_rows
    >>> from posenc_np.study.config import StudyConfig
    >>> from posenc_np.study.report import Results
    >>> rows = claim_rows(Results({"meta": {"config": asdict(StudyConfig(seeds=4))}, "records": []}))   # nothing run
    >>> len(rows), rows[0]
    (14, ('Press et al. 2022', 'LM perplexity versus length', 'not tested', 'the lm part was not run'))
    """
    return [(c.source, c.claim, c.verdict, c.evidence()) for c in claims(R)]


def section_claims(R: Results) -> str:
    """The ``claims`` block of the documentation: how a claim is judged, then one table row per claim
    (:func:`claim_rows`).

    Examples
    --------
    >>> from dataclasses import asdict
    >>> from posenc_np.study.claims import section_claims
    >>> from posenc_np.study.config import StudyConfig
    >>> from posenc_np.study.report import Results
    >>> lines = section_claims(Results({"meta": {"config": asdict(StudyConfig(seeds=4))}, "records": []})).splitlines()
    >>> lines[2:4], len(lines)           # the rules, a blank line, the table header and 14 rows
    (['| source | claim | verdict | evidence |', '|---|---|---|---|'], 18)
    >>> lines[4]
    '| Press et al. 2022 | LM perplexity versus length | **not tested** | the lm part was not run |'
    """
    m = MEASURES
    lines = [(f"Each claim is tested pairwise against its paper's comparison set (rules above): *clear* means "
              f"Holm-corrected p < {ALPHA:g} over the claim's tests and a difference of at least the minimum effect "
              f"(accuracy {m['accuracy'].delta:g}; perplexity {m['ppl'].delta:.0%}; a change with length "
              f"{m['ratio'].delta:.0%}). Evidence: mean [95 % interval] per side and each comparison's outcome; "
              "`*` marks an interval whose seeds agreed exactly (widened to the evaluation set's resolution)."), "",
             "| source | claim | verdict | evidence |", "|---|---|---|---|"]
    for source, claim, verdict, evidence in claim_rows(R):
        lines.append(f"| {source} | {claim} | **{verdict}** | {evidence} |")
    return "\n".join(lines)

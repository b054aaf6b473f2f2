"""The papers' claims, each checked against the results with the intervals of :mod:`.stats`.

A verdict is generated, never written by hand:

``reproduces``
    the claimed direction is separated (intervals do not overlap) in every comparison the claim makes;
``does not reproduce``
    the opposite direction is separated in at least one comparison;
``not resolved``
    otherwise (intervals overlap somewhere, nothing contradicts);
``consistent (no separated change)``
    for a claim that something does *not* happen (a perplexity that does not rise): it was
    not seen, but an interval contains "no change", so it is not shown either;
``not tested``
    the run lacks the cells (a part, an encoding or a method was not run).

Each claim names the measure it is checked on: Press et al. report non-overlapping
perplexity (their appendix B also sliding windows); the RoPE-scaling papers report sliding-window
perplexity; Kazemnejad et al. train on varying lengths (the ``varying`` option when run, else
``fixed``, as the row says).
"""

from __future__ import annotations

from .stats import direction, fmt, separated, t_interval, tiers

__all__ = ["section_claims"]

YES, NO, OPEN, UNTESTED = "reproduces", "does not reproduce", "not resolved", "not tested"
CONSISTENT = "consistent (no separated change)"


def _row(source: str, claim: str, verdict: str, evidence: str) -> tuple:
    return source, claim, verdict, evidence


def _combine(outcomes: list[str]) -> str:
    """Verdict from per-comparison outcomes ``"yes"`` / ``"no"`` / ``"open"``."""
    if not outcomes:
        return UNTESTED
    if "no" in outcomes:
        return NO
    return YES if all(o == "yes" for o in outcomes) else OPEN


def _never(ivs, forbidden: str) -> str:
    """Verdict of "the ratio never moves in direction ``forbidden``" over the intervals ``ivs``."""
    dirs = [direction(iv) for iv in ivs if iv is not None]
    if not dirs or "unknown" in dirs:
        return UNTESTED if not dirs else OPEN
    if forbidden in dirs:
        return NO
    return CONSISTENT if "flat" in dirs else YES


def _dir_outcome(iv, want: str) -> str:
    d = direction(iv)
    if d == want:
        return "yes"
    if d in ("up", "down"):
        return "no"
    return "open"


def _less(a, b) -> str:
    """``a < b`` separated: yes; ``a > b`` separated: no; else open."""
    if separated(a, b):
        return "yes" if a.mean < b.mean else "no"
    return "open" if a is not None and b is not None else "missing"


def _lm_label(R, encoding):
    labels = [r["label"] for r in R.by_part.get("lm", []) if r["encoding"] == encoding]
    return labels[0] if labels else None


# --------------------------------------------------------------------------- Press et al. 2022

def _press(R):
    rows = []
    factors = R.cfg.get("lm_eval_factors", [1])
    if "lm" not in R.by_part or len(factors) < 2:
        return [_row("Press et al. 2022", "LM perplexity versus length claims", UNTESTED, "the lm part was not run")]
    base, top = factors[0], factors[-1]

    def ratio(enc, f, mode="nonoverlapping", start=base):
        lab = _lm_label(R, enc)
        return None if lab is None else R.ratio("lm", "ppl", "eval_factor", start, f, label=lab, eval_mode=mode)

    for enc, name in (("sinusoidal", "Sinusoidal"), ("rope", "Rotary")):
        iv = ratio(enc, factors[1])
        rows.append(_row("Press et al. 2022, Fig. 1", f"{name} perplexity rises past L (non-overlapping)",
                     _combine([] if iv is None else [_dir_outcome(iv, "up")]),
                     f"ppl {factors[1]}L / {base}L = {fmt(iv, 3)}"))
    t5, rope, sin = ratio("t5", top), ratio("rope", top), ratio("sinusoidal", top)
    outcomes = [o for o in (_less(t5, rope), _less(t5, sin)) if o != "missing"] if t5 else []
    rows.append(_row("Press et al. 2022, Fig. 1", "T5 bias degrades less than rotary and sinusoidal",
                 _combine(outcomes), f"ppl {top}L / {base}L: t5 {fmt(t5, 3)}, rope {fmt(rope, 3)}, sinusoidal {fmt(sin, 3)}"))
    ivs = {f: ratio("alibi", f) for f in factors[1:]}
    rows.append(_row("Press et al. 2022, Fig. 1", "ALiBi perplexity does not rise past L, up to the longest length",
                 _never(ivs.values(), "up"), "; ".join(f"{f}L / {base}L = {fmt(iv, 3)}" for f, iv in ivs.items())))
    items = {lab: R.iv("lm", "ppl", label=lab, eval_mode="nonoverlapping", eval_factor=top) for lab in R.labels("lm")}
    items = {k: v for k, v in items.items() if v is not None}
    alibi = _lm_label(R, "alibi")
    if alibi in items:
        first = tiers(items, higher_is_better=False)[0]
        verdict = YES if first == [alibi] else OPEN if alibi in first else NO
        evidence = f"best tier at {top}L: {{{', '.join(first)}}}"
    else:
        verdict, evidence = UNTESTED, "alibi not run"
    rows.append(_row("Press et al. 2022, Fig. 1", f"ALiBi has the lowest perplexity at the longest length ({top}L)",
                 verdict, evidence))
    # sliding windows at 1L give the first predictions less than L of context; from 2L on every scored
    # prediction has more than L, so longer windows can only help a model that uses context past L
    later = [f for f in factors if f > 2]
    ivs = {f: ratio("alibi", f, "sliding", 2) for f in later} if 2 in factors else {}
    rows.append(_row("Press et al. 2022, App. B", "with sliding windows ALiBi gains nothing from context longer than L "
                     "(its non-overlapping gain is the early-token curse)", _never(ivs.values(), "down"),
                     "sliding: " + "; ".join(f"{f}L / 2L = {fmt(iv, 3)}" for f, iv in ivs.items())))
    return rows


# --------------------------------------------------------------------------- Kazemnejad et al. 2023

def _kazemnejad(R):
    if "tasks" not in R.by_part:
        return [_row("Kazemnejad et al. 2023", "length generalization on synthetic tasks", UNTESTED,
                 "the tasks part was not run")]
    option = "varying" if "varying" in R.options else "fixed"
    factor = next((f for f in R.cfg["eval_factors"] if f > 1), None)
    if factor is None:
        return [_row("Kazemnejad et al. 2023", "length generalization", UNTESTED, "no evaluation past L")]
    rankings = {}
    for task in R.tasks:
        items = {lab: R.iv("tasks", "token_accuracy", training=option, label=lab, task=task, eval_factor=factor)
                 for lab in R.labels("tasks", task=task, training=option)}
        rankings[task] = {k: v for k, v in items.items() if v is not None}
    src = f"Kazemnejad et al. 2023 ({option}, {factor}L)"

    def label_of(enc):
        labels = [r["label"] for r in R.by_part["tasks"] if r["encoding"] == enc and r["training"] == option]
        return labels[0] if labels else None

    def check(predicate, what):
        outcomes, notes = [], []
        for task, items in rankings.items():
            if not items:
                continue
            t = tiers(items, higher_is_better=True)
            o = predicate(items, t)
            if o == "missing":
                continue
            outcomes.append(o)
            notes.append(f"{task}: {o}")
        return _combine(outcomes), f"{what}; per task " + ", ".join(notes) if notes else "encoding not run"

    none, t5, rope, alibi, sin = (label_of(e) for e in ("none", "t5", "rope", "alibi", "sinusoidal"))

    def in_first(lab):
        def pred(items, t):
            if lab not in items:
                return "missing"
            return "yes" if lab in t[0] else "no"
        return pred

    def in_last(labs):
        def pred(items, t):
            present = [lab for lab in labs if lab in items]
            if not present:
                return "missing"
            if len(t) == 1:
                return "open"
            return "yes" if all(lab in t[-1] for lab in present) else "no" if any(lab in t[0] for lab in present) \
                else "open"
        return pred

    def explicit_first(items, t):
        if t5 not in items:
            return "missing"
        rest = {k: v for k, v in items.items() if k != none}
        return "yes" if t5 in tiers(rest, higher_is_better=True)[0] else "no"

    def not_first(items, t):
        if alibi not in items:
            return "missing"
        return "yes" if alibi not in t[0] else "open"

    rows = []
    for claim, pred, what in (
            ("NoPE generalizes at least as well as every explicit encoding", in_first(none), "none in the best tier"),
            ("T5's relative bias is the best explicit encoding", explicit_first, "t5 in the best tier without none"),
            ("RoPE and absolute position embeddings generalize worst", in_last([rope, sin]),
             "rope and sinusoidal in the last tier (learned cannot run past L at all)"),
            ("ALiBi is not well suited to length generalization", not_first, "alibi outside the best tier")):
        verdict, evidence = check(pred, what)
        rows.append(_row(src, claim, verdict, evidence))
    return rows


# --------------------------------------------------------------------------- RoPE scaling

def _scaling(R):
    if "rope_scaling" not in R.by_part:
        return [_row("RoPE scaling papers", "zero-shot and fine-tuned extension", UNTESTED,
                 "the rope_scaling part was not run")]
    factors, F = R.cfg["lm_eval_factors"], R.cfg["scaling_factor"]
    base, top = factors[0], factors[-1]
    methods = {r["method"] for r in R.by_part["rope_scaling"]}

    def ppl(method, phase, f, mode="sliding"):
        return R.iv("rope_scaling", "ppl", method=method, phase=phase, eval_mode=mode, eval_factor=f) \
            if method in methods else None

    def less(pairs):
        outcomes = [o for o in (_less(a, b) for a, b in pairs) if o != "missing"]
        return _combine(outcomes)

    beyond = [f for f in factors if f > 1]
    rows = []
    iv = R.ratio("rope_scaling", "ppl", "eval_factor", base, beyond[0], method="none", phase="zero_shot",
                 eval_mode="sliding") if "none" in methods and beyond else None
    rows.append(_row("Chen et al. 2023", "unscaled RoPE fails past L zero-shot (perplexity rises)",
                 _combine([] if iv is None else [_dir_outcome(iv, "up")]),
                 f"none, ppl {beyond[0] if beyond else '?'}L / {base}L = {fmt(iv, 3)}"))
    rows.append(_row("Chen et al. 2023", f"position interpolation beats unscaled RoPE zero-shot past L (up to {F}L)",
                 less([(ppl("linear", "zero_shot", f), ppl("none", "zero_shot", f)) for f in beyond if f <= F]),
                 "; ".join(f"{f}L: linear {fmt(ppl('linear', 'zero_shot', f))} vs none "
                           f"{fmt(ppl('none', 'zero_shot', f))}" for f in beyond if f <= F)))
    short = next((f for f in factors if 1 < f < F), None)  # every scored prediction has more than L of context
    iv = R.ratio("rope_scaling", "ppl", "eval_factor", short, F, method="linear", phase="finetuned",
                 eval_mode="sliding") if "linear" in methods and F in factors and short else None
    rows.append(_row("Chen et al. 2023", f"after fine-tuning at {F}L, position interpolation uses the longer window "
                     f"(sliding perplexity at {F}L below that at {short}L)",
                     _combine([] if iv is None else [_dir_outcome(iv, "down")]),
                     f"linear fine-tuned, ppl {F}L / {short}L = {fmt(iv, 3)}"))
    rows.append(_row("Chen et al. 2023", f"fine-tuning with interpolation beats fine-tuning without it, at {F}L",
                 less([(ppl("linear", "finetuned", F), ppl("none", "finetuned", F))]),
                 f"linear {fmt(ppl('linear', 'finetuned', F))} vs none {fmt(ppl('none', 'finetuned', F))}"))
    rows.append(_row("bloc97 2023 (NTK-aware)", "zero-shot NTK-aware scaling beats position interpolation past L",
                 less([(ppl("ntk", "zero_shot", f), ppl("linear", "zero_shot", f)) for f in beyond]),
                 "; ".join(f"{f}L: ntk {fmt(ppl('ntk', 'zero_shot', f))} vs linear "
                           f"{fmt(ppl('linear', 'zero_shot', f))}" for f in beyond)))
    rows.append(_row("emozilla 2023 (dynamic NTK)", "zero-shot dynamic NTK beats unscaled RoPE at every length past L",
                 less([(ppl("dynamic", "zero_shot", f), ppl("none", "zero_shot", f)) for f in beyond]),
                 "; ".join(f"{f}L: dynamic {fmt(ppl('dynamic', 'zero_shot', f))} vs none "
                           f"{fmt(ppl('none', 'zero_shot', f))}" for f in beyond)))
    rows.append(_row("Peng et al. 2023 (YaRN)", f"fine-tuned YaRN beats fine-tuned PI and NTK at {F}L",
                 less([(ppl("yarn", "finetuned", F), ppl(m, "finetuned", F)) for m in ("linear", "ntk")]),
                 f"yarn {fmt(ppl('yarn', 'finetuned', F))}, linear {fmt(ppl('linear', 'finetuned', F))}, "
                 f"ntk {fmt(ppl('ntk', 'finetuned', F))}"))
    if top > F:
        rows.append(_row("Peng et al. 2023 (YaRN)", f"fine-tuned YaRN degrades less than PI past its fine-tuned length "
                     f"({top}L)", less([(ppl("yarn", "finetuned", top), ppl("linear", "finetuned", top))]),
                     f"yarn {fmt(ppl('yarn', 'finetuned', top))} vs linear {fmt(ppl('linear', 'finetuned', top))}"))
    return rows


# --------------------------------------------------------------------------- the modern family

#: Which paper claims what about an encoding's LM perplexity past the training length L:
#: ``(source, claim, encoding, kind, others)``; ``kind`` "below": its perplexity at the longest
#: evaluation length is below each of ``others`` (non-overlapping intervals); "flat": its
#: perplexity ratio to 1L never rises separated at any evaluated length past L; "below-at-L":
#: below ``others`` at the training length itself.
MODERN_LM_CLAIMS = (
    ("Chi et al. 2022 (KERPLE)", ("KERPLE (log) extrapolates better than ALiBi and T5: lower perplexity at the "
                                  "longest length"), "kerple", "below", ("alibi", "t5")),
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
    ("Wang et al. 2021 (CrossFormer DPB)", ("a bias that is an MLP of the log distance is defined at unseen "
                                            "lengths: perplexity does not rise past L"), "dpb", "flat", ()),
)


def _modern_lm(R) -> list[tuple]:
    """The rows of :data:`MODERN_LM_CLAIMS`, on non-overlapping LM perplexity (sliding for none)."""
    factors = R.cfg.get("lm_eval_factors", [1])
    base, top = factors[0], factors[-1]
    rows = []
    for source, claim, enc, kind, others in MODERN_LM_CLAIMS:
        if "lm" not in R.by_part or len(factors) < 2:
            rows.append(_row(source, claim, UNTESTED, "the lm part was not run"))
            continue
        lab = _lm_label(R, enc)
        if lab is None:
            rows.append(_row(source, claim, UNTESTED, f"`{enc}` is not in this run's results (not in the registry "
                                                      "or not in the study's encodings)"))
            continue

        def ppl(label, f):
            return R.iv("lm", "ppl", label=label, eval_factor=f, eval_mode="nonoverlapping")

        if kind == "flat":
            ivs = {f: R.ratio("lm", "ppl", "eval_factor", base, f, label=lab, eval_mode="nonoverlapping")
                   for f in factors[1:]}
            rows.append(_row(source, claim, _never(ivs.values(), "up"),
                             "; ".join(f"{f}L / {base}L = {fmt(iv, 3)}" for f, iv in ivs.items())))
            continue
        f = base if kind == "below-at-L" else top
        present = [(o, _lm_label(R, o)) for o in others if _lm_label(R, o) is not None]
        outcomes = [o for o in (_less(ppl(lab, f), ppl(olab, f)) for _, olab in present) if o != "missing"]
        evidence = f"{f}L: {enc} {fmt(ppl(lab, f))}" + "".join(f" vs {o} {fmt(ppl(olab, f))}" for o, olab in present)
        rows.append(_row(source, claim, _combine(outcomes) if present else UNTESTED,
                         evidence if present else f"none of {list(others)} in this run"))
    return rows


def _cope_tasks(R) -> list[tuple]:
    """Golovneva et al. 2024: CoPE at least as good as RoPE on the synthetic tasks past L."""
    factor = next((f for f in R.cfg.get("eval_factors", []) if f > 1), None) if "tasks" in R.by_part else None
    outcomes, notes = [], []
    if factor is not None:
        option = "varying" if "varying" in R.options else "fixed"
        for task in R.tasks:
            ivs = {enc: R.iv("tasks", "token_accuracy", training=option, label=enc, task=task, eval_factor=factor)
                   for enc in ("cope", "rope")}
            o = _less(ivs["cope"], ivs["rope"])  # "yes" here means CoPE is worse
            if o != "missing":
                outcomes.append({"yes": "no", "no": "yes", "open": "open"}[o])
                notes.append(f"{task}: cope {fmt(ivs['cope'])} vs rope {fmt(ivs['rope'])}")
    verdict = UNTESTED if not outcomes else NO if "no" in outcomes else CONSISTENT if "open" in outcomes else YES
    return [_row("Golovneva et al. 2024 (CoPE)", f"CoPE generalizes past L on the synthetic tasks at least as well "
                 f"as RoPE (token accuracy at {factor}L)", verdict, "; ".join(notes) or "tasks part, cope or rope "
                 "not run")]


def _ruoss(R) -> list[tuple]:
    """Randomized positions raise token accuracy past L over ``varying`` (the same sizes), per encoding
    and task, paired by seed (the cells of one seed start from the same weights)."""
    source, claim = "Ruoss et al. 2023", ("randomized positions raise accuracy past L over the same encoding "
                                          "trained without them (varying sizes both)")
    if "tasks" not in R.by_part or "randomized" not in R.options:
        return [_row(source, claim, UNTESTED, "no `randomized` cells in this run")]
    baseline = "varying" if "varying" in R.options else "fixed"
    factor = max(R.cfg["eval_factors"])
    if factor <= 1:
        return [_row(source, claim, UNTESTED, "no evaluation past L")]
    outcomes, notes = [], []
    for task in R.tasks:
        for label in R.labels("tasks", task=task, training="randomized"):
            a = R.values("tasks", "token_accuracy", training=baseline, label=label, task=task, eval_factor=factor)
            b = R.values("tasks", "token_accuracy", training="randomized", label=label, task=task, eval_factor=factor)
            seeds = sorted(s for s in set(a) & set(b) if a[s] is not None and b[s] is not None)
            if not seeds:  # e.g. a learned table cannot run past L without randomized positions
                notes.append(f"{task}/{label}: only randomized runs at {factor}L")
                continue
            iv = t_interval([b[s] - a[s] for s in seeds])
            d = direction(iv, 0.0)
            outcomes.append({"up": "yes", "down": "no"}.get(d, "open"))
            notes.append(f"{task}/{label}: {fmt(iv, 2)}")
    return [_row(f"{source} ({factor}L, vs {baseline})", claim, _combine(outcomes),
                 "accuracy difference randomized - baseline: " + "; ".join(notes))]


def claim_rows(R) -> list[tuple]:
    """``(source, claim, verdict, evidence)`` for every claim."""
    return _press(R) + _kazemnejad(R) + _scaling(R) + _modern_lm(R) + _cope_tasks(R) + _ruoss(R)


def section_claims(R) -> str:
    lines = [("Verdicts are computed from the intervals (see the top of this page); *evidence* shows the numbers "
              "compared, mean [95 % interval]."), "",
             "| source | claim | verdict | evidence |", "|---|---|---|---|"]
    for source, claim, verdict, evidence in claim_rows(R):
        lines.append(f"| {source} | {claim} | **{verdict}** | {evidence} |")
    return "\n".join(lines)

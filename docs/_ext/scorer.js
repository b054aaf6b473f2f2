// Search scorer of the posenc_np site (conf.py html_search_scorer; Sphinx inlines it into
// language_data.js, which loads after searchtools.js and so replaces its default Scorer).
//
// The guide pages explain a term; the generated API and golden-case pages list it. A text or
// heading match on a guide page therefore ranks above the same match in those listings, so
// "yarn" finds the RoPE page first and "buckets" the relative page. Matches of an object's own
// name (kind "object": `rotate_pairs`, `t5_buckets`) keep Sphinx's score and still lead, except
// modules: `posenc_np.rope` is documented by the RoPE page, so a module's API entry does not get
// the bonus Sphinx gives "important" objects and comes after that page.
var Scorer = {
  guide: ["why-positions", "absolute", "relative", "rope", "alibi", "biases", "choosing"],
  score: (result) => {
    const [docname, , , descr, score, , kind] = result;
    // Sphinx < 7.3 gives no kind; there only object matches carry a description.
    const isObject = kind === undefined ? Boolean(descr) : kind === "object";
    if (isObject) return descr && descr.startsWith("Python module") ? score - Scorer.objPrio[0] : score;
    if (docname.startsWith("reference/golden/")) return score - 10;
    if (docname.startsWith("reference/")) return score - 5;
    if (Scorer.guide.includes(docname)) return score + 5;
    return score;
  },
  // Sphinx's defaults, unchanged
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};

// Check an implementation against a posenc-np golden suite from JavaScript, without posenc-np.
//
//   node docs/examples/verify_suite.mjs vectors/v2
//
// 1. The manifest: index.json lists every file with its SHA-256 and size; SHA256SUMS repeats them.
// 2. The cases this file implements: plain RoPE tables and rotations (rope.cos_sin, rope.apply
//    with "scaling": null) and the sinusoidal encoding, each evaluated three ways and compared with
//    the case's tolerance for the precision it works in:
//      float64          ordinary double arithmetic (Math.pow, Math.cos)     -> tolerances.float64
//      float32          the same angles, each result rounded once to float32 -> tolerances.float32
//      float32-angles   the common float32 recipe (inv_freq, positions, p*w and cos in float32,
//                       Hugging Face LlamaRotaryEmbedding's arithmetic)      -> tolerances.float32
// Exit status 0 when the manifest checks out, the first two pass every case, and the float32-angle
// recipe is rejected by every long-context case (positions up to 10^7).

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.argv[2] ?? "vectors/v2";
const f32 = Math.fround;

// ---------------------------------------------------------------- 1. the manifest
const indexBytes = readFileSync(join(dir, "index.json"));
const index = JSON.parse(indexBytes.toString("utf8"));
if (index.schema !== "posenc-np-golden-index" || index.schema_version !== 2 || index.pending.length) {
  throw new Error("not a finished version-2 golden suite");
}
const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");
const sums = [];
for (const c of index.cases) {
  for (const f of c.files) {
    const bytes = readFileSync(join(dir, f.path));
    if (bytes.length !== f.size || sha256(bytes) !== f.sha256) throw new Error(`${f.path}: size or SHA-256 differs`);
    sums.push([f.path, f.sha256]);
  }
}
sums.push(["index.json", sha256(indexBytes)]);
sums.sort((a, b) => (a[0] < b[0] ? -1 : 1));
const expectedSums = sums.map(([p, d]) => `${d}  ${p}\n`).join("");
if (readFileSync(join(dir, "SHA256SUMS"), "utf8") !== expectedSums) throw new Error("SHA256SUMS differs");
console.log(`manifest: ${sums.length - 1} case files and index.json match their SHA-256`);

// ---------------------------------------------------------------- 2. arrays
// {"dtype", "shape", "data"}: data flat in C order; every integer is within 2^53, exact in a double.
const size = (shape) => shape.reduce((a, b) => a * b, 1);
function at(arr, idx) { // element of a C-order array at a multi-index
  let flat = 0;
  for (let k = 0; k < idx.length; k++) flat = flat * arr.shape[k] + idx[k];
  return arr.data[flat];
}
function* indices(shape) {
  const idx = new Array(shape.length).fill(0);
  for (let n = 0; n < size(shape); n++) {
    yield idx.slice();
    for (let k = shape.length - 1; k >= 0; k--) { if (++idx[k] < shape[k]) break; idx[k] = 0; }
  }
}

// ---------------------------------------------------------------- 3. implementations
// Frequencies w_i = base^(-2i/d); the angle of pair i at position p is p * w_i.
const recipes = {
  float64: { freq: (base, i, d) => 1 / base ** ((2 * i) / d), angle: (p, w) => p * w, trig: (f, t) => f(t), out: (v) => v },
  float32: { freq: (base, i, d) => 1 / base ** ((2 * i) / d), angle: (p, w) => p * w, trig: (f, t) => f(t), out: f32 },
  "float32-angles": {
    freq: (base, i, d) => f32(1 / f32(f32(base) ** f32(f32(2 * i) / f32(d)))),
    angle: (p, w) => f32(f32(p) * w), trig: (f, t) => f32(f(t)), out: (v) => v,
  },
};

function ropeTables(doc, r) { // cos/sin tables in the case's layout: positions.shape + [rotary_dim]
  const { rotary_dim: d, base, layout } = doc.params;
  const pos = doc.inputs.positions, n = d / 2;
  const w = Array.from({ length: n }, (_, i) => r.freq(base, i, d));
  const cos = [], sin = [];
  for (const pidx of indices(pos.shape)) {
    const p = at(pos, pidx);
    for (let ch = 0; ch < d; ch++) {
      const i = layout === "half" ? ch % n : Math.floor(ch / 2);
      const t = r.angle(p, w[i]);
      cos.push(r.out(r.trig(Math.cos, t)));
      sin.push(r.out(r.trig(Math.sin, t)));
    }
  }
  return { cos, sin };
}

function ropeApply(doc, r) { // y = R x and dx = R^T dy (rotation with -sin); tail channels copy
  const { rotary_dim: d, layout } = doc.params;
  const { x, dy, positions: pos } = doc.inputs;
  const { cos, sin } = ropeTables(doc, r);
  const D = x.shape.at(-1), lead = x.shape.slice(0, -1), n = d / 2;
  const rowOf = (idx) => { // positions have x's leading shape, or lack its heads axis, or are one sequence
    let pidx = idx;
    if (idx.length === pos.shape.length + 1) pidx = [...idx.slice(0, -2), idx.at(-1)];
    else if (idx.length !== pos.shape.length) pidx = [idx.at(-1)];
    let flat = 0;
    for (let k = 0; k < pidx.length; k++) flat = flat * pos.shape[k] + pidx[k];
    return flat;
  };
  const rotate = (v, sign) => {
    const out = [];
    for (const idx of indices(lead)) {
      const row = rowOf(idx), base = out.length;
      for (let ch = 0; ch < D; ch++) out.push(r.out(at(v, [...idx, ch])));
      for (let i = 0; i < n; i++) {
        const [ia, ib] = layout === "half" ? [i, i + n] : [2 * i, 2 * i + 1];
        const c = cos[row * d + ia], s = sign * sin[row * d + ia];
        const a = at(v, [...idx, ia]), b = at(v, [...idx, ib]);
        out[base + ia] = r.out(r.out(a * c) - r.out(b * s));
        out[base + ib] = r.out(r.out(a * s) + r.out(b * c));
      }
    }
    return out;
  };
  return { y: rotate(x, 1), dx: rotate(dy, -1) };
}

function sinusoidal(doc, r) { // Vaswani et al.: interleaved [sin, cos, ...] or concat [sin | cos]
  const { dim: d, base, layout } = doc.params;
  const pos = doc.inputs.positions, half = d / 2, out = [];
  const w = Array.from({ length: half }, (_, i) => r.freq(base, i, d));
  for (const pidx of indices(pos.shape)) {
    const p = at(pos, pidx);
    for (let c = 0; c < d; c++) {
      const [i, useCos] = layout === "interleaved" ? [Math.floor(c / 2), c % 2 === 1] : [c % half, c >= half];
      out.push(r.out(r.trig(useCos ? Math.cos : Math.sin, r.angle(p, w[i]))));
    }
  }
  return { encoding: out };
}

function evaluate(doc, r) {
  if (doc.encoding === "sinusoidal") return sinusoidal(doc, r);
  if (doc.encoding === "rope.cos_sin") return ropeTables(doc, r);
  return ropeApply(doc, r);
}

const supported = (doc) => doc.encoding === "sinusoidal" ||
  (["rope.cos_sin", "rope.apply"].includes(doc.encoding) && doc.params.scaling === null);

// ---------------------------------------------------------------- 4. compare: |a - e| <= abs + rel |e|
const results = { float64: [0, 0], float32: [0, 0], "float32-angles": [0, 0] };
const longRejected = [];
let longCases = 0;
for (const c of index.cases) {
  const file = c.files.find((f) => f.path.endsWith(".json"));
  const doc = JSON.parse(readFileSync(join(dir, file.path), "utf8"));
  if (!supported(doc)) continue;
  const isLong = Math.max(...doc.inputs.positions.data.map(Math.abs)) >= 1e6;
  longCases += isLong;
  for (const [name, r] of Object.entries(recipes)) {
    const tol = doc.tolerances[name === "float64" ? "float64" : "float32"];
    const got = evaluate(doc, r);
    let worst = 0, ok = true;
    for (const [key, want] of Object.entries(doc.outputs)) {
      want.data.forEach((e, k) => {
        const err = Math.abs(got[key][k] - e);
        worst = Math.max(worst, err);
        if (!(err <= tol.abs + tol.rel * Math.abs(e))) ok = false;
      });
    }
    results[name][ok ? 0 : 1]++;
    if (name === "float32-angles" && !ok && isLong) longRejected.push(doc.name);
    if (name !== "float32-angles" && !ok) console.log(`FAIL ${name} ${doc.name}: worst error ${worst.toExponential(2)}`);
  }
}
for (const [name, [pass, fail]] of Object.entries(results)) console.log(`${name}: ${pass} passed, ${fail} failed`);
console.log(`float32-angles rejected by ${longRejected.length} of ${longCases} long-context cases`);
const ok = results.float64[1] === 0 && results.float32[1] === 0 && results.float64[0] > 0 &&
  longCases > 0 && longRejected.length === longCases;
console.log(ok ? "verdict: ok" : "verdict: UNEXPECTED");
process.exit(ok ? 0 : 1);

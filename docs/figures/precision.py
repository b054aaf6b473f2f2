"""Figures and tables for docs/precision.md: error versus position of every recipe, for a 128-dim
head (base 10^4, positions up to 10^7) in a float32, a bfloat16 and a float16 model; and the
LLaMA-3.1 configuration in bfloat16. Needs the ``plot`` extra (matplotlib).

    python docs/figures/precision.py   # writes docs/figures/precision_{float32,bfloat16,float16}.png,
                                       # precision_llama31_bfloat16.png and prints the Markdown reports
"""

from __future__ import annotations

from pathlib import Path

from posenc_np.precision_report import markdown, plot, report
from posenc_np.rope_scaling import parse_scaling

HERE = Path(__file__).resolve().parent
LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}


def main() -> None:
    runs = [(f"precision_{d}.png", parse_scaling(128, base=10000.0, seq_len=10 ** 7), d, 10 ** 7)
            for d in ("float32", "bfloat16", "float16")]
    runs.append(("precision_llama31_bfloat16.png", parse_scaling(128, base=500000.0, scaling=LLAMA31,
                                                                  max_position_embeddings=131072, seq_len=131072),
                 "bfloat16", 131072))
    for name, setup, dtype, top in runs:
        result = report(setup, dtype, top)
        plot(result, HERE / name)
        print(f"<!-- {name} -->\n{markdown(result)}\n")


if __name__ == "__main__":
    main()

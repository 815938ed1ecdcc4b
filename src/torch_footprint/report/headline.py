"""The verdict on top of a report, in words: does the workload fit the chosen accelerator, with
what margin, and what to provision; for a language model, on each accelerator asked about.
Read from the saved result (a dict); nothing is computed but differences of its figures."""

from __future__ import annotations

from typing import Any

from .svg import esc
from .units import binary, duration


def _fits_words(name: str, need: int, cap: int, provision: int | None, utilisation: float | None) -> tuple[str, str]:
    """(css class, sentence) for ``need`` bytes on an accelerator of ``cap`` bytes."""
    if need > cap:
        return "no", (f"Does not fit on {name}: it needs {binary(need)}, {binary(need - cap)} more than its "
                      f"{binary(cap)}.")
    spare = f"{binary(cap - need)} spare"
    if provision is None or utilisation is None or provision <= cap:
        tail = f"; at {utilisation:.0%} utilisation provision {binary(provision)}, within it." \
            if provision is not None and utilisation is not None else "."
        return "yes", f"Fits on {name}: it needs {binary(need)} of its {binary(cap)} ({spare}){tail}"
    return "tight", (f"Fits on {name}, with less headroom than asked: it needs {binary(need)} of its {binary(cap)} "
                     f"({spare}), but at {utilisation:.0%} utilisation it asks to provision {binary(provision)}, more "
                     "than the accelerator has.")


def _report_lines(doc: dict[str, Any]) -> list[tuple[str, str]]:
    mem, acc = doc.get("memory") or {}, doc.get("accelerator")
    out: list[tuple[str, str]] = []
    if mem.get("peak"):
        need, prov, util = mem["total_bytes"], mem["provision_bytes"], mem["utilisation"]
        if acc:
            out.append(_fits_words(acc["name"], need, acc["memory_bytes"], prov, util))
        else:
            out.append(("info", f"Needs {binary(need)} at the peak ({mem['peak']['phase']}); at {util:.0%} "
                                f"utilisation provision {binary(prov)}. Name an accelerator (--gpu) for a verdict."))
    pred = doc.get("predict")
    if pred and acc:
        out.append(("info", f"Predicted {duration(pred['time_s'])} a step on {acc['name']} "
                            f"({pred['bound']}-bound)."))
    fit = doc.get("fit")
    if fit and fit.get("rows"):
        rows = fit["rows"]
        n = sum(1 for r in rows if r["fits"])
        if fit.get("pick"):
            out.append(("yes", f"{n} of {len(rows)} accelerators fit; the pick: {fit['pick']} ({fit['why']})."))
        else:
            out.append(("no", f"None of the {len(rows)} accelerators fits: {fit['why'].split(': ', 1)[-1]}."))
    return out


def _llm_lines(lm: dict[str, Any]) -> list[tuple[str, str]]:
    rows = lm.get("accelerators") or []
    context = lm["prompt"] + lm["output"]
    at = f" at batch {lm['batch']} and {context:,} tokens"
    if len(rows) == 1:
        r = rows[0]
        cls, words = _fits_words(r["name"], r["total_bytes"], r["memory_bytes"], None, None)
        words = words.rstrip(".") + at + "."
        if r["fits"]:
            words += (f" Time to first token {duration(r['ttft_s'])}, {duration(r['tpot_s'])} per output token "
                      f"({r['tokens_per_s']:,.1f} tokens/s); up to batch {r['max_batch']:,}.")
        return [(cls, words)]
    fitting = [r for r in rows if r["fits"]]
    out: list[tuple[str, str]] = []
    if fitting:
        best = max(fitting, key=lambda r: r.get("tokens_per_s") or 0)
        out.append(("yes", f"Fits on {len(fitting)} of {len(rows)} accelerators{at}; the fastest of them: "
                           f"{best['accelerator']} ({best['tokens_per_s']:,.1f} tokens/s, time to first token "
                           f"{duration(best['ttft_s'])})."))
    else:
        out.append(("no", f"Fits on none of the {len(rows)} accelerators{at}."))
    missing = [r["accelerator"] for r in rows if not r["fits"]]
    if missing and fitting:
        more = f" and {len(missing) - 12} more" if len(missing) > 12 else ""
        out.append(("no", f"Does not fit: {', '.join(missing[:12])}{more}."))
    return out


def verdict(doc: dict[str, Any]) -> str:
    """The verdict paragraph (empty when the result says nothing of fitting)."""
    lines = _llm_lines(doc["llm"]) if doc.get("llm") else _report_lines(doc)
    if not lines:
        return ""
    return '<div class="verdict">' + "".join(f'<p class="v-{cls}">{esc(text)}</p>' for cls, text in lines) + "</div>"

"""The HTML report: one self-contained file drawn from a saved result (a dict), nothing computed.

No network request of any kind (no CDN, no web font, no external image); plots are inline
SVG made by ``report/svg.py``; the result is embedded once as JSON (every ``<`` written
``\\u003c``, so no ``</script>`` can close it early); a few lines of plain JavaScript show
tooltips and switch light and dark. Sections (``report/sections.py``) are drawn in the order of their table,
each from its own key of the result: a new section (the ``llm`` verb's, say) is one more
``(title, key, function)`` there, its function taking the whole result dict.
"""

from __future__ import annotations

import json
from typing import Any

from .headline import verdict
from .sections import SECTIONS, Section, cards, module_bars, workload_line
from .svg import esc

CSS = """
:root{--bg:#fff;--fg:#1b1f24;--muted:#5b636d;--card:#f4f6f8;--line:#c9d1d9;--grid:#e6e9ed;--accent:#0b62c4;
--input:#000;--phase0:rgba(11,98,196,.06);--phase1:rgba(218,165,32,.09);--bar:#0b62c4;--bar2:#e07b00}
@media (prefers-color-scheme:dark){:root:not([data-theme=light]){--bg:#111418;--fg:#e6e9ed;--muted:#9aa4ae;
--card:#1c2128;--line:#444c56;--grid:#2a3038;--accent:#6cb6ff;--input:#d0d0d0;--phase0:rgba(108,182,255,.08);
--phase1:rgba(218,165,32,.12);--bar:#6cb6ff;--bar2:#ffa657}}
:root[data-theme=dark]{--bg:#111418;--fg:#e6e9ed;--muted:#9aa4ae;--card:#1c2128;--line:#444c56;--grid:#2a3038;
--accent:#6cb6ff;--input:#d0d0d0;--phase0:rgba(108,182,255,.08);--phase1:rgba(218,165,32,.12);--bar:#6cb6ff;
--bar2:#ffa657}
body{background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;
margin:0 auto;max-width:1100px;padding:16px 24px}
h1{font-size:22px;margin:4px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line)}
.sub{color:var(--muted)}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.card{background:var(--card);border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:19px}.card span{color:var(--muted);font-size:12px}
svg.plot{display:block;max-width:100%;height:auto;margin:6px 0}
svg text{fill:var(--fg);font-size:11px}svg .at,svg .pt{font-weight:600}
svg .axis,svg .tick{stroke:var(--muted)}svg .grid{stroke:var(--grid)}
svg .cap{stroke:#d1242f;stroke-dasharray:6 4}svg .peak{stroke:var(--fg);stroke-dasharray:2 3}
svg .ceil{stroke:var(--muted);stroke-width:2;fill:none}svg .ph0{fill:var(--phase0)}svg .ph1{fill:var(--phase1)}
.c-parameter{fill:darkgreen}.c-optimizer-state{fill:goldenrod}.c-input{fill:var(--input)}.c-activation{fill:red}
.c-gradient{fill:mediumblue}.c-autograd-detail{fill:royalblue}.c-temporary{fill:mediumpurple}
.b-compute{fill:#d1242f}.b-memory{fill:#0b62c4}.b-overhead{fill:#8c959f}
circle.pt{fill-opacity:.55;stroke:var(--fg);stroke-opacity:.35}
rect.bar{fill:var(--bar)}rect.bar.alt{fill:var(--bar2)}rect.over{fill:#d1242f}
[data-tip]:hover{stroke:var(--fg);stroke-width:1.5}
#tip{position:fixed;pointer-events:none;background:var(--card);color:var(--fg);border:1px solid var(--line);
border-radius:6px;padding:6px 8px;font-size:12px;white-space:pre;display:none;z-index:9}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:6px 0}
td,th{padding:2px 10px;border-bottom:1px solid var(--grid);text-align:right}
td:first-child,th:first-child{text-align:left}th{cursor:default}
details.m>summary{cursor:pointer;list-style:none;display:grid;
grid-template-columns:minmax(260px,2.4fr) 1fr 1fr 1fr 1fr 1fr;gap:6px}
details.m>summary::-webkit-details-marker{display:none}details.m>summary>span:first-child::before{content:"▸ "}
details.m[open]>summary>span:first-child::before{content:"▾ "}
details.m.leaf>summary>span:first-child::before{content:"· "}details.m>summary:hover{background:var(--card)}
.mh{display:grid;grid-template-columns:minmax(260px,2.4fr) 1fr 1fr 1fr 1fr 1fr;gap:6px;font-weight:600}
.num{text-align:right}.note{color:var(--muted);font-size:12px}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:8px}
.verdict{margin:12px 0;font-size:15px}.verdict p{margin:4px 0;padding:6px 12px;border-left:4px solid var(--muted);
background:var(--card);border-radius:0 6px 6px 0}.verdict .v-yes{border-color:#1a7f37}
.verdict .v-no{border-color:#d1242f}.verdict .v-tight{border-color:#bf8700}
svg text.halo{paint-order:stroke;stroke:var(--bg);stroke-width:3px;stroke-linejoin:round}
td.no{color:#d1242f}svg text.nofit{fill:#d1242f}
button{background:var(--card);color:var(--fg);border:1px solid var(--line);border-radius:6px;padding:3px 9px}
"""

JS = """
(function(){var t=document.getElementById('tip');
document.addEventListener('mouseover',function(e){var s=e.target.closest&&e.target.closest('[data-tip]');
if(!s){t.style.display='none';return;}t.textContent=s.getAttribute('data-tip');t.style.display='block';});
document.addEventListener('mousemove',function(e){t.style.left=(e.clientX+14)+'px';t.style.top=(e.clientY+12)+'px';});
var b=document.getElementById('theme');if(b){b.addEventListener('click',function(){var r=document.documentElement;
var d=r.getAttribute('data-theme')==='dark'||(!r.getAttribute('data-theme')&&
matchMedia('(prefers-color-scheme: dark)').matches);r.setAttribute('data-theme',d?'light':'dark');});}})();
"""


def page_of(result: Any) -> dict[str, Any]:
    """What the page draws for ``result``: a saved record (its dict, with its envelope) as it
    is; a live result's ``to_dict()`` under an envelope of its kind, with what its sections
    read beside it (a prediction's roofline points and accelerator, a profile's modules)."""
    from ..results.record import envelope

    if isinstance(result, dict):
        return result
    kind, payload = result.kind, result.to_dict()
    if kind == "report":
        return envelope("report", payload)
    if kind == "profile":
        return {**envelope("profile", payload), "profile": payload, "modules": payload["by_module"]}
    extra: dict[str, Any] = {}
    if kind == "predict":
        acc = result.accelerator
        payload = {**payload, "roofline": result.roofline_points()}
        extra["accelerator"] = {**acc.to_dict(), "memory_bytes": acc.memory_bytes}
    return {**envelope(kind, payload), kind: payload, **extra}


def embedded_json(doc: dict[str, Any]) -> str:
    """The result as JSON safe inside a ``<script>``: every ``<`` escaped."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def render_html(result: Any, *, depth: int | None = None, fragment: bool = False) -> str:
    """One HTML page of a result (a live one, or a saved record's dict with its envelope): the
    sections that draw it. ``fragment``: a ``<div>`` for a notebook, without the page around it;
    ``depth``: the module depth of the bars (default: the shallowest with at least five modules)."""
    doc = page_of(result)
    chosen: dict[Section, Section] = {module_bars: lambda d: module_bars(d, depth)} if depth is not None else {}
    title = f"{doc.get('model')} · torch-footprint"
    body = [f'<h1>{esc(doc.get("model"))}</h1><p class="sub">{esc(workload_line(doc))} · {esc(doc.get("tool"))} '
            f'{esc(doc.get("tool_version"))} · schema {doc.get("schema_version")} · {esc(doc.get("created"))} · '
            f'fingerprint {esc(doc["fingerprint"]["sha256"])}</p>', verdict(doc), cards(doc)]
    for heading, key, fn in SECTIONS:
        if not doc.get(key):
            continue
        html = chosen.get(fn, fn)(doc)
        if html:
            slug = heading.lower().replace(" ", "-")
            body.append(f'<section id="{esc(slug)}"><h2>{esc(heading)}</h2>{html}</section>')
    data = f'<script type="application/json" id="footprint-data">{embedded_json(doc)}</script>'
    if fragment:
        css = CSS.replace("body{", ".footprint{")  # a notebook's page keeps its own body
        return f'<div class="footprint"><style>{css}</style>{"".join(body)}</div>'
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body>"
            '<button id="theme" style="float:right">light / dark</button>'
            f'{"".join(body)}<div id="tip"></div>{data}<script>{JS}</script></body></html>\n')

"""A markdown file as a web page: rendered by markdown-it-py (CommonMark with tables, raw HTML passed
through), styled to fit a 1,280 px window, every table sortable by a click on its header, a table inside
<div id="cells"> filtered by the text box before it, and the <details> a link's #anchor names opened.
Links to a markdown twin (x.md, which GitHub renders) become links to its page (x.html).
Everything is inline: the page needs no network, and its images are files beside it, so the folder can move."""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit, urlunsplit

from markdown_it import MarkdownIt

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;
 line-height:1.45;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.8em 0;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #ccc;padding:2px 4px;text-align:right;vertical-align:top}
td[style*="right"]{white-space:nowrap}
th{background:#f3f3f3;cursor:pointer}
th:first-child,td:first-child{text-align:left}
th[data-dir=asc]::after{content:" \\25B2"}th[data-dir=desc]::after{content:" \\25BC"}
img{max-width:100%;height:auto}
figure{margin:1em 0}figcaption{font-size:90%;color:#444;max-width:70em}
details{margin:.3em 0}summary{cursor:pointer}
code{background:#f3f3f3;padding:0 3px;border-radius:3px;font-size:90%;overflow-wrap:anywhere}
#cells{overflow:auto;max-height:85vh;max-width:100%}#cells table{font-size:12px;display:table;overflow:visible;margin:0}
#cells td:nth-child(2),#cells th:nth-child(2){white-space:nowrap}#cells td:last-child{min-width:18em;text-align:left}
#questions table{font-size:12.5px;line-height:1.3}#questions td,#questions th{text-align:left}
#questions td:first-child{width:24%}#questions td:nth-child(3){width:30%;color:#555}
#cells thead th{position:sticky;top:0;z-index:1;box-shadow:0 1px 0 #ccc}
#sweeps>ul{columns:2;column-gap:2.5em;font-size:14px;line-height:1.35;padding-left:1.2em}
#sweeps>ul>li{break-inside:avoid;margin-bottom:.35em}#sweeps ul ul{padding-left:1.1em;margin:0}
blockquote{border-left:4px solid #c60;background:#fff4e5;margin:.6em 0;padding:.2em .8em}
#filter{font-size:14px;padding:3px 6px;width:30em;max-width:100%}
"""

# Sort on a header click (numbers by value, then text; a second click reverses); filter #cells's rows
# by every word typed; open the <details> a link's #anchor names (a cell's details), on load and on a
# change of the hash, as a browser only scrolls to it. A few lines here rather than a library: nothing to
# fetch, nothing to vendor.
SCRIPT = """
function sortKey(text){const m=text.trim().replace(/^(<=|≤)\\s*/,"").replace("−","-").match(/^[+-]?\\d+(\\.\\d+)?/);
 return m?parseFloat(m[0]):null}
document.querySelectorAll("table").forEach(t=>{const head=t.tHead;if(!head)return;
 [...head.rows[0].cells].forEach((th,i)=>th.addEventListener("click",()=>{
  const dir=th.dataset.dir==="asc"?"desc":"asc";
  [...head.rows[0].cells].forEach(c=>delete c.dataset.dir);th.dataset.dir=dir;
  const rows=[...t.tBodies[0].rows],sign=dir==="asc"?1:-1;
  rows.sort((a,b)=>{const x=a.cells[i].textContent,y=b.cells[i].textContent,kx=sortKey(x),ky=sortKey(y);
   if(kx!==null&&ky!==null)return (kx-ky)*sign;if(kx!==null)return -1;if(ky!==null)return 1;
   return x.localeCompare(y)*sign});
  rows.forEach(r=>t.tBodies[0].appendChild(r))}))});
const box=document.getElementById("filter"),cells=document.querySelector("#cells table");
if(box&&cells)box.addEventListener("input",()=>{const words=box.value.toLowerCase().split(/\\s+/).filter(Boolean);
 let shown=0;[...cells.tBodies[0].rows].forEach(r=>{const ok=words.every(w=>r.textContent.toLowerCase().includes(w));
  r.style.display=ok?"":"none";shown+=ok});document.getElementById("shown").textContent=shown})
function openTarget(){const id=decodeURIComponent(location.hash.slice(1));let el=id&&document.getElementById(id);
 const target=el;while(el){if(el.tagName==="DETAILS")el.open=true;el=el.parentElement}
 if(target)target.scrollIntoView()}
window.addEventListener("hashchange",openTarget);openTarget();
"""


def page_href(href: str) -> str:
    """A link between the markdown twins (`sweep.md#cell-x`, GitHub's view) as one between the pages
    (`sweep.html#cell-x`); any other link as it is."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not parts.path.endswith(".md"):
        return href
    return urlunsplit(parts._replace(path=parts.path[: -len(".md")] + ".html"))


def slug(text: str) -> str:
    """GitHub's anchor for a heading (lower case, punctuation but - and _ dropped, spaces to hyphens), so a
    contents list's #links work on the page and on the markdown twin alike."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text.strip().lower()))


def _heading_ids(state) -> None:
    for i, token in enumerate(state.tokens):
        if token.type == "heading_open" and not token.attrGet("id") and i + 1 < len(state.tokens):
            token.attrSet("id", slug(state.tokens[i + 1].content))


def _links_to_pages(state) -> None:
    for token in state.tokens:
        for child in token.children or ():
            if child.type == "link_open":
                child.attrSet("href", page_href(child.attrGet("href") or ""))


_MD = MarkdownIt("commonmark", {"html": True}).enable("table")
_MD.core.ruler.push("links_to_pages", _links_to_pages)
_MD.core.ruler.push("heading_ids", _heading_ids)


def render(markdown: str) -> str:
    """The HTML of a markdown text (the body only)."""
    return _MD.render(markdown)


def page(title: str, markdown: str) -> str:
    """A whole page: the title, the style, the markdown rendered, the script."""
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            render(markdown),
            f"<script>{SCRIPT}</script>",
            "</body></html>",
            "",
        ]
    )

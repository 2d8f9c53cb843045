"""Build the chapters as a static HTML site (`make docs`): one page per notebook in `_site/nbs/`, an index page
`_site/index.html` listing every chapter in order with its title and one-line description, and the figures that the
notebooks link to (`../results/...png`) copied into `_site/` at the same relative place, so every relative link that
works in JupyterLab and on GitHub also works in the site. Links between chapters (`06_fedloge.ipynb#Anchor`) point
at the pages (`06_fedloge.html#Anchor`). nbconvert renders the stored outputs (nothing is executed); Quarto (which
`nbdev_docs` needs) is not required. The site makes no request outside itself, so it reads offline: the pages are
nbconvert's `lab` pages less what that template fetches from a CDN (require.js, mermaid, the widget renderer; the
template `scripts/nbconvert/fedloge_site/`), and they load MathJax 2 from `_site/mathjax/`, a copy of the files that the
PyPI package `jupyter-server-mathjax` (a dev requirement) bundles. Widget outputs are shown as their stored text or HTML
(the saved widget state is dropped: rendering it would take the widget library from a CDN).
Usage: python scripts/build_docs.py [--out _site] [--quiet]"""
import argparse, html, re, shutil, time
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / 'nbs'
DIRECTIVE = re.compile(r'^\s*#\|\s*([\w-]+)')
ATTR = re.compile(r'(\b(?:href|src)=")([^"]*)(")')
# what a page would fetch from the web: a script, style sheet, image, frame or media file from another host, an import()
FETCH = re.compile(r'<(?:script|link|img|iframe|source|video|audio|embed)\b[^>]*?\b(?:src|href)\s*=\s*["\']?(?:https?:)?//[^"\'\s>]*'
                   r'|\bimport\(\s*["\'](?:https?:)?//[^"\']*|@import\s+(?:url\()?["\']?(?:https?:)?//[^"\')\s]*', re.I)
TEMPLATES = Path(__file__).resolve().parent / 'nbconvert'   # the site's nbconvert template: fedloge_site/ (lab without the CDN)
TEMPLATE = 'fedloge_site'
MARK = '.built-by-build_docs'                 # marks a folder this script may replace

def chapters(nbs: Path = NBS) -> list:
    "The notebooks of the site in reading order: the overview (`index.ipynb`) first, then the chapters by file name."
    nbs_ = sorted(p for p in nbs.glob('*.ipynb') if not p.name.startswith(('.', '_')))
    return sorted(nbs_, key=lambda p: (p.stem != 'index', p.name))

def title_desc(nb: dict, fallback: str) -> tuple:
    "Title (`# Title`) and one-line description (`> line`) from a notebook's first markdown cell."
    md = next((''.join(c['source']) for c in nb['cells'] if c['cell_type'] == 'markdown'), '')
    title = next((l[2:].strip() for l in md.splitlines() if l.startswith('# ')), fallback)
    desc = next((l[1:].strip() for l in md.splitlines() if l.startswith('>')), '')
    return title, desc

def for_reader(nb: dict) -> dict:
    """The notebook as the site shows it (like nbdev's docs): `#| hide` and `#| default_exp` cells dropped, `#|` directive
    lines removed, the saved widget state dropped (nbconvert then shows each widget output's stored text or HTML)."""
    cells = []
    for c in nb['cells']:
        src = ''.join(c['source'])
        if c['cell_type'] == 'code':
            lines = src.splitlines()
            flags = [m.group(1) for l in lines if (m := DIRECTIVE.match(l))]
            if 'hide' in flags or 'default_exp' in flags: continue
            c = {**c, 'source': '\n'.join(l for l in lines if not DIRECTIVE.match(l)).strip('\n')}
        cells.append(c)
    meta = {k: v for k, v in nb.get('metadata', {}).items() if k != 'widgets'}
    return {**nb, 'metadata': meta, 'cells': cells}

def inline_md(s: str) -> str:
    "A one-line description as HTML: escaped, `code` spans kept."
    return re.sub(r'`([^`]+)`', r'<code>\1</code>', html.escape(s, quote=False))

def rewrite_links(page: str, stems: set, out: Path, copied: set) -> str:
    "Point `x.ipynb` links at `x.html` and copy every relative file a page links to (figures) into `out`, at its place in the repository."
    def fix(m):
        url = m.group(2)
        if not url or url.startswith(('#', 'data:', 'mailto:', 'javascript:', '//')) or re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', url): return m.group(0)
        path, rest = re.match(r'([^?#]*)(.*)', url).groups()      # rest: ?query and #anchor, kept as they are
        target = (NBS / unquote(path)).resolve()
        if path.endswith('.ipynb') and target.parent == NBS and target.stem in stems:
            return m.group(1) + path[:-len('.ipynb')] + '.html' + rest + m.group(3)
        if target.is_file() and ROOT in target.parents and target.suffix != '.ipynb':
            rel = target.relative_to(ROOT)
            if rel not in copied:
                (out / rel).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(target, out / rel); copied.add(rel)
        return m.group(0)                                    # unchanged: the site keeps the repository's layout
    return ATTR.sub(fix, page)

MATHJAX_DIR = 'mathjax'                        # the site's copy of MathJax, beside index.html
# MathJax 2's own combined configuration in jupyter-server-mathjax (TeX input, HTML-CSS output) plus its `Safe` extension;
# the package ships the STIX-Web web fonts only (not MathJax's default TeX fonts), so the output uses those, as Jupyter
# does (the template's MathJax block configures them)
MATHJAX_URL = f'../{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe'

def mathjax_files() -> Path:
    "The MathJax 2 files (`MathJax.js`, `config/`, `jax/`, `fonts/`, ...) that the PyPI package `jupyter-server-mathjax` installs."
    try: from jupyter_server_mathjax.app import STATIC_ASSETS_PATH
    except ImportError: raise SystemExit("jupyter-server-mathjax is missing (the site's MathJax): `make setup`, or "
                                         "`.venv/bin/pip install jupyter-server-mathjax`")
    src = Path(STATIC_ASSETS_PATH)
    if not (src / 'MathJax.js').is_file(): raise SystemExit(f"no MathJax.js in {src}: reinstall jupyter-server-mathjax")
    return src

def exporter():
    "nbconvert's HTML exporter with the site's template (`lab` less the CDN) and the site's MathJax."
    from nbconvert import HTMLExporter
    # the lab template passes every cell's input and HTML output through `clean_html` (bleach's sanitiser), which took 40%
    # of the build; these pages are this repository's own notebooks, shown as JupyterLab shows a trusted notebook
    return HTMLExporter(template_name=TEMPLATE, extra_template_basedirs=[str(TEMPLATES)], mathjax_url=MATHJAX_URL,
                        filters={'clean_html': lambda text: text})

def render(exp, nb: dict, title: str) -> str:
    "Notebook `nb` as a page of the site (before its links are rewritten): refused if it would fetch anything from the web."
    import nbformat
    page, _ = exp.from_notebook_node(nbformat.from_dict(for_reader(nb)), resources={'metadata': {'name': f'{title} - fedloge_nb'}})
    if page.count(f'<script src="{MATHJAX_URL}">') != 1: raise SystemExit(f"{title}: the page does not load the site's MathJax: check build_docs.py")
    if (m := FETCH.search(page)): raise SystemExit(f"{title}: the page would fetch {m.group(0)[:200]!r} from the web, which fails offline: "
                                                   "keep a copy in the site, or show it another way")
    return page

NAV_CSS = ("<style>.site-nav{font:14px/1.4 system-ui,sans-serif;padding:8px 16px;border-bottom:1px solid #ddd;"
           "background:#f7f7f7}.site-nav a{margin-right:1.2em}</style>")

def nav(prev, nxt) -> str:
    "The bar at the top of every page: the index, the previous and the next chapter."
    links = ['<a href="../index.html">fedloge_nb: all chapters</a>']
    if prev: links.append(f'<a href="{prev[0]}.html">&larr; {html.escape(prev[1])}</a>')
    if nxt: links.append(f'<a href="{nxt[0]}.html">{html.escape(nxt[1])} &rarr;</a>')
    return NAV_CSS + '<nav class="site-nav">' + ''.join(links) + '</nav>'

INDEX = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>fedloge_nb: chapters</title>
<style>
body{{font:16px/1.5 system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse;width:100%}} td,th{{text-align:left;vertical-align:top;padding:6px 8px;border-bottom:1px solid #e4e4e4}}
td.nb{{white-space:nowrap;color:#666;font-family:monospace}} code{{background:#f3f3f3;padding:0 3px}}
</style></head>
<body>
<h1>fedloge_nb</h1>
<p>{tagline}</p>
<p>Every chapter is a notebook of <code>nbs/</code>, rendered with its stored outputs. Read them in this order, or open
the notebooks in JupyterLab (<code>.venv/bin/jupyter lab nbs/</code>) to run them.</p>
<table id="chapters">
<tr><th>notebook</th><th>chapter</th><th>what it holds</th></tr>
{rows}
</table>
<p>Built {stamp} by <code>scripts/build_docs.py</code> (<code>make docs</code>).</p>
</body></html>
"""

def build(out: Path = ROOT / '_site', quiet: bool = False) -> list:
    "Write the site into `out` (replaced as a whole); returns the (notebook stem, title, description) rows of the index."
    import nbformat
    out = Path(out).resolve()
    if out.is_dir() and any(out.iterdir()) and not (out / MARK).exists():       # never replace a folder this script did not write
        raise SystemExit(f"refusing to replace {out}: it is not a site built by scripts/build_docs.py; give a new folder, e.g. _site")
    tmp = out.with_name(out.name + '.building')
    shutil.rmtree(tmp, ignore_errors=True); (tmp / 'nbs').mkdir(parents=True); (tmp / MARK).write_text('built by scripts/build_docs.py\n')
    nbs = chapters()
    info = []
    for p in nbs:
        nb = nbformat.read(p, as_version=4)                  # sources as strings
        title, desc = title_desc(nb, p.stem)
        info.append((p.stem, 'Overview' if p.stem == 'index' else title, desc, nb))   # index.ipynb: the README's notebook
    stems, copied = {s for s, *_ in info}, set()
    shutil.copytree(mathjax_files(), tmp / MATHJAX_DIR)
    exp = exporter()
    for i, (stem, title, desc, nb) in enumerate(info):
        t0 = time.time()
        page = rewrite_links(render(exp, nb, title), stems, tmp, copied)
        bar = nav(info[i - 1][:2] if i else None, info[i + 1][:2] if i + 1 < len(info) else None)
        page = re.sub(r'(<body[^>]*>)', lambda m: m.group(1) + bar, page, count=1)
        (tmp / 'nbs' / f'{stem}.html').write_text(page)
        if not quiet: print(f"{stem}.ipynb -> nbs/{stem}.html ({time.time() - t0:.1f}s)")
    tagline = inline_md(next((d for s, _, d, _ in info if s == 'index'), ''))
    rows = '\n'.join(f'<tr><td class="nb">{s}</td><td><a href="nbs/{s}.html">{html.escape(t)}</a></td><td>{inline_md(d)}</td></tr>'
                     for s, t, d, _ in info)
    (tmp / 'index.html').write_text(INDEX.format(tagline=tagline, rows=rows, stamp=time.strftime('%Y-%m-%d %H:%M')))
    shutil.rmtree(out, ignore_errors=True); tmp.rename(out)
    if not quiet: print(f"{len(info)} pages and {len(copied)} linked files -> {out}/index.html")
    return [(s, t, d) for s, t, d, _ in info]

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('.')[0])
    ap.add_argument('--out', default=str(ROOT / '_site'), help='output folder (replaced), default _site/')
    ap.add_argument('--quiet', action='store_true', help='print only errors')
    a = ap.parse_args()
    build(Path(a.out), a.quiet)

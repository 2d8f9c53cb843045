"""The rendered site (`make docs`, scripts/build_docs.py) opened in headless Chromium with the network blocked: the index lists
every chapter, every page loads with no request outside the site and no failed request, every image loads
(naturalWidth > 0), every internal link reaches an existing page and anchor, and the equations of three chapters are
typeset by the site's own copy of MathJax (no raw TeX left in the visible text); a page with a widget output loads
offline too. A broken copy proves that the checks fail."""
import functools, http.server, json, os, re, shutil, subprocess, sys, tempfile, threading
from pathlib import Path
from urllib.parse import urlsplit
import pytest

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ('chromium', 'chromium-browser', 'google-chrome')

def browser() -> str:
    "The Chromium executable ($CHROMIUM or the first on PATH); a missing one fails the test with the command that installs it."
    exe = os.environ.get('CHROMIUM') or next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not exe: pytest.fail("chromium not found: install it with `apt-get install -y chromium` (or `make docs-deps`)", pytrace=False)
    return exe

# Runs in the checker page: loads every page of the site in an iframe, then POSTs what it found to /__report__.
CHECKER = r"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>site check</title><link rel="icon" href="data:,"></head><body>
<pre id="report">running</pre><img src="/__wait__" alt="">
<script>
const PAGES = %s, MATH = %s, SENTINEL = %s;   // MATH: the pages whose equations are checked too
const report = {pages: 0, images: 0, links: 0, equations: {}, problems: []};
const fetched = new Map(), parsed = new Map();
const text = url => { if (!fetched.has(url)) fetched.set(url, fetch(url).then(r => r.ok ? r.text() : null, () => null)); return fetched.get(url); };
const load = page => new Promise(ok => { const f = document.createElement('iframe'); f.style.cssText = 'width:1200px;height:800px';
  f.onload = () => ok(f); f.src = page; document.body.appendChild(f); });
const loaded = img => img.complete ? Promise.resolve() : new Promise(ok => { img.addEventListener('load', ok); img.addEventListener('error', ok); });
async function hasAnchor(base, hash, here, doc) {    // as a browser scrolls: the fragment as written, then decoded
  if (base !== here && !parsed.has(base)) parsed.set(base, new DOMParser().parseFromString(await text(base) || '', 'text/html'));
  const d = base === here ? doc : parsed.get(base);
  return [hash, decodeURIComponent(hash)].some(id => d.getElementById(id) || d.getElementsByName(id).length);
}
const TEX = /\\[a-zA-Z]+|\$\$|\$[^$\s][^$]{0,150}\$/;   // a TeX command, $$ or $...$ left as text
const SKIP = 'script, style, code, pre, textarea, noscript';    // what MathJax leaves alone (code, sources)
const within = (p, ms) => Promise.race([p, new Promise(ok => setTimeout(() => ok('timeout'), ms))]);
async function checkMath(page, f) {     // MathJax 2 of the site: loaded, finished, every equation with its output, no raw TeX shown
  const doc = f.contentDocument, mj = f.contentWindow.MathJax, src = doc.querySelector('script[src*="MathJax.js"]');
  if (src && !(mj && mj.Hub)) report.problems.push(`${page}: MathJax did not load from ${src.getAttribute('src')}`);
  // MathJax.Hub.Queue runs after the page's own typesetting; the hook returns nothing (MathJax would wait on a returned callback)
  if (mj && mj.Hub && await within(new Promise(ok => mj.Hub.Register.StartupHook('End', () => { mj.Hub.Queue(() => { ok(); }); })), 30000) === 'timeout')
    report.problems.push(`${page}: MathJax did not finish typesetting within 30 s`);
  const jax = Array.from(doc.querySelectorAll('script[type^="math/tex"]'));
  report.equations[page] = jax.filter(s => doc.getElementById(s.id + '-Frame')).length;
  for (const s of jax) if (!doc.getElementById(s.id + '-Frame')) report.problems.push(`${page}: equation not typeset: ${s.textContent.slice(0, 80)}`);
  for (const e of Array.from(doc.querySelectorAll('.MathJax .merror, .MathJax .noError')))
    report.problems.push(`${page}: MathJax error: ${e.textContent.slice(0, 80)}`);
  if (jax.length && !Array.from(doc.fonts).some(ff => ff.family.replace(/"/g, '').startsWith('STIXMathJax') && ff.status === 'loaded'))
    report.problems.push(`${page}: MathJax's web fonts (STIXMathJax) did not load`);
  const walk = doc.createTreeWalker(doc.body, NodeFilter.SHOW_TEXT), shown = [];
  for (let n; (n = walk.nextNode());) { const e = n.parentElement; if (!e.closest(SKIP) && e.checkVisibility()) shown.push(n.data); }
  const raw = shown.join(' ').match(TEX);
  if (raw) report.problems.push(`${page}: raw TeX in the page: ${shown.join(' ').substr(Math.max(0, raw.index - 20), 100).replace(/\s+/g, ' ')}`);
}
async function check(page) {
  if (await text(new URL(page, location.href).href) === null) { report.problems.push(`${page}: no such page`); return; }
  const f = await load(page), doc = f.contentDocument, here = f.contentWindow.location.href.split('#')[0];
  report.pages++;
  if (MATH.includes(page)) await checkMath(page, f);
  for (const img of Array.from(doc.images)) {
    await loaded(img); report.images++;
    if (!(img.naturalWidth > 0)) report.problems.push(`${page}: image ${(img.getAttribute('src') || '').slice(0, 80)} does not load`);
  }
  for (const a of Array.from(doc.querySelectorAll('a[href]'))) {
    const href = a.getAttribute('href'), u = new URL(href, here);
    if (u.origin !== location.origin) continue;                        // the web, mailto: not checked here
    report.links++;
    const base = u.origin + u.pathname;
    if (base !== here && await text(base) === null) { report.problems.push(`${page}: link ${href} -> no such page`); continue; }
    const hash = u.hash.slice(1);
    if (hash && !(await hasAnchor(base, hash, here, doc))) report.problems.push(`${page}: link ${href} -> no anchor #${hash}`);
  }
  f.remove();
}
(async () => {
  try { for (const p of PAGES) await check(p); } catch (e) { report.problems.push('checker crashed: ' + e); }
  // a request outside the site, made last: the server waits for its policy report, so the last page's reports are in too
  await new Promise(ok => { const i = new Image(); i.onload = i.onerror = ok; i.src = SENTINEL; });
  document.getElementById('report').textContent = JSON.stringify(report);
  await fetch('/__report__', {method: 'POST', body: JSON.stringify(report)});
})();
</script></body></html>"""

# Every response carries this policy in report-only mode: the page loads as it would without it (offline: the host resolver
# maps every name but 127.0.0.1 to nothing), and Chromium posts a report to /__csp__ for every request the page starts to
# any other origin (a CDN script, a module import, a style sheet, a font, an image): the site must start none. Reports
# that name no URL (MathJax's blank test font at about:blank, an inline script) are not requests.
CSP = "default-src 'self' data: blob: 'unsafe-inline' 'unsafe-eval'; report-uri /__csp__"
NETWORK = ('http', 'https', 'ws', 'wss', 'ftp')
SENTINEL = 'http://sentinel.invalid/last.png'       # the checker's own last request outside the site (see CHECKER)

def check_site(site: Path, pages: list, math: list = (), timeout: float = 120) -> dict:
    """Serve `site` on 127.0.0.1, open a checker page in headless Chromium (network blocked) that visits `pages` and checks the
    equations of `math` (some of them); returns its report, with the requests that left the site (`offsite`, from the
    browser's reports) and the site's requests that failed (`failed`, from the server) added to its problems."""
    exe, box, done, flushed = browser(), {'csp': [], 'served': []}, threading.Event(), threading.Event()
    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
        def log_request(self, code='-', size='-'):                  # every request the site answered, with its status
            box['served'].append((self.path, int(code), self.headers.get('Referer', '')))
        def end_headers(self):
            self.send_header('Content-Security-Policy-Report-Only', CSP); super().end_headers()
        def do_GET(self):
            if self.path == '/__check__.html':
                return self.reply(200, 'text/html', (CHECKER % (json.dumps(pages), json.dumps(math), json.dumps(SENTINEL))).encode())
            if self.path == '/__wait__':                             # holds the checker page's load event until the report is in
                done.wait(timeout); return self.reply(204, 'text/plain', b'')
            return super().do_GET()
        def do_POST(self):
            body = self.rfile.read(int(self.headers['Content-Length']))
            if self.path == '/__csp__':
                c = json.loads(body).get('csp-report', {})
                if c.get('blocked-uri') == SENTINEL: flushed.set()
                else: box['csp'].append(c)
            else:                                                    # the checker's report, once the policy reports are in
                box['flushed'] = flushed.wait(10); box['report'] = json.loads(body); done.set()
            self.reply(200, 'text/plain', b'ok')
        def reply(self, code, ctype, body):
            self.send_response(code); self.send_header('Content-Type', ctype); self.send_header('Content-Length', str(len(body)))
            self.end_headers(); self.wfile.write(body)
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp(prefix='chromium-')
    try:
        cmd = [exe, '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
               '--disable-sync', '--no-first-run', '--disable-dev-shm-usage', f'--user-data-dir={profile}',
               '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',     # offline: any other host fails at once
               '--dump-dom', f'http://127.0.0.1:{srv.server_address[1]}/__check__.html']
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
    finally:
        done.set(); srv.shutdown(); srv.server_close(); shutil.rmtree(profile, ignore_errors=True)
    if 'report' not in box: raise AssertionError(f"the checker page did not report (chromium rc={p.returncode}): {p.stderr[-2000:]}")
    if not box['flushed']: raise AssertionError("Chromium sent no report for the checker's own request outside the site: requests go unseen")
    r, origin = box['report'], f'http://127.0.0.1:{srv.server_address[1]}/'
    page = lambda url: url[len(origin):] if url.startswith(origin) else url
    r['offsite'] = sorted({(page(c.get('document-uri', '')), c.get('blocked-uri', '')) for c in box['csp']
                           if urlsplit(c.get('blocked-uri', '')).scheme in NETWORK})
    r['failed'] = sorted({(page(ref), path, code) for path, code, ref in box['served'] if code >= 400})
    r['requests'] = len(box['served'])
    r['problems'] += [f'{d}: request to {u} (not on the site: fails offline)' for d, u in r['offsite']]
    r['problems'] += [f'{d or "?"}: {u} -> HTTP {c}' for d, u, c in r['failed']]
    return r

def site_pages(site: Path) -> list:
    return ['index.html'] + sorted(f'nbs/{p.name}' for p in (site/'nbs').glob('*.html'))

# chapters whose equations are typeset in the test: display equations (00, 01) and many inline ones (06); every page
# with equations would take about a minute more
MATH_PAGES = ['nbs/00_etf.html', 'nbs/01_sse_c.html', 'nbs/06_fedloge.html']

@pytest.fixture(scope='session')   # built once: `make test` runs a test file on one worker (--dist loadfile)
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp('docs')/'_site'
    subprocess.run([sys.executable, str(ROOT/'scripts'/'build_docs.py'), '--out', str(out), '--quiet'], check=True, timeout=300,
                   env={**os.environ, 'OMP_NUM_THREADS': '1'})
    return out

def test_index_lists_every_chapter(site):
    "One row per notebook, in reading order, with the title and description of its first markdown cell."
    nbs = sorted(p.stem for p in (ROOT/'nbs').glob('*.ipynb'))
    page = (site/'index.html').read_text()
    listed = re.findall(r'<a href="nbs/([^"]+)\.html">', page)
    assert listed == ['index'] + [n for n in nbs if n != 'index'], listed
    for n in listed: assert (site/'nbs'/f'{n}.html').exists(), n
    assert '>Federated engine</a>' in page and 'One round loop for every method' in page   # title and one line of 04_federated

def test_offline_images_links_and_equations(site):
    """With the network blocked, every page loads with no request outside the site and none that fails, every image of every
    page loads, every internal link reaches a page (and its anchor), and the equations of `MATH_PAGES` are typeset."""
    r = check_site(site, site_pages(site), MATH_PAGES)
    assert r['pages'] == len(site_pages(site)) and r['images'] > 0 and r['links'] > 0, r
    assert not r['problems'], '\n'.join(r['problems'])
    assert r['requests'] > len(site_pages(site)) and not r['offsite'] and not r['failed'], r   # the site's own files only
    assert all(r['equations'][p] > 0 for p in MATH_PAGES) and r['equations']['nbs/06_fedloge.html'] >= 50, r['equations']

def build_docs():
    "scripts/build_docs.py as a module (its exporter and page renderer)."
    import importlib.util
    spec = importlib.util.spec_from_file_location('build_docs', ROOT/'scripts'/'build_docs.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod

# a notebook as JupyterLab saves it with the widget state: a progress bar (tqdm.notebook's output) and an equation
WIDGET_NB = {'nbformat': 4, 'nbformat_minor': 5, 'metadata': {'widgets': {'application/vnd.jupyter.widget-state+json': {
    'version_major': 2, 'version_minor': 0, 'state': {'5e1f': {'model_module': '@jupyter-widgets/controls', 'model_module_version': '2.0.0',
                                                               'model_name': 'IntProgressModel', 'state': {'value': 3, 'max': 3}}}}}},
    'cells': [{'cell_type': 'markdown', 'id': 'a1', 'metadata': {}, 'source': '# Widgets\n\n> a widget output\n\nThe loss $\\ell(x) = x^2$.'},
              {'cell_type': 'code', 'id': 'a2', 'metadata': {}, 'execution_count': 1, 'source': 'for _ in tqdm(range(3)): pass',
               'outputs': [{'output_type': 'display_data', 'metadata': {}, 'data': {
                   'application/vnd.jupyter.widget-view+json': {'model_id': '5e1f', 'version_major': 2, 'version_minor': 0},
                   'text/plain': '100%|##########| 3/3 [00:00<00:00, 9.1it/s]'}}]}]}

def test_widget_output_offline(site, tmp_path):
    """A page with a widget output (the widget state saved) loads offline: no request outside the site, none that fails, the
    equation typeset and the output's stored text shown. nbconvert's `lab` template, which the site's template replaces,
    fails the same check: it loads require.js and the widget renderer from CDNs."""
    import nbformat
    from nbconvert import HTMLExporter
    bd, pages = build_docs(), ['nbs/widgets.html', 'nbs/widgets_lab.html']
    (tmp_path/'nbs').mkdir(); (tmp_path/'mathjax').symlink_to(site/'mathjax')
    (tmp_path/pages[0]).write_text(bd.render(bd.exporter(), WIDGET_NB, 'Widgets'))
    lab = HTMLExporter(template_name='lab', mathjax_url=bd.MATHJAX_URL)
    (tmp_path/pages[1]).write_text(lab.from_notebook_node(nbformat.from_dict(WIDGET_NB))[0])
    assert '3/3 [00:00&lt;00:00, 9.1it/s]' in (tmp_path/'nbs/widgets.html').read_text()       # the widget's stored text, shown
    r = check_site(tmp_path, pages, pages)
    assert r['pages'] == 2 and r['equations'] == {'nbs/widgets.html': 1, 'nbs/widgets_lab.html': 1}, r
    mine = [p for p in r['problems'] if p.startswith('nbs/widgets.html')]
    assert not mine and not [o for o in r['offsite'] if o[0] == 'nbs/widgets.html'], '\n'.join(mine)
    cdn = {u for d, u in r['offsite'] if d == 'nbs/widgets_lab.html'}
    assert any('require' in u for u in cdn) and any('html-manager' in u for u in cdn), r['offsite']
    with pytest.raises(SystemExit, match='would fetch'): bd.render(lab, WIDGET_NB, 'Widgets')   # the build refuses such a page

def test_broken_site_fails(site, tmp_path):
    """The check finds a missing linked figure, a corrupt embedded figure, a dead chapter link, a dead anchor, equations left
    as raw TeX because the site's MathJax is missing (a failed request), and a script from a CDN (a broken copy of the site)."""
    bad = tmp_path/'site'; shutil.copytree(site, bad)
    fig = next(bad.glob('results/**/*.png')); fig.unlink()
    pages = [p for p in site_pages(bad) if fig.name in (bad/p).read_text()]
    emb = next(p for p in site_pages(bad) if 'src="data:image/png;base64,iVBOR' in (bad/p).read_text())   # a figure kept as output
    (bad/emb).write_text((bad/emb).read_text().replace('src="data:image/png;base64,iVBOR', 'src="data:image/png;base64,AAAAiVBOR', 1))
    idx = bad/'index.html'
    idx.write_text(idx.read_text().replace('href="nbs/00_etf.html"', 'href="nbs/00_nope.html"')
                                  .replace('</body>', '<a href="nbs/04_federated.html#No-such-section">x</a></body>'))
    shutil.rmtree(bad/'mathjax')
    math, cdn = 'nbs/01_sse_c.html', 'https://cdnjs.cloudflare.com/ajax/libs/require.js/2.1.10/require.min.js'
    (bad/emb).write_text((bad/emb).read_text().replace('</title>', f'</title><script src="{cdn}"></script>', 1))
    probs = '\n'.join(check_site(bad, ['index.html', emb, math] + [p for p in pages if p not in (emb, math)], [math])['problems'])
    assert f'image ../{fig.relative_to(bad)} does not load' in probs, probs
    assert f'{emb}: image data:image/png;base64,AAAAiVBOR' in probs, probs
    assert 'link nbs/00_nope.html -> no such page' in probs, probs
    assert 'no anchor #No-such-section' in probs, probs
    assert f'{math}: MathJax did not load from ../mathjax/MathJax.js' in probs, probs
    assert f'{math}: raw TeX in the page: ' in probs and 'l_{norm}' in probs, probs
    assert f'{math}: /mathjax/MathJax.js?config=' in probs and '-> HTTP 404' in probs, probs
    assert f'{emb}: request to {cdn} (not on the site' in probs, probs

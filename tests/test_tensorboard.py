"""`--tensorboard true`: a run's events under OUT/tb, read back with TensorBoard's own reader (GM and PM with many/med/few,
the training loss, psi's norms, the per-client histogram, the config as hparams, the values of history.csv), then
`tensorboard --logdir` started on 127.0.0.1 and its scalars page opened in headless Chromium, which must list the run's
tags (the page is read through a small same-origin proxy, as tests/test_docs.py reads the site, because TensorBoard draws
its cards inside shadow roots that `--dump-dom` does not print)."""
import csv, http.server, json, os, shutil, socket, subprocess, sys, tempfile, threading, time, urllib.request
from pathlib import Path
import pytest

tb = pytest.importorskip('tensorboard', reason="the tensorboard extra: pip install -e '.[tensorboard]' (make setup installs it)")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from fedloge_nb.federated import FedConfig
from fedloge_nb.engine import run_fl

BROWSERS = ('chromium', 'chromium-browser', 'google-chrome')
WANT = ['GM/gm_acc', 'GM/gm_many', 'GM/gm_med', 'GM/gm_few', 'PM/pm_acc', 'train/loss', 'norms/psi_norm_mean']
CARDS = WANT[:5]                                 # the page opens the first sections' cards; the others are listed by section
SECTIONS = ['GM', 'PM', 'train', 'norms', 'final']

@pytest.fixture(scope='module')
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp('tb') / 'fedloge_digits'
    cfg = FedConfig(method='fedloge', dataset='digits', imb_factor=10, clients=4, model='mlp', frac=1.0, rounds=4, eval_every=2,
                    batch_size=16, lr=0.1, device='cpu', hp={'sse_steps': 100}, tensorboard=True)
    run_fl(cfg, out=out, progress=False)
    return out

def test_events_read_back(run_dir):
    ea = EventAccumulator(str(run_dir / 'tb'), size_guidance={'scalars': 0, 'histograms': 0, 'tensors': 0}); ea.Reload()
    tags = set(ea.Tags()['scalars'])
    assert set(WANT) | {'norms/psi_norm_min', 'norms/psi_norm_max', 'final/gm_acc', 'final/pm_acc'} <= tags, sorted(tags)
    hist = list(csv.DictReader(open(run_dir / 'history.csv')))
    assert [(e.step, round(e.value, 4)) for e in ea.Scalars('GM/gm_acc')] == [(int(h['round']), round(float(h['gm_acc']), 4)) for h in hist]
    assert [e.step for e in ea.Scalars('train/loss')] == [1, 2, 3, 4]                     # every round
    s = json.loads((run_dir / 'summary.json').read_text())
    assert round(ea.Scalars('final/pm_acc')[-1].value, 4) == round(s['pm_acc'], 4)       # after LA-FR's finetuning
    assert {'PM/client_acc', 'norms/psi_norms'} <= set(ea.Tags()['histograms'])
    assert ea.Histograms('PM/client_acc')[0].histogram_value.num == 4                     # one value per client
    hp = [plugin_data_pb2.HParamsPluginData.FromString(c) for c in ea.PluginTagToContent('hparams').values()]
    start = next(h.session_start_info for h in hp if h.HasField('session_start_info'))
    assert start.hparams['method'].string_value == 'fedloge' and start.hparams['hp.sse_steps'].number_value == 100
    assert 'tensorboard' not in s['config']                                               # not part of the run's key

def free_port() -> int:
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

CHECKER = """<!DOCTYPE html><html><body><img src="/__wait__" alt=""><script>
const CARDS = %s, SECTIONS = %s;
function deepText(n, out) { if (n.shadowRoot) deepText(n.shadowRoot, out);
  for (const c of n.childNodes) { if (c.nodeType === 3) out.push(c.data); else deepText(c, out); } return out; }
const f = document.createElement('iframe'); f.style.cssText = 'width:1400px;height:1000px'; f.src = '/#scalars'; document.body.appendChild(f);
const t0 = Date.now();
(function poll() {
  let nodes = []; try { nodes = deepText(f.contentDocument.body, []); } catch (e) {}
  const text = nodes.join(' '), exact = new Set(nodes.map(t => t.trim()));
  const found = CARDS.filter(t => exact.has(t) || exact.has('tag: ' + t)), sections = SECTIONS.filter(t => exact.has(t));
  if ((found.length === CARDS.length && sections.length === SECTIONS.length) || Date.now() - t0 > 60000)
    fetch('/__report__', {method: 'POST', body: JSON.stringify({found: found, sections: sections, chars: text.length})});
  else setTimeout(poll, 500);
})();
</script></body></html>"""

def test_scalars_page_in_chromium(run_dir):
    exe = os.environ.get('CHROMIUM') or next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not exe: pytest.fail("chromium not found: install it with `apt-get install -y chromium` (or `make docs-deps`)", pytrace=False)
    port = free_port()
    srv = subprocess.Popen([str(Path(sys.executable).parent / 'tensorboard'), '--logdir', str(run_dir), '--host', '127.0.0.1', '--port', str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    box, done = {}, threading.Event()
    try:
        for _ in range(120):                                                   # up to 60 s for TensorBoard to read the events
            try:
                if 'GM/gm_acc' in urllib.request.urlopen(f'http://127.0.0.1:{port}/data/plugin/scalars/tags', timeout=2).read().decode(): break
            except OSError: pass
            time.sleep(0.5)
        class Proxy(http.server.BaseHTTPRequestHandler):                       # the checker page and TensorBoard on one origin
            def log_message(self, *a): pass
            def do_GET(self):
                if self.path == '/__check__': return self.reply(200, 'text/html', (CHECKER % (json.dumps(CARDS), json.dumps(SECTIONS))).encode())
                if self.path == '/__wait__': done.wait(90); return self.reply(404, 'text/plain', b'')
                self.forward()
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
                if self.path == '/__report__': box['report'] = json.loads(body); done.set(); return self.reply(200, 'text/plain', b'ok')
                self.forward(body)
            def forward(self, body=None):
                req = urllib.request.Request(f'http://127.0.0.1:{port}{self.path}', data=body, method=self.command,
                                             headers={k: v for k, v in self.headers.items() if k.lower() in ('content-type', 'accept')})
                try:
                    with urllib.request.urlopen(req, timeout=30) as r: self.reply(r.status, r.headers.get('Content-Type', ''), r.read())
                except urllib.error.HTTPError as e: self.reply(e.code, 'text/plain', e.read())
            def reply(self, code, ctype, data):
                self.send_response(code); self.send_header('Content-Type', ctype); self.send_header('Content-Length', str(len(data)))
                self.end_headers(); self.wfile.write(data)
        proxy = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Proxy)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        profile = tempfile.mkdtemp(prefix='chromium-')
        cmd = [exe, '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-dev-shm-usage', f'--user-data-dir={profile}',
               '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1', '--dump-dom', f'http://127.0.0.1:{proxy.server_address[1]}/__check__']
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
        proxy.shutdown(); shutil.rmtree(profile, ignore_errors=True)
    finally:
        srv.terminate(); srv.wait(10)
    assert 'report' in box, f"the checker page did not report (chromium rc={p.returncode}): {p.stderr[-1500:]}"
    assert box['report']['found'] == CARDS and box['report']['sections'] == SECTIONS, box['report']   # each card by its title
